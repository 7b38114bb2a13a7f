"""The audit log in the PostgreSQL runtime database: one row per operator command."""

from __future__ import annotations

import builtins
import json
from typing import TYPE_CHECKING, Any

from alarmtop.core.model.keys import Cursor
from alarmtop.core.storage.audit_rows import AUDIT_INSERT_COLUMNS, AuditRowsBase, audit_values
from alarmtop.core.storage.postgres import reads
from alarmtop.core.storage.postgres.database import PgDatabase
from alarmtop.core.storage.postgres.object_sql import rows_written
from alarmtop.core.storage.postgres.schema import SCHEMA

if TYPE_CHECKING:
    from alarmtop.core.storage.postgres.database import PgConn

_dumps = json.JSONEncoder(separators=(",", ":")).encode


class PgAuditRows(AuditRowsBase):
    """`AuditRows` on the PostgreSQL runtime database."""

    def __init__(self, db: PgDatabase, node_id: str | None = None) -> None:
        self._db = db
        self.node_id = node_id  # written into every audit row: which node ran the command

    async def audit_append(self, entry: dict[str, Any]) -> None:
        row = audit_values(entry, self.node_id)

        async def write(conn: PgConn) -> None:
            await conn.execute(f"INSERT INTO {SCHEMA}.audit ({AUDIT_INSERT_COLUMNS}) VALUES "
                               "($1,$2,$3,$4,$5,$6,$7,$8,$9)", *row)
        await self._db.submit(extra=write)

    async def audit_page(self, after: Cursor | None = None, limit: int = 100, *,
                         offset: int = 0, desc: bool = True) -> builtins.list[dict[str, Any]]:
        """By `seq` (the table's own key)."""
        sql, params = reads.audit_page(after, limit, offset=offset, desc=desc)
        out = [dict(zip(reads.AUDIT_COLUMNS, r, strict=True))
               for r in await self._db.fetch(sql, *params)]
        for d in out:
            d["ok"], d["detail"] = bool(d["ok"]), json.loads(d["detail"])
        return out

    async def audit_count(self) -> int:
        rows = await self._db.fetch(f"SELECT count(*) FROM {SCHEMA}.audit")
        return int(rows[0][0])

    async def audit_prune(self, oldest: int, before_ms: int | None = None) -> int:
        gone = [0]

        async def write(conn: PgConn) -> None:
            status = await conn.execute(
                f"DELETE FROM {SCHEMA}.audit WHERE seq IN (SELECT seq FROM {SCHEMA}.audit "
                "ORDER BY seq LIMIT $1) AND ($2::bigint IS NULL OR at_ms < $2::bigint)",
                oldest, before_ms)
            gone[0] = rows_written(status)
        await self._db.submit(extra=write)
        return gone[0]
