"""The runtime database on PostgreSQL: group commit on one connection, reads on a pool.

As on SQLite, concurrent writers hand their changes to one committer, which writes
everything queued in one transaction (one WAL flush), then tells each writer. The
committer is a task on the event loop with a connection of its own; reads take
connections from the pool. Every batch is fenced: it commits only while this node
still holds the lease of each shard it writes (`fence`), in the same transaction.

This module knows no table. What a batch's keyed rows are and how they are written,
and what is read back after commits (the counters, which triggers keep in the
transaction of each write; other nodes write too, so at least every second), are
the `PgLayout` it is built with (`alarm_rows.PgAlarmRowWriter`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from alarmtop.core.model.alarm_policy import AlarmKey, AlarmRecord
from alarmtop.core.model.errors import LeaseLost, StorageError
from alarmtop.core.ports import EVENT_LEASE
from alarmtop.core.storage.batches import coalesce, settle
from alarmtop.core.storage.faultpoints import FAULT_POINTS
from alarmtop.core.storage.postgres.errors import storage_error
from alarmtop.core.storage.tasks import TaskOwner

if TYPE_CHECKING:
    import asyncpg
    from asyncpg.pool import PoolConnectionProxy

    # A connection of its own, or one lent by the pool: both run statements alike.
    PgConn = asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]
    PooledConn = PoolConnectionProxy[asyncpg.Record]

T = TypeVar("T")
log = logging.getLogger("alarmtop.storage")
# A write of the runtime database's tables, given the committer's connection.
PgWrite = Callable[["PgConn"], Awaitable[None]]
# (puts, deletes, extra, the event's lease it was submitted under, its writer's future)
_Entry = tuple[Sequence[AlarmRecord], Sequence[AlarmKey], PgWrite | None,
               "tuple[AlarmKey, int] | None", "asyncio.Future[None]"]
MAX_BATCH = 5_000
COUNTERS_IDLE_S = 1.0  # how often an idle committer reads the counters other nodes change

# A fence by the node's epochs, or by the epochs given for some shards (events' leases).
Fence = Callable[["PgConn", set[int], dict[int, int] | None], Awaitable[None]]
FenceRows = tuple[list[int], list[int], str]
FenceRowsOf = Callable[[set[int], dict[int, int] | None], FenceRows]


class SingleWriter(Protocol):
    """What can write a whole batch as one statement (execution_log.MergedCheckpoints)."""

    def fits(self, writes: Sequence[PgWrite]) -> bool: ...

    async def alone(self, conn: PgConn, writes: Sequence[PgWrite], fence: FenceRows,
                    alarm_rows: Sequence[tuple[Any, ...]] = (),
                    alarm_deletes: Sequence[AlarmKey] = ()) -> bool: ...


class PgLayout(Protocol):
    """What the runtime database's tables are, for the one committer that writes them."""

    def shard_of(self, key: AlarmKey) -> int: ...

    def row_values(self, final: Mapping[AlarmKey, AlarmRecord | None]
                   ) -> tuple[list[tuple[Any, ...]], list[AlarmKey]]:
        """A batch's keyed rows as statement parameters: rows to write, keys to delete."""
        ...

    async def write_rows(self, conn: PgConn, rows: Sequence[tuple[Any, ...]],
                         deletes: Sequence[AlarmKey]) -> None:
        """Write them in the open transaction."""
        ...

    async def read_back(self, conn: PgConn) -> None:
        """Read what readers on the loop keep (the counters) as committed."""
        ...


class PgDatabase:
    """`RuntimeDatabase` on PostgreSQL (asyncpg)."""

    def __init__(self, pool_of: Callable[[], asyncpg.Pool],
                 connect: Callable[[], Awaitable[PgConn]], layout: PgLayout, *,
                 fence: Fence | None = None, fence_rows: FenceRowsOf | None = None,
                 single: SingleWriter | None = None) -> None:
        self._pool_of = pool_of
        self._connect = connect
        self.layout = layout
        self.fence = fence
        # The fence as data (shards, epochs held, node id), for writes that check it
        # inside their own statement (see `_apply`).
        self.fence_rows = fence_rows
        self.single = single  # a batch's writes that carry it go as one statement
        self._recount = True  # whether the last commit may have moved the counters
        self._counters_read = 0.0  # loop time of the last successful read
        self._counters_stale = False  # the last read failed
        self._conn: PgConn | None = None
        self._queue: list[_Entry] = []
        self._wake = asyncio.Event()
        self._tasks = TaskOwner("runtime database")
        self._committer: asyncio.Task[None] | None = None  # while open
        self.path = "postgresql"

    @property
    def pool(self) -> asyncpg.Pool:
        return self._pool_of()

    async def open(self) -> None:
        self._conn = await self._connect()
        await self.layout.read_back(self._conn)
        self._counters_read = asyncio.get_running_loop().time()
        self._committer = self._tasks.spawn(self._commit_loop(), name="pg-committer")

    def cut_off(self) -> None:
        """Now, without waiting: a close cut short must not leave the connection open."""
        self._tasks.cancel()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()

    async def close(self) -> None:
        self._committer = None
        await self._tasks.close()
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
        self._queue.append((puts, deletes, extra, EVENT_LEASE.get(), fut))
        self._wake.set()
        return fut

    async def _commit_loop(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), COUNTERS_IDLE_S)
            except TimeoutError:
                await self._read_back()
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
                    await self._read_back()
                self._settle(batch, outcome)

    def _settle(self, batch: list[_Entry], outcome: list[BaseException | None] | None) -> None:
        settle([fut for *_, fut in batch], outcome, lambda exc: StorageError(
            f"writing the runtime database failed: {exc}", self.path))

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
            return [self.error(exc)] * len(batch)
        except Exception as exc:
            if len(batch) == 1 or _connection_lost(exc):
                if _connection_lost(exc):
                    await self._reconnect()
                for entry in batch:
                    _refused(entry)
                return [self.error(exc)] * len(batch)
        outcome: list[BaseException | None] = []
        for entry in batch:
            try:
                await self._apply([entry])
            except Exception as one:
                _refused(entry)
                outcome.append(one if isinstance(one, StorageError) else self.error(one))
            else:
                outcome.append(None)
        return outcome

    async def _read_back(self) -> None:
        """The counters as committed, on the committer's connection (one small query:
        a row per count and node slot). A failure keeps the last ones: the next batch
        reads them again."""
        conn = self._conn
        if conn is None:
            self._counters_stale = True
            return
        try:
            await self.layout.read_back(conn)
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
        layout = self.layout
        shards = {layout.shard_of(k) for k in final}
        for extra in extras:
            fence_key = getattr(extra, "fence_key", None)
            if fence_key is not None:  # an execution's log: fenced by its object's shard
                shards.add(layout.shard_of(fence_key))
        pinned = _pinned(batch, layout)
        shards |= set(pinned)
        at = pinned or None
        rows, dels = layout.row_values(final) if final else ([], [])
        # (An empty write stays a transaction: it reads the counters back.)
        alone = self._single(extras) if final or extras else None
        if alone is not None and self.fence_rows is not None:
            # Only checkpoints (an execution's start, steps or end) and alarm rows: one
            # statement, its fence inside, no BEGIN or COMMIT of its own (see
            # `MergedCheckpoints`).
            if await alone(conn, extras, self.fence_rows(shards, at), rows, dels):
                self._recount = True
            if FAULT_POINTS.active:
                FAULT_POINTS.hit("index.commit.after", keys=list(final), extras=len(extras))
            return
        self._recount = True
        async with conn.transaction():
            if self.fence is not None and shards:
                await self.fence(conn, shards, at)
            if rows or dels:
                await layout.write_rows(conn, rows, dels)
            await _run_extras(conn, extras)
        if FAULT_POINTS.active:
            FAULT_POINTS.hit("index.commit.after", keys=list(final), extras=len(extras))

    def _single(self, extras: Sequence[PgWrite]) -> Callable[..., Awaitable[bool]] | None:
        """The one-statement writer of a batch whose writes all share it (none: alarm
        rows only), when it can write them."""
        single = self.single
        if single is None or self.fence_rows is None:
            return None
        if any(getattr(x, "single", None) is not single for x in extras):
            return None
        return single.alone if single.fits(extras) else None

    # -- reads ----------------------------------------------------------------------------

    def error(self, exc: BaseException) -> StorageError:
        return storage_error(exc, self.path, "the runtime database's read or write")

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        """The rows of one query, on a pooled connection."""
        try:
            async with self.pool.acquire() as conn:
                return list(await conn.fetch(sql, *args))
        except Exception as exc:
            raise self.error(exc) from exc

    async def read(self, fn: Callable[[PgConn], Awaitable[T]]) -> T:
        """`fn(connection)` on a pooled connection."""
        try:
            async with self.pool.acquire() as conn:
                return await fn(conn)
        except StorageError:
            raise
        except Exception as exc:
            raise self.error(exc) from exc


def _pinned(batch: list[_Entry], layout: PgLayout) -> dict[int, int]:
    """The epochs the batch's writes must be fenced by, by shard: those of the events
    that made them (see `EVENT_LEASE`). Two events of one shard under two epochs: the
    batch is refused, and its writes are tried one by one."""
    pinned: dict[int, int] = {}
    for entry in batch:
        lease = entry[3]
        if lease is not None and pinned.setdefault(layout.shard_of(lease[0]), lease[1]) != lease[1]:
            raise LeaseLost("writes made under two leases of one shard: each is tried alone")
    return pinned


def _refused(entry: _Entry) -> None:
    refused = getattr(entry[2], "refused", None)
    if refused is not None:
        refused()


def _connection_lost(exc: BaseException) -> bool:
    name = type(exc).__name__
    return name in ("ConnectionDoesNotExistError", "InterfaceError",
                    "ConnectionFailureError", "AdminShutdownError", "CannotConnectNowError")


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
