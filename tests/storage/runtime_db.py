"""The SQLite runtime database with its alarm rows and execution log, put together
as `SqliteBackend` does, for tests that drive the database itself (its commits,
counters and salvage) without a runtime or object files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from alarmtop.core.model.alarm_policy import AlarmKey, AlarmRecord
from alarmtop.core.model.storage_values import Counts
from alarmtop.core.storage.sqlite.alarm_rows import AlarmRowWriter, SqliteAlarmRows
from alarmtop.core.storage.sqlite.audit_rows import SqliteAuditRows
from alarmtop.core.storage.sqlite.database import SqliteDatabase, WriteFn
from alarmtop.core.storage.sqlite.execution_log import SqliteExecutionLog
from alarmtop.core.storage.sqlite.salvage import salvage_into


class RuntimeDb:
    def __init__(self, path: Path) -> None:
        self.writer = AlarmRowWriter()
        self.db = SqliteDatabase(path, self.writer)
        self.rows = SqliteAlarmRows(self.db, self.writer)
        self.log = SqliteExecutionLog(self.db, self.writer.counters)
        self.audit = SqliteAuditRows(self.db)

    async def open(self) -> None:
        await self.db.open()

    async def close(self) -> None:
        await self.db.close()

    def submit(self, puts: Sequence[AlarmRecord] = (), deletes: Sequence[AlarmKey] = (),
               extra: WriteFn | None = None) -> Any:
        return self.db.submit(puts, deletes, extra)

    async def write(self, puts: Sequence[AlarmRecord], deletes: Sequence[AlarmKey] = (),
                    extra: WriteFn | None = None) -> None:
        await self.db.write(puts, deletes, extra)

    def counters(self) -> Counts:
        return self.rows.counters()

    async def recount(self) -> Counts:
        return await self.rows.recount()

    async def alarm_page(self, *args: Any, **kwargs: Any) -> list[AlarmRecord]:
        return await self.rows.alarm_page(*args, **kwargs)

    object_write = staticmethod(SqliteAlarmRows.object_write)

    async def salvage_from(self, source: Path) -> dict[str, Any]:
        return await salvage_into(self.db, self.writer, source)

    def __getattr__(self, name: str) -> Any:
        # Anything else of the old single object: the rows' reads, or the database's.
        for part in (self.rows, self.log, self.audit, self.db):
            if hasattr(part, name):
                return getattr(part, name)
        raise AttributeError(name)
