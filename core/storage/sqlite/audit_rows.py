"""The audit log in the SQLite runtime database: one row per operator command."""

from __future__ import annotations

import builtins
import json
import sqlite3
from typing import Any

from alarmtop.core.model.keys import Cursor
from alarmtop.core.storage.sqlite import reads
from alarmtop.core.storage.sqlite.database import SqliteDatabase

_dumps = json.JSONEncoder(separators=(",", ":")).encode


class SqliteAuditRows:
    """`AuditRows` on the SQLite runtime database."""

    def __init__(self, db: SqliteDatabase, node_id: str | None = None) -> None:
        self._db = db
        self.node_id = node_id  # written into every audit row: which node ran the command

    async def audit_append(self, entry: dict[str, Any]) -> None:
        row = (entry["at_ms"], entry["actor"], entry.get("role"), entry["action"],
               entry.get("target"), entry.get("reason"), 1 if entry.get("ok", True) else 0,
               _dumps(entry.get("detail")), self.node_id)

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO audit (at_ms, actor, role, action, target, reason, ok, "
                         "detail, node) VALUES (?,?,?,?,?,?,?,?,?)", row)
        await self._db.submit(extra=write)

    async def audit_list(self, limit: int = 100, offset: int = 0) -> builtins.list[dict[str, Any]]:
        """The newest rows first, by offset (see `audit_page`)."""
        return await self.audit_page(None, limit, offset=offset)

    async def audit_page(self, after: Cursor | None = None, limit: int = 100, *,
                         offset: int = 0, desc: bool = True) -> builtins.list[dict[str, Any]]:
        """On the read connection, by `seq` (the table's own key)."""
        return await self._db.read_only(lambda conn: reads.audit_page(
            conn, after, limit, offset=offset, desc=desc))


