"""The fleet's faults in PostgreSQL: each node's `FaultRegistry` mirrors one table.

A node writes its changes (inject, use, clear) through one queue, in order, then
NOTIFYs the others; a node told (or every `POLL_S`, in case a notification was
lost with a connection) reloads the table into its mirror, keeping the faults it
changed itself and has not written yet.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

from alarmtop.core.model.faults import Fault
from alarmtop.core.ports import FaultMirror
from alarmtop.core.storage.postgres.schema import SCHEMA
from alarmtop.core.storage.tasks import TaskOwner

if TYPE_CHECKING:
    import asyncpg

CHANNEL = "alarmtop_faults"
POLL_S = 5.0
log = logging.getLogger("alarmtop.fleet")


class PgFaultStore:
    """`FaultSink` on PostgreSQL, and the keeper of a registry's mirror."""

    def __init__(self, pool: asyncpg.Pool, dsn: str, node_id: str) -> None:
        self._pool = pool
        self._dsn = dsn
        self._node_id = node_id
        self._queue: asyncio.Queue[tuple[str, Fault | str]] = asyncio.Queue()
        self._dirty: dict[str, int] = {}  # fault id -> writes queued for it
        self._registry: FaultMirror | None = None
        self._tasks = TaskOwner("fleet faults")
        self._listener: Any = None
        self._stale = asyncio.Event()

    async def start(self, registry: FaultMirror) -> None:
        import asyncpg

        self._registry = registry
        await self._reload()
        try:
            self._listener = await asyncpg.connect(self._dsn)
            await self._listener.add_listener(CHANNEL, self._told)
        except Exception as exc:  # the poll still brings the others' changes
            log.warning("fault changes of other nodes arrive every %g s: LISTEN failed (%s)",
                        POLL_S, exc)
            self._listener = None
        self._tasks.spawn(self._write(), name="pg-faults-write")
        self._tasks.spawn(self._follow(), name="pg-faults-follow")

    def cut_off(self) -> None:
        """Now, without waiting: a stop cut short must not leave the listener open."""
        self._tasks.cancel()
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.terminate()

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.flush(), 2.0)
        except TimeoutError:
            log.warning("fault changes not written at stop: %d", self._queue.qsize())
        await self._tasks.close()
        if self._listener is not None:
            listener, self._listener = self._listener, None
            try:
                await asyncio.wait_for(listener.close(), 1.0)
            except Exception:
                listener.terminate()

    # -- FaultSink ------------------------------------------------------------------------

    def saved(self, fault: Fault) -> None:
        self._enqueue("save", Fault.from_dict(fault.to_dict()))

    def cleared(self, fault_id: str) -> None:
        self._enqueue("clear", fault_id)

    async def flush(self) -> None:
        await self._queue.join()

    def _enqueue(self, what: str, item: Fault | str) -> None:
        fid = item.id if isinstance(item, Fault) else item
        self._dirty[fid] = self._dirty.get(fid, 0) + 1
        self._queue.put_nowait((what, item))

    # -- writing and following -----------------------------------------------------------

    async def _write(self) -> None:
        while True:
            what, item = await self._queue.get()
            fid = item.id if isinstance(item, Fault) else item
            try:
                await self._apply(what, item)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("fault %s: the change did not reach the fleet (%s: %s); it "
                            "holds on this node only", fid, type(exc).__name__, exc)
            finally:
                left = self._dirty.get(fid, 1) - 1
                if left:
                    self._dirty[fid] = left
                else:
                    self._dirty.pop(fid, None)
                self._queue.task_done()

    async def _apply(self, what: str, item: Fault | str) -> None:
        async with self._pool.acquire() as conn:
            async with conn.transaction():
                if isinstance(item, Fault):
                    await conn.execute(
                        f"INSERT INTO {SCHEMA}.faults (fault_id, node_id, data) VALUES "
                        "($1, $2, $3) ON CONFLICT (fault_id) DO UPDATE SET data = "
                        "EXCLUDED.data", item.id, self._node_id, json.dumps(item.to_dict()))
                else:
                    await conn.execute(f"DELETE FROM {SCHEMA}.faults WHERE fault_id = $1",
                                       item)
                await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, self._node_id)

    def _told(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        if payload != self._node_id:
            self._stale.set()

    async def _follow(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._stale.wait(), POLL_S)
            except TimeoutError:
                pass
            self._stale.clear()
            try:
                await self._reload()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.debug("faults not reloaded: %s", exc)

    async def _reload(self) -> None:
        async with self._pool.acquire() as conn:
            rows = await conn.fetch(f"SELECT data FROM {SCHEMA}.faults ORDER BY fault_id")
        faults = [Fault.from_dict(json.loads(r[0])) for r in rows]
        if self._registry is not None:
            self._registry.mirror(faults, set(self._dirty))
