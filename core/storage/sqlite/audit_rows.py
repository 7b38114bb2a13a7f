"""The audit log in the SQLite runtime database: one row per operator command."""

from __future__ import annotations

import builtins
import json
import sqlite3
from typing import Any

from alarmtop.core.model.keys import Cursor
from alarmtop.core.storage.audit_rows import AUDIT_INSERT_COLUMNS, AuditRowsBase, audit_values
from alarmtop.core.storage.sqlite import reads
from alarmtop.core.storage.sqlite.database import SqliteDatabase

_dumps = json.JSONEncoder(separators=(",", ":")).encode


class SqliteAuditRows(AuditRowsBase):
    """`AuditRows` on the SQLite runtime database."""

    def __init__(self, db: SqliteDatabase, node_id: str | None = None) -> None:
        self._db = db
        self.node_id = node_id  # written into every audit row: which node ran the command

    async def audit_append(self, entry: dict[str, Any]) -> None:
        row = audit_values(entry, self.node_id, int)

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(f"INSERT INTO audit ({AUDIT_INSERT_COLUMNS}) VALUES "
                         "(?,?,?,?,?,?,?,?,?)", row)
        await self._db.submit(extra=write)

    async def audit_page(self, after: Cursor | None = None, limit: int = 100, *,
                         offset: int = 0, desc: bool = True) -> builtins.list[dict[str, Any]]:
        """On the read connection, by `seq` (the table's own key)."""
        return await self._db.read_only(lambda conn: reads.audit_page(
            conn, after, limit, offset=offset, desc=desc))

    async def audit_count(self) -> int:
        return int(await self._db.read_only(
            lambda conn: conn.execute("SELECT count(*) FROM audit").fetchone()[0]))

    async def audit_prune(self, oldest: int, before_ms: int | None = None) -> int:
        gone = [0]

        def write(conn: sqlite3.Connection) -> None:
            # The oldest rows by key, then their times: the scan is bounded by `oldest`
            # however large the log is.
            gone[0] = conn.execute(
                "DELETE FROM audit WHERE seq IN (SELECT seq FROM audit ORDER BY seq LIMIT ?) "
                "AND (? IS NULL OR at_ms < ?)", (oldest, before_ms, before_ms)).rowcount
        await self._db.submit(extra=write)
        return gone[0]
