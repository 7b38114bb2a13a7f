"""Execution logs in the runtime database: rows, operations, history, ledger, audit.

Writes ride the alarm index's group commit, so a checkpoint shares its fsync
with every other checkpoint and alarm change made at the same moment.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from alarmtop.core.durable.operations import ExecutionRecord, OperationRecord
from alarmtop.core.errors import StorageError
from alarmtop.core.storage import sqlite_reads as R
from alarmtop.core.storage.interface import LogChain
from alarmtop.core.storage.keys import Cursor
from alarmtop.core.storage.sqlite_index import SqliteAlarmIndex, WriteFn

# One encoder for every row: json.dumps with any option builds a new encoder per call.
_dumps = json.JSONEncoder(separators=(",", ":")).encode


class ChainBroken(StorageError):
    """An earlier write of the same invocation's log was not made."""


class ChainedWrite:
    """A write of the runtime database that belongs to a `LogChain`."""

    __slots__ = ("chain", "fn")

    def __init__(self, fn: WriteFn, chain: LogChain) -> None:
        self.fn, self.chain = fn, chain

    def __call__(self, conn: sqlite3.Connection) -> None:
        if self.chain.broken:
            raise ChainBroken("an earlier checkpoint of this invocation was not written; "
                              "the invocation runs again from what was")
        self.fn(conn)

    def refused(self) -> None:
        self.chain.broken = True


class SqliteExecutionStore:
    def __init__(self, db: SqliteAlarmIndex) -> None:
        self._db = db

    def checkpoint(self, execution_id: str, record: ExecutionRecord | None = None,
                   ops: Sequence[OperationRecord] = (),
                   events: Sequence[dict[str, Any]] = (),
                   chain: LogChain | None = None) -> asyncio.Future[None]:
        """Queue a checkpoint now (its place among writes is fixed); await it for durability."""
        return self._db.submit(extra=self.checkpoint_write(execution_id, record, ops, events,
                                                           chain))

    @staticmethod
    def checkpoint_write(execution_id: str, record: ExecutionRecord | None = None,
                         ops: Sequence[OperationRecord] = (),
                         events: Sequence[dict[str, Any]] = (),
                         chain: LogChain | None = None) -> WriteFn:
        """A checkpoint as a write to commit with others (the rows are taken now); in
        `chain`, it refuses when an earlier write of the chain was refused."""
        rec_row = None if record is None else (
            record.id, record.name, record.version, record.status.value, record.created_ms,
            record.updated_ms, _dumps(record.to_dict()))
        op_rows = [(execution_id, op.id, _dumps(op.to_dict())) for op in ops]
        ev_rows = [(execution_id, ev["EventId"], _dumps(ev)) for ev in events]

        def write(conn: sqlite3.Connection) -> None:
            if rec_row is not None:
                conn.execute("INSERT OR REPLACE INTO executions (id, name, version, status, "
                             "created_ms, updated_ms, data) VALUES (?,?,?,?,?,?,?)", rec_row)
            if op_rows:
                conn.executemany("INSERT OR REPLACE INTO operations (execution_id, op_id, data) "
                                 "VALUES (?,?,?)", op_rows)
            if ev_rows:
                conn.executemany("INSERT INTO history (execution_id, event_id, data) "
                                 "VALUES (?,?,?)", ev_rows)

        return write if chain is None else ChainedWrite(write, chain)

    def submit(self, write: WriteFn) -> asyncio.Future[None]:
        return self._db.submit(extra=write)

    async def flush(self) -> None:
        """Wait until every write queued so far is durable."""
        await self._db.submit()

    async def get(self, execution_id: str) -> ExecutionRecord | None:
        def read(conn: sqlite3.Connection) -> ExecutionRecord | None:
            row = conn.execute("SELECT data FROM executions WHERE id = ?",
                               (execution_id,)).fetchone()
            return None if row is None else ExecutionRecord.from_dict(json.loads(row[0]))
        return await self._db.read(read)

    async def operations(self, execution_id: str) -> list[OperationRecord]:
        def read(conn: sqlite3.Connection) -> list[OperationRecord]:
            rows = conn.execute("SELECT data FROM operations WHERE execution_id = ?",
                                (execution_id,)).fetchall()
            return [OperationRecord.from_dict(json.loads(r[0])) for r in rows]
        return await self._db.read(read)

    async def max_event_id(self, execution_id: str) -> int:
        def read(conn: sqlite3.Connection) -> int:
            row = conn.execute("SELECT max(event_id) FROM history WHERE execution_id = ?",
                               (execution_id,)).fetchone()
            return int(row[0] or 0)
        return await self._db.read(read)

    async def history(self, execution_id: str, after: int = 0,
                      limit: int = -1) -> list[dict[str, Any]]:
        def read(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            rows = conn.execute("SELECT data FROM history WHERE execution_id = ? AND "
                                "event_id > ? ORDER BY event_id LIMIT ?",
                                (execution_id, after, limit)).fetchall()
            return [json.loads(r[0]) for r in rows]
        return await self._db.read(read)

    async def list(self, status: str | None = None, limit: int = 100,
                   offset: int = 0) -> list[ExecutionRecord]:
        """Executions most in need of a person first (see `page`), by offset."""
        return await self.page(None, limit, offset=offset, status=status)

    async def page(self, after: Cursor | None = None, limit: int = 50, *, offset: int = 0,
                   status: str | None = None, contains: str | None = None,
                   desc: bool = False) -> builtins.list[ExecutionRecord]:
        """On the read connection, by the urgency index (migration 4)."""
        rows = await self._db.read_only(lambda conn: R.execution_page(
            conn, after, limit, offset=offset, status=status, contains=contains, desc=desc))
        return [ExecutionRecord.from_dict(d) for d in rows]

    async def count(self, status: str | None = None, contains: str | None = None) -> int:
        if contains:
            return await self._db.read_only(lambda conn: R.execution_count(conn, status,
                                                                            contains))
        counts = await self.counts()
        return counts.get(status, 0) if status else sum(counts.values())

    async def counts(self) -> dict[str, int]:
        """From the counters the runtime database keeps with its writes: no scan."""
        return dict(self._db.counters().executions)

    # -- the idempotency ledger -----------------------------------------------------------

    async def ledger_deliver(self, key: str, value: Any, at_ms: int,
                             honour_key: bool = True) -> bool:
        """Record a keyed delivery; True when this is the first one for the key.

        "First" is decided inside the write itself (the count it leaves behind), so
        concurrent deliveries of one key can never all be first."""
        seen: list[int] = []

        def write(conn: sqlite3.Connection) -> None:
            row = conn.execute(
                "INSERT INTO ledger (key, value, at_ms, deliveries) VALUES (?,?,?,1) "
                "ON CONFLICT (key) DO UPDATE SET deliveries = deliveries + 1 "
                "RETURNING deliveries", (key, _dumps(value), at_ms)).fetchone()
            seen.append(int(row[0]))
        await self._db.submit(extra=write)
        return seen[-1] == 1 or not honour_key

    async def ledger_get(self, key: str) -> dict[str, Any] | None:
        def read(conn: sqlite3.Connection) -> dict[str, Any] | None:
            row = conn.execute("SELECT value, at_ms, deliveries FROM ledger WHERE key = ?",
                               (key,)).fetchone()
            return None if row is None else {"value": json.loads(row[0]), "at_ms": row[1],
                                             "deliveries": row[2]}
        return await self._db.read(read)

    # -- audit log ------------------------------------------------------------------------

    async def audit_append(self, entry: dict[str, Any]) -> None:
        row = (entry["at_ms"], entry["actor"], entry.get("role"), entry["action"],
               entry.get("target"), entry.get("reason"), 1 if entry.get("ok", True) else 0,
               _dumps(entry.get("detail")))

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO audit (at_ms, actor, role, action, target, reason, ok, "
                         "detail) VALUES (?,?,?,?,?,?,?,?)", row)
        await self._db.submit(extra=write)

    async def audit_list(self, limit: int = 100, offset: int = 0) -> builtins.list[dict[str, Any]]:
        """The newest rows first, by offset (see `audit_page`)."""
        return await self.audit_page(None, limit, offset=offset)

    async def audit_page(self, after: Cursor | None = None, limit: int = 100, *,
                         offset: int = 0, desc: bool = True) -> builtins.list[dict[str, Any]]:
        """On the read connection, by `seq` (the table's own key)."""
        return await self._db.read_only(lambda conn: R.audit_page(
            conn, after, limit, offset=offset, desc=desc))
