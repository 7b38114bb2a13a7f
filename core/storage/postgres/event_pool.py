"""The connections objects' events hold on PostgreSQL, kept apart from the runtime's.

An event holds a connection from its first storage call to its commit: a handler
that writes, then waits on something slow, holds it all along. Twenty such events
used to take every connection of the one shared pool, and everything else waited:
other objects' calls, the alarm index's reads, operators' queries, the lease
keeper. Now events draw from a pool of their own (`size`); when every one of them
is held for longer than `patience_s`, a waiting event opens a connection of its own
(closed after its commit), up to `overflow` of them at once: slow events cannot
starve the others short of that bound, and never the runtime's own work, which
has a pool (and the lease keeper a connection) of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncpg

PATIENCE_S = 0.2  # how long an event waits for a pooled connection before opening one


class EventConnections:
    """A pool with a bounded overflow, for objects' events (`acquire`, `release`)."""

    def __init__(self, pool: asyncpg.Pool, connect: Callable[[], Awaitable[Any]],
                 overflow: int, patience_s: float = PATIENCE_S) -> None:
        self.pool = pool
        self._connect = connect
        self.overflow = overflow
        self.patience_s = patience_s
        self._extra: set[Any] = set()  # overflow connections held now
        self._opening = 0  # and being opened

    @property
    def extra(self) -> int:
        """How many overflow connections are held (or being opened) now."""
        return len(self._extra) + self._opening

    async def acquire(self) -> Any:
        try:
            return await self.pool.acquire(timeout=self.patience_s)
        except TimeoutError:
            if self.extra >= self.overflow:
                return await self.pool.acquire()
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
