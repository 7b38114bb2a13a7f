"""The connections objects' events hold on PostgreSQL, kept apart from the runtime's.

An event holds a connection from its first storage call to its commit: a handler
that writes, then waits on something slow, holds it all along. Twenty such events
used to take every connection of the one shared pool, and everything else waited:
other objects' calls, the alarm index's reads, operators' queries, the lease
keeper. Now events draw from a pool of their own (`size`); when every one of them
is held for longer than `patience_s`, a waiting event opens a connection of its own
(closed after its commit), up to `overflow` of them at once: slow events cannot
starve the others short of that bound, and never the runtime's own work, which
has a pool (and the lease keeper a connection, `LeaseConnection`) of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from alarmtop.core.model.errors import InvalidArgument

if TYPE_CHECKING:
    import asyncpg

PATIENCE_S = 0.2  # how long an event waits for a pooled connection before opening one


def asyncpg_module() -> Any:
    """asyncpg, imported when a PostgreSQL backend is first made: the extra is optional."""
    try:
        import asyncpg
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise InvalidArgument("PostgresBackend needs asyncpg: pip install 'alarmtop[postgres]'"
                              ) from exc
    return asyncpg


class EventConnections:
    """A pool with a bounded overflow, for objects' events (`acquire`, `release`)."""

    @classmethod
    async def open(cls, dsn: str, size: int, reset: Callable[[Any], Awaitable[None]]
                   ) -> EventConnections:
        """`size` pooled connections, and as many more at most when they are all held."""
        pool = await asyncpg_module().create_pool(dsn, min_size=1, max_size=size, reset=reset)

        async def connect() -> Any:
            return await asyncpg_module().connect(dsn)
        return cls(pool, connect, size)

    def __init__(self, pool: asyncpg.Pool, connect: Callable[[], Awaitable[Any]],
                 overflow: int, patience_s: float = PATIENCE_S) -> None:
        self.pool = pool
        self._connect = connect
        self.overflow = overflow
        self.patience_s = patience_s
        self._extra: set[Any] = set()  # overflow connections held now
        self._opening = 0  # and being opened
        self.waiting = 0  # events waiting for a pooled connection, the overflow used up

    @property
    def extra(self) -> int:
        """How many overflow connections are held (or being opened) now."""
        return len(self._extra) + self._opening

    async def acquire(self) -> Any:
        try:
            return await self.pool.acquire(timeout=self.patience_s)
        except TimeoutError:
            if self.extra >= self.overflow:
                self.waiting += 1
                try:
                    return await self.pool.acquire()
                finally:
                    self.waiting -= 1
        self._opening += 1
        try:
            conn = await self._connect()
        finally:
            self._opening -= 1
        self._extra.add(conn)
        return conn

    async def release(self, conn: Any) -> None:
        if conn in self._extra:
            self._extra.discard(conn)
            try:
                await asyncio.wait_for(conn.close(), 2.0)
            except (TimeoutError, Exception):
                conn.terminate()
            return
        await self.pool.release(conn)

    def terminate(self) -> None:
        for conn in list(self._extra):
            conn.terminate()
        self._extra.clear()

    async def close(self) -> None:
        self.terminate()
        try:
            await asyncio.wait_for(self.pool.close(), 5.0)
        except (TimeoutError, Exception):
            self.pool.terminate()


class LeaseConnection:
    """The lease keeper's own connection: renewals never wait behind a pool that slow
    events hold. Made again after a round that failed on it; one round at a time."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._conn: Any = None
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def use(self, connect_within: float = 60.0) -> AsyncIterator[Any]:
        """The connection, made within `connect_within` seconds if it must be made again."""
        async with self._lock:
            conn = self._conn
            if conn is None or conn.is_closed():
                conn = await asyncpg_module().connect(self._dsn, timeout=connect_within)
                self._conn = conn
            try:
                yield conn
            except BaseException:
                self._conn = None
                conn.terminate()
                raise

    def terminate(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()
