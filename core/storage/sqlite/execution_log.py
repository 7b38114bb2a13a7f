"""Execution logs in the runtime database: rows, operations, history, ledger.

Writes ride the runtime database's group commit, so a checkpoint shares its fsync
with every other checkpoint and alarm change made at the same moment.
"""

from __future__ import annotations

import builtins
import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from alarmtop.core.model.aws_listing import StatusFilter
from alarmtop.core.model.execution_timers import (
    EXECUTION_TIMER,
    execution_timers,
    may_hold_timers,
    op_timers,
)
from alarmtop.core.model.keys import Cursor
from alarmtop.core.model.operations import ExecutionRecord, OperationRecord
from alarmtop.core.model.storage_values import Counts, LogChain
from alarmtop.core.storage.execution_log import ChainLink, ExecutionLogBase
from alarmtop.core.storage.sqlite import reads
from alarmtop.core.storage.sqlite.database import SqliteDatabase, WriteFn

# One encoder for every row: json.dumps with any option builds a new encoder per call.
_dumps = json.JSONEncoder(separators=(",", ":")).encode


class ChainedWrite(ChainLink):
    """A write of the runtime database that belongs to a `LogChain`."""

    __slots__ = ()

    def __call__(self, conn: sqlite3.Connection) -> None:
        self.check()
        self.fn(conn)


class SqliteExecutionLog(ExecutionLogBase):
    """`ExecutionLog` on the SQLite runtime database."""

    def __init__(self, db: SqliteDatabase, counters: Callable[[], Counts]) -> None:
        super().__init__(db, counters)
        self._db: SqliteDatabase = db

    def checkpoint_write(self, execution_id: str, record: ExecutionRecord | None = None,
                         ops: Sequence[OperationRecord] = (),
                         events: Sequence[dict[str, Any]] = (),
                         chain: LogChain | None = None, *,
                         marks: Mapping[str, str] | None = None,
                         drop_ops: Sequence[str] = (),
                         drop_marks: Sequence[str] = ()) -> WriteFn:
        """A checkpoint as a write to commit with others (the rows are taken now); in
        `chain`, it refuses when an earlier write of the chain was refused.

        The execution's timers (`core.durable.timers`) are rewritten for every op and
        record in it, in the same transaction; `drop_ops`/`drop_marks` (a redrive's
        reset) are deleted first."""
        rec_row = None if record is None else (
            record.id, record.name, record.version, record.status.value, record.created_ms,
            record.updated_ms, _dumps(record.to_dict()))
        op_rows = [(execution_id, op.id, _dumps(op.to_dict())) for op in ops]
        ev_rows = [(execution_id, ev["EventId"], _dumps(ev)) for ev in events]
        write = _rows_write(rec_row, op_rows, ev_rows)
        # Most checkpoints carry one plain step and nothing else: they get the plain
        # write above, with nothing built for the side tables.
        pre = _drops_write(execution_id, drop_ops, drop_marks) if drop_ops or drop_marks \
            else None
        post = _side_write(execution_id, record, ops, marks)
        if pre is not None or post is not None:
            write = _in_order(pre, write, post)
        return write if chain is None else ChainedWrite(write, chain)

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

    async def marks(self, execution_id: str) -> dict[str, str]:
        """The values `ctx.now()`/`ctx.random()` recorded, by key."""
        def read(conn: sqlite3.Connection) -> dict[str, str]:
            return dict(conn.execute("SELECT key, value FROM execution_marks WHERE "
                                     "execution_id = ?", (execution_id,)).fetchall())
        return await self._db.read(read)

    async def timers(self, limit: int = 100, after: Sequence[Any] | None = None,
                     execution_id: str | None = None) -> builtins.list[dict[str, Any]]:
        """Pending execution timers, soonest first, paged by key: `after` is the
        `key` of the last row of the previous page."""
        def read(conn: sqlite3.Connection) -> builtins.list[dict[str, Any]]:
            where, params = [], []
            if after is not None:
                where.append("(t.due_ms, t.execution_id, t.op_id, t.kind) > (?,?,?,?)")
                params += list(after)
            if execution_id is not None:
                where.append("t.execution_id = ?")
                params.append(execution_id)
            sql = ("SELECT t.execution_id, t.op_id, t.kind, t.due_ms, t.name, e.name, e.status, "
                   "json_extract(e.data, '$.paused') FROM execution_timers t JOIN executions e "
                   "ON e.id = t.execution_id" + (" WHERE " + " AND ".join(where) if where
                                                  else "") +
                   " ORDER BY t.due_ms, t.execution_id, t.op_id, t.kind LIMIT ?")
            rows = conn.execute(sql, [*params, limit]).fetchall()
            return [{"execution_id": r[0], "op_id": r[1] or None, "kind": r[2],
                     "due_ms": r[3], "name": r[4], "handler": r[5], "status": r[6],
                     "paused": r[7] is not None, "key": [r[3], r[0], r[1], r[2]]}
                    for r in rows]
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

    async def count_matching(self, status: str | None, contains: str) -> int:
        return await self._db.read_only(lambda conn: reads.execution_count(conn, status,
                                                                           contains))

    async def page(self, after: Cursor | None = None, limit: int = 50, *, offset: int = 0,
                   status: str | None = None, contains: str | None = None,
                   desc: bool = False) -> builtins.list[ExecutionRecord]:
        """On the read connection, by the urgency index (migrations.py: the counters)."""
        rows = await self._db.read_only(lambda conn: reads.execution_page(
            conn, after, limit, offset=offset, status=status, contains=contains, desc=desc))
        return [ExecutionRecord.from_dict(d) for d in rows]

    async def by_function(self, function: str, *, statuses: StatusFilter | None = None,
                          started_from_ms: int | None = None, started_to_ms: int | None = None,
                          version: str | None = None, execution_id: str | None = None,
                          after: tuple[int, str] | None = None, limit: int = 50,
                          desc: bool = True) -> builtins.list[ExecutionRecord]:
        """On the read connection, by the function index (schema.py: the Lambda API)."""
        rows = await self._db.read_only(lambda conn: reads.executions_by_function(
            conn, function, statuses=statuses, started_from_ms=started_from_ms,
            started_to_ms=started_to_ms, version=version, execution_id=execution_id,
            after=after, limit=limit, desc=desc))
        return [ExecutionRecord.from_dict(d) for d in rows]

    def delete_write(self, execution_id: str) -> WriteFn:
        """The execution and everything of it gone, as one write (its counts and its
        place among the objects known go by the delete trigger)."""
        def write(conn: sqlite3.Connection) -> None:
            for table in ("operations", "history", "execution_timers", "execution_marks"):
                conn.execute(f"DELETE FROM {table} WHERE execution_id = ?", (execution_id,))
            conn.execute("DELETE FROM executions WHERE id = ?", (execution_id,))
        return write

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


def _rows_write(rec_row: tuple[Any, ...] | None, op_rows: list[tuple[str, str, str]],
                ev_rows: list[tuple[str, int, str]]) -> WriteFn:
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
    return write


def _drops_write(execution_id: str, drop_ops: Sequence[str],
                 drop_marks: Sequence[str]) -> WriteFn:
    """A redrive's reset: the operations, their timers and the recorded values go."""
    dropped = [(execution_id, op_id) for op_id in drop_ops]
    dropped_marks = [(execution_id, k) for k in drop_marks]

    def write(conn: sqlite3.Connection) -> None:
        conn.executemany("DELETE FROM operations WHERE execution_id = ? AND op_id = ?",
                         dropped)
        conn.executemany("DELETE FROM execution_timers WHERE execution_id = ? AND op_id = ?",
                         dropped)
        conn.executemany("DELETE FROM execution_marks WHERE execution_id = ? AND key = ?",
                         dropped_marks)
    return write


def _side_write(execution_id: str, record: ExecutionRecord | None,
                ops: Sequence[OperationRecord], marks: Mapping[str, str] | None
                ) -> WriteFn | None:
    """The recorded values and the timer rows a checkpoint changes; None if none."""
    timer_keys: list[tuple[str, str]] = []
    timer_rows: list[tuple[Any, ...]] = []
    for op in ops:
        if may_hold_timers(op):
            timer_keys.append((execution_id, op.id))
            timer_rows += [(execution_id, t.op_id, t.kind, t.due_ms, t.name)
                           for t in op_timers(op)]
    finished = record is not None and record.finished
    if record is not None and record.timeout_s:
        timer_keys.append((execution_id, EXECUTION_TIMER))
        timer_rows += [(execution_id, t.op_id, t.kind, t.due_ms, t.name)
                       for t in execution_timers(record)]
    if not (marks or timer_keys or finished):
        return None
    mark_rows = [(execution_id, k, v) for k, v in (marks or {}).items()]

    def write(conn: sqlite3.Connection) -> None:
        if mark_rows:
            conn.executemany("INSERT OR REPLACE INTO execution_marks (execution_id, key, "
                             "value) VALUES (?,?,?)", mark_rows)
        _write_timers(conn, execution_id, timer_keys, timer_rows, finished)
    return write


def _in_order(*writes: WriteFn | None) -> WriteFn:
    parts = [w for w in writes if w is not None]

    def write(conn: sqlite3.Connection) -> None:
        for part in parts:
            part(conn)
    return write


def _write_timers(conn: sqlite3.Connection, execution_id: str,
                  keys: Sequence[tuple[str, str]], rows: Sequence[tuple[Any, ...]],
                  finished: bool) -> None:
    """Replace the timers of the ops (and record) a checkpoint wrote; a finished
    execution has none left."""
    if finished:
        conn.execute("DELETE FROM execution_timers WHERE execution_id = ?", (execution_id,))
        return
    if keys:
        conn.executemany("DELETE FROM execution_timers WHERE execution_id = ? AND op_id = ?",
                         keys)
    if rows:
        conn.executemany("INSERT OR REPLACE INTO execution_timers (execution_id, op_id, kind, "
                         "due_ms, name) VALUES (?,?,?,?,?)", rows)
