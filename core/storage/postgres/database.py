"""The alarm index on PostgreSQL: group commit on one connection, reads on a pool.

As on SQLite, concurrent writers hand their changes to one committer, which writes
everything queued in one transaction (one WAL flush), then tells each writer. The
committer is a task on the event loop with a connection of its own; reads take
connections from the pool. Every batch is fenced: it commits only while this node
still holds the lease of each shard it writes (`fence`), in the same transaction.

The counts an operator watches are kept by triggers in the transaction of each
write (schema.py: the counters migration) and read back by the committer after each batch
that may have moved them, and at least every second (other nodes write too):
`counters()` costs no I/O.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from alarmtop.core.model.alarm_policy import AlarmKey, AlarmRecord, AlarmState, Attempt
from alarmtop.core.model.errors import LeaseLost, StorageError
from alarmtop.core.model.keys import Cursor
from alarmtop.core.ports import Counts, ObjectEntry
from alarmtop.core.storage.batches import coalesce
from alarmtop.core.storage.faultpoints import FAULT_POINTS
from alarmtop.core.storage.postgres import reads
from alarmtop.core.storage.postgres.failures import storage_error
from alarmtop.core.storage.postgres.schema import SCHEMA

if TYPE_CHECKING:
    import asyncpg
    from asyncpg.pool import PoolConnectionProxy

    # A connection of its own, or one lent by the pool: both run statements alike.
    PgConn = asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]
    PooledConn = PoolConnectionProxy[asyncpg.Record]

T = TypeVar("T")
log = logging.getLogger("alarmtop.storage")
# A write of the backend's other tables, given the committer's connection.
PgWrite = Callable[["PgConn"], Awaitable[None]]
_Entry = tuple[Sequence[AlarmRecord], Sequence[AlarmKey], PgWrite | None, "asyncio.Future[None]"]
MAX_BATCH = 5_000
COUNTERS_IDLE_S = 1.0  # how often an idle committer reads the counters other nodes change

COLUMNS = ("object_class, object_name, scheduled_ms, state, retry_count, next_attempt_ms, "
           "last_error, attempts, started_ms, gen, hint_ms, hint_gen, in_file, attempt_count, "
           "paused_ms")
_UPSERT = (f"INSERT INTO {SCHEMA}.alarms ({COLUMNS}, due_ms, shard) VALUES "
           "($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17) "
           "ON CONFLICT (object_class, object_name) DO UPDATE SET "
           + ", ".join(f"{c} = EXCLUDED.{c}" for c in
                       [*COLUMNS.split(", ")[2:], "due_ms", "shard"]))


def to_row(rec: AlarmRecord, shard: int) -> tuple[Any, ...]:
    attempts = json.dumps([a.to_dict() for a in rec.attempts]) if rec.attempts else None
    return (rec.object_class, rec.object_name, rec.scheduled_ms, rec.state.value,
            rec.retry_count, rec.next_attempt_ms, rec.last_error, attempts, rec.started_ms,
            rec.gen, rec.hint_ms, rec.hint_gen, rec.in_file, rec.attempt_count, rec.paused_ms,
            rec.due_ms, shard)


def from_row(row: Any) -> AlarmRecord:
    attempts = tuple(Attempt.from_dict(a) for a in json.loads(row[7])) if row[7] else ()
    return AlarmRecord(row[0], row[1], row[2], AlarmState(row[3]), row[4], row[5], row[6],
                       attempts, row[8], row[9], row[10], row[11], bool(row[12]), row[13],
                       row[14])


Fence = Callable[["PgConn", set[int]], Awaitable[None]]
FenceRowsOf = Callable[[set[int]], tuple[list[int], list[int], str]]
# Writes a batch's checkpoints, alarm rows and deleted alarm keys as one fenced
# statement; True when the counters may have moved.
SingleWrite = Callable[["PgConn", Sequence[PgWrite], tuple[list[int], list[int], str],
                        Sequence[tuple[Any, ...]], Sequence[AlarmKey]], Awaitable[bool]]


class SingleWriter(Protocol):
    """What can write a whole batch as one statement (executions.MergedCheckpoints)."""

    def fits(self, writes: Sequence[PgWrite]) -> bool: ...

    async def alone(self, conn: PgConn, writes: Sequence[PgWrite],
                    fence: tuple[list[int], list[int], str],
                    alarm_rows: Sequence[tuple[Any, ...]] = (),
                    alarm_deletes: Sequence[AlarmKey] = ()) -> bool: ...


class PgAlarmIndex:
    """`AlarmIndex` on PostgreSQL."""

    def __init__(self, pool_of: Callable[[], asyncpg.Pool], connect: Callable[
            [], Awaitable[PgConn]], shard_of: Callable[[AlarmKey], int],
                 fence: Fence | None = None,
                 owned: Callable[[], Sequence[int]] | None = None,
                 fence_rows: FenceRowsOf | None = None,
                 single: SingleWriter | None = None) -> None:
        self._pool_of = pool_of
        self._connect = connect
        self.shard_of = shard_of
        self.fence = fence
        # The fence as data (shards, epochs held, node id), for writes that check it
        # inside their own statement (see `_apply`).
        self.fence_rows = fence_rows
        self.single = single  # a batch's writes that carry it go as one statement
        self._recount = True  # whether the last commit may have moved the counters
        self._counters_read = 0.0  # loop time of the last successful read
        self._counters_stale = False  # the last read failed
        self._owned = owned  # the shards this node runs (None: all)
        self._conn: PgConn | None = None
        self._queue: list[_Entry] = []
        self._wake = asyncio.Event()
        self._committer: asyncio.Task[None] | None = None
        self._counts = Counts(dict.fromkeys((s.value for s in AlarmState), 0))
        self.path = "postgresql"

    @property
    def pool(self) -> asyncpg.Pool:
        return self._pool_of()

    async def open(self) -> None:
        self._conn = await self._connect()
        self._counts = reads.parse_counters(await self._conn.fetch(reads.COUNTERS_SQL))
        self._counters_read = asyncio.get_running_loop().time()
        self._committer = asyncio.get_running_loop().create_task(self._commit_loop(),
                                                                 name="pg-committer")

    def cut_off(self) -> None:
        """Now, without waiting: a close cut short must not leave the connection open."""
        if self._committer is not None:
            self._committer.cancel()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()

    async def close(self) -> None:
        task, self._committer = self._committer, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        dropped, self._queue = self._queue, []
        for *_, fut in dropped:
            if not fut.done():
                fut.set_exception(StorageError("the runtime database was closed before this "
                                               "write was made", self.path))
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                await asyncio.wait_for(conn.close(), 2.0)
            except (TimeoutError, Exception):
                conn.terminate()

    # -- writes ---------------------------------------------------------------------------

    async def write(self, puts: Sequence[AlarmRecord], deletes: Sequence[AlarmKey] = (),
                    extra: PgWrite | None = None) -> None:
        await self.submit(puts, deletes, extra)

    def submit(self, puts: Sequence[AlarmRecord] = (), deletes: Sequence[AlarmKey] = (),
               extra: PgWrite | None = None) -> asyncio.Future[None]:
        if self._committer is None:
            raise StorageError("the runtime database is not open (or already closed)",
                               self.path)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((puts, deletes, extra, fut))
        self._wake.set()
        return fut

    async def _commit_loop(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), COUNTERS_IDLE_S)
            except TimeoutError:
                await self._read_counters()
                continue
            self._wake.clear()
            while self._queue:
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
                self._recount = False
                outcome = await self._commit(batch)
                due = self._counters_stale or (asyncio.get_running_loop().time()
                                               - self._counters_read >= COUNTERS_IDLE_S)
                if (outcome is None or None in outcome) and (self._recount or due):
                    # Before the writers are told: `counters()` then counts every write
                    # whose future has completed. A batch of plain checkpoints that
                    # changed no status moved none (see `MergedCheckpoints`), but the
                    # counts are read at least every COUNTERS_IDLE_S while busy too
                    # (other nodes write), and after a read that failed.
                    await self._read_counters()
                for i, (*_, fut) in enumerate(batch):
                    if fut.done():
                        continue
                    exc = None if outcome is None else outcome[i]
                    if exc is None:
                        fut.set_result(None)
                    else:
                        fut.set_exception(exc if isinstance(exc, StorageError) else
                                          StorageError(f"writing the runtime database failed: "
                                                       f"{exc}", self.path))

    async def _commit(self, batch: list[_Entry]) -> list[BaseException | None] | None:
        """One transaction for the batch: None when it committed, else each write's
        outcome (one bad write must not fail its neighbours: each is tried alone)."""
        try:
            await self._apply(batch)
            return None
        except LeaseLost as exc:
            if len(batch) == 1:
                _refused(batch[0])
                return [exc]
        except (TimeoutError, OSError) as exc:
            await self._reconnect()
            for entry in batch:
                _refused(entry)
            return [_storage_error(exc, self.path)] * len(batch)
        except Exception as exc:
            if len(batch) == 1 or _connection_lost(exc):
                if _connection_lost(exc):
                    await self._reconnect()
                for entry in batch:
                    _refused(entry)
                return [_storage_error(exc, self.path)] * len(batch)
        outcome: list[BaseException | None] = []
        for entry in batch:
            try:
                await self._apply([entry])
            except Exception as one:
                _refused(entry)
                outcome.append(one if isinstance(one, StorageError) else
                               _storage_error(one, self.path))
            else:
                outcome.append(None)
        return outcome

    async def _read_counters(self) -> None:
        """The counters as committed, on the committer's connection (one small query:
        a row per count and node slot). A failure keeps the last ones: the next batch
        reads them again."""
        conn = self._conn
        if conn is None:
            self._counters_stale = True
            return
        try:
            self._counts = reads.parse_counters(await conn.fetch(reads.COUNTERS_SQL))
            self._counters_read = asyncio.get_running_loop().time()
            self._counters_stale = False
        except Exception as exc:
            self._counters_stale = True
            log.warning("cannot read the counters from PostgreSQL yet: %s", exc)
            if _connection_lost(exc) or isinstance(exc, (TimeoutError, OSError)):
                await self._reconnect()

    async def _reconnect(self) -> None:
        old, self._conn = self._conn, None
        if old is not None:
            old.terminate()
        try:
            self._conn = await self._connect()
        except Exception as exc:  # the next batch tries again
            log.warning("cannot reconnect to PostgreSQL yet: %s", exc)

    async def _apply(self, batch: list[_Entry]) -> None:
        conn = self._conn
        if conn is None:
            conn = self._conn = await self._connect()
        final, extras = coalesce(batch)
        if FAULT_POINTS.active:
            FAULT_POINTS.hit("index.commit.before", keys=list(final), extras=len(extras))
        shards = {self.shard_of(k) for k in final}
        for extra in extras:
            fence_key = getattr(extra, "fence_key", None)
            if fence_key is not None:  # an execution's log: fenced by its object's shard
                shards.add(self.shard_of(fence_key))
        # (An empty write stays a transaction: it reads the counters back.)
        alone = self._single(extras) if final or extras else None
        if alone is not None and self.fence_rows is not None:
            # Only checkpoints (an execution's start, steps or end) and alarm rows: one
            # statement, its fence inside, no BEGIN or COMMIT of its own (see
            # `MergedCheckpoints`).
            rows = [to_row(v, self.shard_of(k)) for k, v in final.items() if v is not None]
            dels = [k for k, v in final.items() if v is None]
            if await alone(conn, extras, self.fence_rows(shards), rows, dels):
                self._recount = True
            if FAULT_POINTS.active:
                FAULT_POINTS.hit("index.commit.after", keys=list(final), extras=len(extras))
            return
        self._recount = True
        async with conn.transaction():
            if self.fence is not None and shards:
                await self.fence(conn, shards)
            dels = [k for k, v in final.items() if v is None]
            if dels:
                await conn.executemany(f"DELETE FROM {SCHEMA}.alarms WHERE object_class = $1 "
                                       "AND object_name = $2", dels)
            rows = [to_row(v, self.shard_of(k)) for k, v in final.items() if v is not None]
            if rows:
                await conn.executemany(_UPSERT, rows)
            await _run_extras(conn, extras)
        if FAULT_POINTS.active:
            FAULT_POINTS.hit("index.commit.after", keys=list(final), extras=len(extras))

    def _single(self, extras: Sequence[PgWrite]) -> SingleWrite | None:
        """The one-statement writer of a batch whose writes all share it (none: alarm
        rows only), when it can write them."""
        single = self.single
        if single is None or self.fence_rows is None:
            return None
        if any(getattr(x, "single", None) is not single for x in extras):
            return None
        return single.alone if single.fits(extras) else None

    # -- reads ----------------------------------------------------------------------------

    async def _fetch(self, sql: str, *args: Any) -> list[Any]:
        try:
            async with self.pool.acquire() as conn:
                return list(await conn.fetch(sql, *args))
        except Exception as exc:
            raise _storage_error(exc, self.path) from exc

    async def read(self, fn: Callable[[PgConn], Awaitable[T]]) -> T:
        try:
            async with self.pool.acquire() as conn:
                return await fn(conn)
        except StorageError:
            raise
        except Exception as exc:
            raise _storage_error(exc, self.path) from exc

    async def get(self, key: AlarmKey) -> AlarmRecord | None:
        rows = await self._fetch(f"SELECT {COLUMNS} FROM {SCHEMA}.alarms WHERE object_class = $1 "
                                 "AND object_name = $2", *key)
        return from_row(rows[0]) if rows else None

    def _mine(self) -> list[int] | None:
        return None if self._owned is None else list(self._owned())

    async def due_after(self, after_ms: float, limit: int) -> tuple[list[AlarmRecord], bool]:
        """Live alarms of the shards this node holds due after `after_ms`, soonest first:
        at least `limit` of them when there are that many (ties included)."""
        shards = self._mine()
        after = -(2**62) if after_ms == float("-inf") else int(after_ms)
        where, extra = self._shards_where(shards, 3)
        base = f"SELECT {COLUMNS} FROM {SCHEMA}.alarms WHERE due_ms > $1 {where}"
        rows = [from_row(r) for r in await self._fetch(
            base + " ORDER BY due_ms LIMIT $2", after, limit, *extra)]
        if len(rows) < limit:
            return rows, True
        last = rows[-1].due_ms
        where2, extra2 = self._shards_where(shards, 3)
        ties = [from_row(r) for r in await self._fetch(
            f"SELECT {COLUMNS} FROM {SCHEMA}.alarms WHERE due_ms = $1 AND due_ms > $2 {where2} "
            "ORDER BY object_class, object_name", last, after, *extra2)]
        seen = {r.key for r in rows}
        rows.extend(r for r in ties if r.key not in seen)
        return rows, False

    @staticmethod
    def _shards_where(shards: Sequence[int] | None, n: int) -> tuple[str, list[Any]]:
        if shards is None:
            return "", []
        return f"AND shard = ANY(${n}::int[])", [list(shards)]

    async def in_state(self, state: str, limit: int, offset: int = 0, *,
                       mine: bool = False) -> list[AlarmRecord]:
        where, extra = self._shards_where(self._mine() if mine else None, 4)
        return [from_row(r) for r in await self._fetch(
            f"SELECT {COLUMNS} FROM {SCHEMA}.alarms WHERE state = $1 {where} ORDER BY "
            "object_class, object_name LIMIT $2 OFFSET $3", state, _limit(limit), offset,
            *extra)]

    async def overdue(self, before_ms: int, limit: int) -> list[AlarmRecord]:
        where, extra = self._shards_where(self._mine(), 3)
        return [from_row(r) for r in await self._fetch(
            f"SELECT {COLUMNS} FROM {SCHEMA}.alarms WHERE due_ms < $1 {where} ORDER BY due_ms "
            "LIMIT $2", before_ms, limit, *extra)]

    async def page(self, limit: int, offset: int = 0, state: str | None = None,
                   contains: str | None = None) -> list[AlarmRecord]:
        return await self.alarm_page(None, limit, offset=offset, state=state,
                                     contains=contains)

    async def alarm_page(self, after: Cursor | None = None, limit: int = 50, *,
                         offset: int = 0, state: str | None = None,
                         contains: str | None = None, order: str = "urgency",
                         desc: bool = False) -> list[AlarmRecord]:
        sql, params = reads.alarm_page(COLUMNS, after, limit, offset=offset, state=state,
                                   contains=contains, order=order, desc=desc)
        return [from_row(r) for r in await self._fetch(sql, *params)]

    async def count(self, state: str | None = None, contains: str | None = None) -> int:
        if contains:
            sql, params = reads.alarm_count(state, contains)
            return int((await self._fetch(sql, *params))[0][0])
        alarms = self.counters().alarms
        return alarms.get(state, 0) if state else sum(alarms.values())

    def counters(self) -> Counts:
        return self._counts

    async def recount(self) -> Counts:
        async def read(conn: PgConn) -> Counts:
            q = reads.RECOUNT
            alarms = dict.fromkeys((s.value for s in AlarmState), 0)
            alarms.update({r[0]: int(r[1]) for r in await conn.fetch(q["alarms"])})
            retries = {(r[0], int(r[1])): int(r[2]) for r in await conn.fetch(q["retries"])}
            executions = {r[0]: int(r[1]) for r in await conn.fetch(q["executions"])}
            return Counts(alarms, retries, executions, int(await conn.fetchval(q["stored"])),
                          int(await conn.fetchval(q["known"])))
        return await self.read(read)

    async def counts(self) -> dict[str, int]:
        return self.counters().by_state()

    async def retry_counts(self) -> list[tuple[str, int, int]]:
        return self.counters().retry_rows()

    async def object_page(self, after: Cursor | None = None, limit: int = 50, *,
                          offset: int = 0, contains: str | None = None,
                          desc: bool = False) -> list[ObjectEntry]:
        sql, params = reads.object_page(after, limit, offset=offset, contains=contains, desc=desc)
        return [ObjectEntry(r[0], r[1], bool(r[2] & 1), bool(r[2] & 4), r[3],
                            None if r[3] == "dead" else r[4], r[5] is not None)
                for r in await self._fetch(sql, *params)]

    async def count_known(self, contains: str | None = None) -> int:
        if contains:
            sql, params = reads.known_count(contains)
            return int((await self._fetch(sql, *params))[0][0])
        return self.counters().known

    async def known_among(self, keys: Sequence[AlarmKey]) -> set[AlarmKey]:
        keys = list(keys)
        if not keys:
            return set()
        rows = await self._fetch(reads.KNOWN_AMONG, [k[0] for k in keys], [k[1] for k in keys])
        return {(r[0], r[1]) for r in rows}

    # -- objects that have storage --------------------------------------------------------

    @staticmethod
    def object_write(key: AlarmKey, file: str, at_ms: int) -> PgWrite:
        async def write(conn: PgConn) -> None:
            await conn.execute(f"INSERT INTO {SCHEMA}.objects (object_class, object_name, file, "
                               "created_ms) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                               key[0], key[1], file, at_ms)
        return write

    async def object_classes(self) -> list[str]:
        rows = await self._fetch(f"SELECT DISTINCT object_class FROM {SCHEMA}.objects")
        return sorted(r[0] for r in rows)

    async def count_objects(self) -> int:
        return self.counters().stored

    async def list_objects(self, limit: int, offset: int = 0,
                           contains: str | None = None) -> list[tuple[str, str]]:
        where, params = "", []
        if contains:
            where, params = "WHERE strpos(object_class || '/' || object_name, $1) > 0", [contains]
        n = len(params)
        rows = await self._fetch(
            f"SELECT object_class, object_name FROM {SCHEMA}.objects {where} ORDER BY "
            f"object_class, object_name LIMIT ${n + 1} OFFSET ${n + 2}", *params, limit, offset)
        return [(r[0], r[1]) for r in rows]


def _limit(limit: int) -> int | None:
    return None if limit < 0 else limit


def _refused(entry: _Entry) -> None:
    refused = getattr(entry[2], "refused", None)
    if refused is not None:
        refused()


def _connection_lost(exc: BaseException) -> bool:
    name = type(exc).__name__
    return name in ("ConnectionDoesNotExistError", "InterfaceError",
                    "ConnectionFailureError", "AdminShutdownError", "CannotConnectNowError")


def _storage_error(exc: BaseException, path: str) -> StorageError:
    return storage_error(exc, path, "the runtime database's read or write")


async def _run_extras(conn: PgConn, extras: list[PgWrite]) -> None:
    """The batch's other writes, in order; a run of writes that share a `merged`
    writer (plain checkpoints) goes to it at once: fewer round trips, same rows."""
    i = 0
    while i < len(extras):
        merge = getattr(extras[i], "merged", None)
        j = i + 1
        if merge is not None:
            while j < len(extras) and getattr(extras[j], "merged", None) is merge:
                j += 1
        if j - i > 1 and merge is not None:
            await merge(conn, extras[i:j])
        else:
            await extras[i](conn)
        i = j
