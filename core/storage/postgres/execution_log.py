"""Execution logs, history and the ledger on PostgreSQL.

The same shape as the SQLite store: checkpoints ride the runtime database's group
commit (so a log and the alarm that acts on it can share one transaction), reads
take connections from the pool.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from alarmtop.core.model.aws_listing import StatusFilter
from alarmtop.core.model.errors import LeaseLost
from alarmtop.core.model.execution_timers import (
    EXECUTION_TIMER,
    execution_timers,
    may_hold_timers,
    op_timers,
)
from alarmtop.core.model.keys import Cursor
from alarmtop.core.model.operations import EXECUTION_CLASS, ExecutionRecord, OperationRecord
from alarmtop.core.model.storage_values import Counts, LogChain
from alarmtop.core.storage.execution_log import ChainLink, ExecutionLogBase
from alarmtop.core.storage.postgres import reads
from alarmtop.core.storage.postgres.alarm_rows import COLUMNS
from alarmtop.core.storage.postgres.database import PgDatabase, PgWrite
from alarmtop.core.storage.postgres.schema import SCHEMA

if TYPE_CHECKING:

    from alarmtop.core.storage.postgres.database import PgConn

_dumps = json.JSONEncoder(separators=(",", ":")).encode


_UPSERT_EXECUTION = (
    f"INSERT INTO {SCHEMA}.executions (id, name, version, status, created_ms, updated_ms, "
    "data) VALUES ($1,$2,$3,$4,$5,$6,$7) ON CONFLICT (id) DO UPDATE SET name = "
    "EXCLUDED.name, version = EXCLUDED.version, status = EXCLUDED.status, created_ms = "
    "EXCLUDED.created_ms, updated_ms = EXCLUDED.updated_ms, data = EXCLUDED.data")
_UPSERT_OP = (f"INSERT INTO {SCHEMA}.operations (execution_id, op_id, data) VALUES ($1,$2,$3) "
              "ON CONFLICT (execution_id, op_id) DO UPDATE SET data = EXCLUDED.data")
_INSERT_EVENT = (f"INSERT INTO {SCHEMA}.history (execution_id, event_id, data) VALUES "
                 "($1,$2,$3)")
_UPSERT_MARK = (f"INSERT INTO {SCHEMA}.execution_marks (execution_id, key, value) VALUES "
                "($1,$2,$3) ON CONFLICT (execution_id, key) DO UPDATE SET value = "
                "EXCLUDED.value")
_DELETE_TIMERS = (f"DELETE FROM {SCHEMA}.execution_timers WHERE execution_id = $1 AND "
                  "op_id = $2")
_UPSERT_TIMER = (f"INSERT INTO {SCHEMA}.execution_timers (execution_id, op_id, kind, due_ms, "
                 "name) VALUES ($1,$2,$3,$4,$5) ON CONFLICT (execution_id, op_id, kind) DO "
                 "UPDATE SET due_ms = EXCLUDED.due_ms, name = EXCLUDED.name")


class CheckpointRows:
    """The rows of one checkpoint, written by calling it with the transaction's
    connection. A run of plain checkpoints in one batch (no redrive's drops, no end
    of an execution) is written as one statement per table (`merged`): each
    statement is a round trip, and a group commit of 50 executions' steps would
    otherwise spend most of its time waiting on them. A batch made only of
    checkpoints without drops (`single`) goes as one statement, fence and alarm rows
    included (`MergedCheckpoints.alone`)."""

    __slots__ = ("dropped", "dropped_marks", "ev_rows", "execution_id", "fence_key",
                 "finished", "mark_rows", "merged", "op_rows", "rec_row", "single",
                 "timer_keys", "timer_rows")

    def __init__(self, execution_id: str, rec_row: tuple[Any, ...] | None,
                 op_rows: list[tuple[Any, ...]], ev_rows: list[tuple[Any, ...]],
                 mark_rows: list[tuple[Any, ...]], dropped: list[tuple[str, str]],
                 dropped_marks: list[tuple[str, str]], finished: bool,
                 timer_keys: list[tuple[str, str]], timer_rows: list[tuple[Any, ...]]) -> None:
        self.execution_id, self.rec_row, self.op_rows = execution_id, rec_row, op_rows
        # The execution is an object of its own: its log is written only while this node
        # holds the lease of that object's shard (the index fences the transaction).
        self.fence_key = (EXECUTION_CLASS, execution_id)
        self.ev_rows, self.mark_rows, self.dropped = ev_rows, mark_rows, dropped
        self.dropped_marks, self.finished = dropped_marks, finished
        self.timer_keys, self.timer_rows = timer_keys, timer_rows
        plain = not (dropped or dropped_marks or finished)
        self.merged: MergedCheckpoints | None = MERGED if plain else None
        # An execution's end too can go alone as one statement; a redrive's drops not.
        self.single: MergedCheckpoints | None = (
            None if dropped or dropped_marks else MERGED)

    async def __call__(self, conn: PgConn) -> None:
        if self.dropped:
            await conn.executemany(f"DELETE FROM {SCHEMA}.operations WHERE execution_id = $1 "
                                   "AND op_id = $2", self.dropped)
            await conn.executemany(_DELETE_TIMERS, self.dropped)
        if self.dropped_marks:
            await conn.executemany(f"DELETE FROM {SCHEMA}.execution_marks WHERE "
                                   "execution_id = $1 AND key = $2", self.dropped_marks)
        if self.rec_row is not None:
            await conn.execute(_UPSERT_EXECUTION, *self.rec_row)
        if self.op_rows:
            await conn.executemany(_UPSERT_OP, self.op_rows)
        if self.ev_rows:
            await conn.executemany(_INSERT_EVENT, self.ev_rows)
        if self.mark_rows:
            await conn.executemany(_UPSERT_MARK, self.mark_rows)
        if self.finished:
            await conn.execute(f"DELETE FROM {SCHEMA}.execution_timers WHERE "
                               "execution_id = $1", self.execution_id)
            return
        if self.timer_keys:
            await conn.executemany(_DELETE_TIMERS, self.timer_keys)
        if self.timer_rows:
            await conn.executemany(_UPSERT_TIMER, self.timer_rows)


def _parts(writes: Sequence[Any]) -> list[CheckpointRows]:
    parts: list[CheckpointRows] = []
    for w in writes:
        if isinstance(w, PgChainedWrite):
            w.check()
            w = w.fn
        assert isinstance(w, CheckpointRows)
        parts.append(w)
    return parts


def _timers(parts: Sequence[CheckpointRows]) -> dict[tuple[str, str], list[tuple[Any, ...]]]:
    """An op's timer rows are the ones of the last checkpoint that carried the op."""
    timers: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
    for p in parts:
        for key in p.timer_keys:
            timers[key] = []
        for row in p.timer_rows:
            timers.setdefault((row[0], row[1]), []).append(row)
    return timers


async def write_merged(conn: PgConn, writes: Sequence[Any]) -> None:
    """Plain checkpoints, in their order, as one statement per table. Rows keep their
    order (a later upsert of a key wins, as when written one by one)."""
    parts = _parts(writes)
    recs = [p.rec_row for p in parts if p.rec_row is not None]
    ops = [r for p in parts for r in p.op_rows]
    events = [r for p in parts for r in p.ev_rows]
    marks = [r for p in parts for r in p.mark_rows]
    timers = _timers(parts)
    if recs:
        await conn.executemany(_UPSERT_EXECUTION, recs)
    if ops:
        await conn.executemany(_UPSERT_OP, ops)
    if events:
        await conn.executemany(_INSERT_EVENT, events)
    if marks:
        await conn.executemany(_UPSERT_MARK, marks)
    if timers:
        await conn.executemany(_DELETE_TIMERS, list(timers))
        rows = [r for group in timers.values() for r in group]
        if rows:
            await conn.executemany(_UPSERT_TIMER, rows)


# A batch of checkpoints (plain ones, and an execution's end) with its alarm rows and
# its fence as ONE statement, outside an explicit transaction (a statement is its
# own): one round trip where BEGIN, the fence, a statement per table and COMMIT took
# five to eight. That bounded a sequential execution: its start, each step and its
# end are each such a batch. The fence's lease rows are locked for share and every
# write is conditional on it, so a node that lost a shard writes nothing. The
# sub-statements of one statement all see the rows as they were before it: an upsert
# may touch a key once, so the rows are made unique first (the last wins, as in
# order), the timers' delete spares the rows the insert writes, and an execution that
# ends in the batch has its timers deleted and none written. `old` (read before the
# statement) tells whether an execution was created or changed status, i.e. whether
# the counters moved.
_HELD = f"""
WITH held AS (
    SELECT s.shard FROM {SCHEMA}.shards s
    JOIN unnest($1::int[], $2::bigint[]) AS h(shard, epoch)
      ON s.shard = h.shard AND s.epoch = h.epoch
    WHERE s.owner = $3 FOR SHARE OF s
), ok AS (
    SELECT count(*) = cardinality($1::int[]) AS ok FROM held
)"""


def _ops_and_history(n: int) -> str:
    """The op upserts and history inserts, from parameters $n to $n+5."""
    return f""", o AS (
    INSERT INTO {SCHEMA}.operations (execution_id, op_id, data)
    SELECT * FROM unnest(${n}::text[], ${n + 1}::text[], ${n + 2}::text[])
    WHERE (SELECT ok FROM ok)
    ON CONFLICT (execution_id, op_id) DO UPDATE SET data = EXCLUDED.data
), h AS (
    INSERT INTO {SCHEMA}.history (execution_id, event_id, data)
    SELECT * FROM unnest(${n + 3}::text[], ${n + 4}::int[], ${n + 5}::text[])
    WHERE (SELECT ok FROM ok)
)"""


_FENCED = _HELD + f""", old AS (
    SELECT id, status FROM {SCHEMA}.executions WHERE id = ANY($4::text[])
), e AS (
    INSERT INTO {SCHEMA}.executions (id, name, version, status, created_ms, updated_ms, data)
    SELECT * FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[],
                         $9::bigint[], $10::text[]) WHERE (SELECT ok FROM ok)
    ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, version = EXCLUDED.version,
        status = EXCLUDED.status, created_ms = EXCLUDED.created_ms,
        updated_ms = EXCLUDED.updated_ms, data = EXCLUDED.data
)""" + _ops_and_history(11) + f""", m AS (
    INSERT INTO {SCHEMA}.execution_marks (execution_id, key, value)
    SELECT * FROM unnest($17::text[], $18::text[], $19::text[]) WHERE (SELECT ok FROM ok)
    ON CONFLICT (execution_id, key) DO UPDATE SET value = EXCLUDED.value
), td AS (
    DELETE FROM {SCHEMA}.execution_timers t USING unnest($20::text[], $21::text[]) AS k(e, o)
    WHERE (SELECT ok FROM ok) AND t.execution_id = k.e AND t.op_id = k.o
      AND NOT EXISTS (SELECT 1 FROM unnest($22::text[], $23::text[], $24::text[])
                      AS n(e, o, kind)
                      WHERE n.e = t.execution_id AND n.o = t.op_id AND n.kind = t.kind)
), ti AS (
    INSERT INTO {SCHEMA}.execution_timers (execution_id, op_id, kind, due_ms, name)
    SELECT * FROM unnest($22::text[], $23::text[], $24::text[], $25::bigint[], $26::text[])
    WHERE (SELECT ok FROM ok)
    ON CONFLICT (execution_id, op_id, kind) DO UPDATE SET due_ms = EXCLUDED.due_ms,
        name = EXCLUDED.name
), tf AS (
    DELETE FROM {SCHEMA}.execution_timers WHERE (SELECT ok FROM ok)
      AND execution_id = ANY($27::text[])
)"""
_ANSWER = """
SELECT (SELECT ok FROM ok), EXISTS (
    SELECT 1 FROM unnest($4::text[], $7::text[]) AS n(id, status)
    LEFT JOIN old ON old.id = n.id WHERE old.status IS DISTINCT FROM n.status)
"""
_ONE_STATEMENT = _FENCED + _ANSWER
# A sequential execution's step: its op and its history, nothing else. The empty
# sub-statements of the whole one cost a tenth of the step's commit.
_STEP_ONLY = _HELD + _ops_and_history(4) + "\nSELECT (SELECT ok FROM ok), false\n"
# The same with the batch's alarm rows (an execution's start arms its alarm, its end
# deletes it): deleted keys, then the upserted rows, one per key (the index's `final`).
_ALARM_COLUMNS = [*COLUMNS.split(", "), "due_ms", "shard"]
_ALARM_TYPES = ["text", "text", "bigint", "text", "int", "bigint", "text", "text", "bigint",
                "bigint", "bigint", "bigint", "boolean", "int", "bigint", "bigint", "int"]
_WITH_ALARMS = _FENCED + f""", ad AS (
    DELETE FROM {SCHEMA}.alarms a USING unnest($28::text[], $29::text[]) AS k(c, n)
    WHERE (SELECT ok FROM ok) AND a.object_class = k.c AND a.object_name = k.n
), au AS (
    INSERT INTO {SCHEMA}.alarms ({", ".join(_ALARM_COLUMNS)})
    SELECT * FROM unnest({", ".join(f"${30 + i}::{t}[]" for i, t in enumerate(_ALARM_TYPES))})
    WHERE (SELECT ok FROM ok)
    ON CONFLICT (object_class, object_name) DO UPDATE SET
        {", ".join(f"{c} = EXCLUDED.{c}" for c in _ALARM_COLUMNS[2:])}
)""" + _ANSWER


def _columns(rows: Sequence[tuple[Any, ...]], width: int) -> list[list[Any]]:
    return [[r[i] for r in rows] for i in range(width)] if rows else [[] for _ in range(width)]


def _last_by(rows: Sequence[tuple[Any, ...]], width: int) -> list[tuple[Any, ...]]:
    """The rows with unique keys (their first `width` values), the last of each kept."""
    return list({r[:width]: r for r in rows}.values())


FenceRows = tuple[list[int], list[int], str]  # shards, the epochs held, this node's id


class MergedCheckpoints:
    """The writer of a run of checkpoints: plain ones in an open transaction
    (`__call__`, beside other writes), or a batch with its alarm rows alone as one
    statement with its fence (`alone`, when `fits`)."""

    async def __call__(self, conn: PgConn, writes: Sequence[Any]) -> None:
        await write_merged(conn, writes)

    @staticmethod
    def fits(writes: Sequence[Any]) -> bool:
        """Whether `alone` can write them: nothing checkpointed for an execution after
        its end in the same batch (the statement deletes an ended one's timers from
        the rows as they were before it)."""
        ended: set[str] = set()
        for w in writes:
            part = w.fn if isinstance(w, PgChainedWrite) else w
            if not isinstance(part, CheckpointRows):
                return False
            if part.execution_id in ended:
                return False
            if part.finished:
                ended.add(part.execution_id)
        return True

    async def alone(self, conn: PgConn, writes: Sequence[Any], fence: FenceRows,
                    alarm_rows: Sequence[tuple[Any, ...]] = (),
                    alarm_deletes: Sequence[tuple[str, str]] = ()) -> bool:
        """Write them (and the alarm rows: `to_row`'s, one per key, none of them also
        deleted) in one statement, fenced; True when the counters may have moved.
        Raises LeaseLost (nothing written) when a shard is no longer this node's."""
        parts = _parts(writes)
        ended = {p.execution_id for p in parts if p.finished}
        recs = _last_by([p.rec_row for p in parts if p.rec_row is not None], 1)
        ops = _last_by([r for p in parts for r in p.op_rows], 2)
        events = [r for p in parts for r in p.ev_rows]
        marks = _last_by([r for p in parts for r in p.mark_rows], 2)
        timers = _timers([p for p in parts if p.execution_id not in ended])
        timer_rows = _last_by([r for group in timers.values() for r in group], 3)
        shards, epochs, node = fence
        if not (recs or marks or timers or ended or alarm_rows or alarm_deletes):
            row = await conn.fetchrow(_STEP_ONLY, shards, epochs, node, *_columns(ops, 3),
                                      *_columns(events, 3))
        else:
            args = [shards, epochs, node, *_columns(recs, 7), *_columns(ops, 3),
                    *_columns(events, 3), *_columns(marks, 3), [k[0] for k in timers],
                    [k[1] for k in timers], *_columns(timer_rows, 5), sorted(ended)]
            if alarm_rows or alarm_deletes:
                args += [[k[0] for k in alarm_deletes], [k[1] for k in alarm_deletes],
                         *_columns(alarm_rows, len(_ALARM_COLUMNS))]
            row = await conn.fetchrow(_WITH_ALARMS if alarm_rows or alarm_deletes
                                      else _ONE_STATEMENT, *args)
        assert row is not None
        if not row[0]:
            raise LeaseLost(f"this node ({node}) no longer holds shard(s) {shards}: nothing "
                            "of the write was kept; the objects' new owner carries on")
        return bool(row[1]) or bool(alarm_rows) or bool(alarm_deletes)


MERGED = MergedCheckpoints()


class PgChainedWrite(ChainLink):
    """A write of the runtime database that belongs to a `LogChain`; it carries what
    the committer looks for on its write (the fence key, the merged writers)."""

    __slots__ = ("fence_key", "merged", "single")

    def __init__(self, fn: PgWrite, chain: LogChain) -> None:
        super().__init__(fn, chain)
        self.merged = getattr(fn, "merged", None)
        self.single = getattr(fn, "single", None)
        self.fence_key = getattr(fn, "fence_key", None)

    async def __call__(self, conn: PgConn) -> None:
        self.check()
        await self.fn(conn)


class DeleteExecution:
    """An execution's rows deleted, fenced as its checkpoints are (by its object's shard)."""

    __slots__ = ("execution_id", "fence_key")

    def __init__(self, execution_id: str) -> None:
        self.execution_id = execution_id
        self.fence_key = (EXECUTION_CLASS, execution_id)

    async def __call__(self, conn: PgConn) -> None:
        for table in ("operations", "history", "execution_timers", "execution_marks"):
            await conn.execute(f"DELETE FROM {SCHEMA}.{table} WHERE execution_id = $1",
                               self.execution_id)
        await conn.execute(f"DELETE FROM {SCHEMA}.executions WHERE id = $1", self.execution_id)


class PgExecutionLog(ExecutionLogBase):
    """`ExecutionLog` on the PostgreSQL runtime database."""

    def __init__(self, db: PgDatabase, counters: Callable[[], Counts]) -> None:
        super().__init__(db, counters)
        self._db: PgDatabase = db

    def checkpoint_write(self, execution_id: str, record: ExecutionRecord | None = None,
                         ops: Sequence[OperationRecord] = (),
                         events: Sequence[dict[str, Any]] = (),
                         chain: LogChain | None = None, *,
                         marks: Mapping[str, str] | None = None,
                         drop_ops: Sequence[str] = (),
                         drop_marks: Sequence[str] = ()) -> PgWrite:
        """As SQLite's: the rows, then the execution's timers and recorded values, in the
        one transaction the write rides; a redrive's drops first."""
        rec_row = None if record is None else (
            record.id, record.name, record.version, record.status.value, record.created_ms,
            record.updated_ms, _dumps(record.to_dict()))
        op_rows = [(execution_id, op.id, _dumps(op.to_dict())) for op in ops]
        ev_rows = [(execution_id, ev["EventId"], _dumps(ev)) for ev in events]
        dropped = [(execution_id, op_id) for op_id in drop_ops]
        dropped_marks = [(execution_id, k) for k in drop_marks]
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
        mark_rows = [(execution_id, k, v) for k, v in (marks or {}).items()]

        write = CheckpointRows(execution_id, rec_row, op_rows, ev_rows, mark_rows, dropped,
                               dropped_marks, finished, timer_keys, timer_rows)
        return write if chain is None else PgChainedWrite(write, chain)

    async def marks(self, execution_id: str) -> dict[str, str]:
        rows = await self._db.fetch(f"SELECT key, value FROM {SCHEMA}.execution_marks WHERE "
                                     "execution_id = $1", execution_id)
        return {r[0]: r[1] for r in rows}

    async def timers(self, limit: int = 100, after: Sequence[Any] | None = None,
                     execution_id: str | None = None) -> builtins.list[dict[str, Any]]:
        where: list[str] = []
        params: list[Any] = []
        if after is not None:
            n = len(params)
            where.append(f"(t.due_ms, t.execution_id, t.op_id, t.kind) > "
                         f"(${n + 1}, ${n + 2}, ${n + 3}, ${n + 4})")
            params += list(after)
        if execution_id is not None:
            params.append(execution_id)
            where.append(f"t.execution_id = ${len(params)}")
        params.append(limit)
        rows = await self._db.fetch(
            f"SELECT t.execution_id, t.op_id, t.kind, t.due_ms, t.name, e.name, e.status, "
            f"(e.data::jsonb ->> 'paused') FROM {SCHEMA}.execution_timers t JOIN "
            f"{SCHEMA}.executions e ON e.id = t.execution_id"
            + (" WHERE " + " AND ".join(where) if where else "")
            + f" ORDER BY t.due_ms, t.execution_id, t.op_id, t.kind LIMIT ${len(params)}",
            *params)
        return [{"execution_id": r[0], "op_id": r[1] or None, "kind": r[2], "due_ms": r[3],
                 "name": r[4], "handler": r[5], "status": r[6], "paused": r[7] is not None,
                 "key": [r[3], r[0], r[1], r[2]]} for r in rows]

    async def get(self, execution_id: str) -> ExecutionRecord | None:
        rows = await self._db.fetch(f"SELECT data FROM {SCHEMA}.executions WHERE id = $1",
                                     execution_id)
        return ExecutionRecord.from_dict(json.loads(rows[0][0])) if rows else None

    async def operations(self, execution_id: str) -> builtins.list[OperationRecord]:
        rows = await self._db.fetch(f"SELECT data FROM {SCHEMA}.operations WHERE "
                                     "execution_id = $1", execution_id)
        return [OperationRecord.from_dict(json.loads(r[0])) for r in rows]

    async def max_event_id(self, execution_id: str) -> int:
        rows = await self._db.fetch(f"SELECT max(event_id) FROM {SCHEMA}.history WHERE "
                                     "execution_id = $1", execution_id)
        return int(rows[0][0] or 0)

    async def history(self, execution_id: str, after: int = 0,
                      limit: int = -1) -> builtins.list[dict[str, Any]]:
        rows = await self._db.fetch(
            f"SELECT data FROM {SCHEMA}.history WHERE execution_id = $1 AND event_id > $2 "
            "ORDER BY event_id LIMIT $3", execution_id, after, None if limit < 0 else limit)
        return [json.loads(r[0]) for r in rows]

    async def count_matching(self, status: str | None, contains: str) -> int:
        sql, params = reads.execution_count(status, contains)
        return int((await self._db.fetch(sql, *params))[0][0])

    async def page(self, after: Cursor | None = None, limit: int = 50, *, offset: int = 0,
                   status: str | None = None, contains: str | None = None,
                   desc: bool = False) -> builtins.list[ExecutionRecord]:
        """By the urgency index (schema.py: the counters migration), on a pooled connection."""
        sql, params = reads.execution_page(after, limit, offset=offset, status=status,
                                       contains=contains, desc=desc)
        return [ExecutionRecord.from_dict(json.loads(r[0]))
                for r in await self._db.fetch(sql, *params)]

    async def by_function(self, function: str, *, statuses: StatusFilter | None = None,
                          started_from_ms: int | None = None, started_to_ms: int | None = None,
                          version: str | None = None, execution_id: str | None = None,
                          after: tuple[int, str] | None = None, limit: int = 50,
                          desc: bool = True) -> builtins.list[ExecutionRecord]:
        """By the function index (schema.py: the Lambda API), on a pooled connection."""
        sql, params = reads.executions_by_function(
            function, statuses=statuses, started_from_ms=started_from_ms,
            started_to_ms=started_to_ms, version=version, execution_id=execution_id,
            after=after, limit=limit, desc=desc)
        return [ExecutionRecord.from_dict(json.loads(r[0]))
                for r in await self._db.fetch(sql, *params)]

    def delete_write(self, execution_id: str) -> PgWrite:
        """The execution and everything of it gone, as one write (its counts and its
        place among the objects known go by the delete trigger)."""
        return DeleteExecution(execution_id)

    # -- the idempotency ledger -----------------------------------------------------------

    async def ledger_deliver(self, key: str, value: Any, at_ms: int,
                             honour_key: bool = True) -> bool:
        """True the first time `key` is delivered: decided inside the write."""
        seen: builtins.list[int] = []

        async def write(conn: PgConn) -> None:
            n = await conn.fetchval(
                f"INSERT INTO {SCHEMA}.ledger (key, value, at_ms, deliveries) VALUES "
                "($1,$2,$3,1) ON CONFLICT (key) DO UPDATE SET deliveries = "
                f"{SCHEMA}.ledger.deliveries + 1 RETURNING deliveries", key, _dumps(value),
                at_ms)
            seen.append(int(n))
        await self._db.submit(extra=write)
        return seen[-1] == 1 or not honour_key

    async def ledger_get(self, key: str) -> dict[str, Any] | None:
        rows = await self._db.fetch(f"SELECT value, at_ms, deliveries FROM {SCHEMA}.ledger "
                                     "WHERE key = $1", key)
        if not rows:
            return None
        return {"value": json.loads(rows[0][0]), "at_ms": rows[0][1], "deliveries": rows[0][2]}
