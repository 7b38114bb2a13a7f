"""This runtime as a node of a fleet: the other nodes' calls, its shards, its events.

On a shared backend (`PostgresBackend`) a runtime listens for node-to-node calls
(`links.NodeServer`, `wss://` when the backend has a certificate) before it takes
any shard, and records where it listens. A forwarded call or operator action runs
here only while this node holds the object's shard, told which node asked for it;
a socket relayed from another node is kept by `OwnedSockets`.
When the backend gains or loses shard leases, the scheduler and the object host
follow; a clean hand-over first lets the events in flight end.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from alarmtop.core.fleet import tls
from alarmtop.core.fleet.admission import NODE_SOCKETS
from alarmtop.core.fleet.events import EventRing, FleetEvents
from alarmtop.core.fleet.links import NodeLink, NodeServer
from alarmtop.core.fleet.routing import FleetBackend, Routing
from alarmtop.core.fleet.sockets import SOCKET_OPS, OwnedSockets
from alarmtop.core.kernel.alarms.scheduler import AlarmScheduler
from alarmtop.core.kernel.events import EventBus
from alarmtop.core.kernel.faults import FaultRegistry
from alarmtop.core.kernel.objects.host import ObjectHost
from alarmtop.core.kernel.run_state import RunState
from alarmtop.core.kernel.supervisor import Supervisor
from alarmtop.core.model.errors import InvalidArgument, ShardMoved
from alarmtop.core.model.node_tls import check_node_host

ObjectKey = tuple[str, str]
# What serves a forwarded request: given the request, and a check that this node
# holds the object's shard (run it once the request is found valid). The request's
# `ASKED_BY` is the node that sent it, as its link proved it (never what it said).
NodeHandler = Callable[[dict[str, Any], Callable[[ObjectKey], Awaitable[None]]], Awaitable[Any]]
ASKED_BY = "asked_by"
RING_IDLE_CHECK_S = 5.0
__all__ = ["ASKED_BY", "NODE_SOCKETS", "FleetNode", "NodeHandler"]


class FleetNode:
    """A runtime's part in a fleet (see the module docstring)."""

    def __init__(self, backend: FleetBackend, routing: Routing, owned: OwnedSockets,
                 host: ObjectHost, scheduler: AlarmScheduler, events: EventBus,
                 faults: FaultRegistry, tasks: Supervisor, state: RunState,
                 handlers: Mapping[str, NodeHandler], *, node_host: str | None = None) -> None:
        self.backend = backend
        self.routing = routing
        self.owned = owned  # sockets other nodes relay to objects here
        self._host = host
        self._scheduler = scheduler
        self._events = events
        self._faults = faults
        self._tasks = tasks
        self._state = state
        self._handlers = dict(handlers)
        self._node_host = node_host or backend.node_host or "127.0.0.1"
        # Refused here, before anything starts: calls in clear text off this machine.
        check_node_host(self._node_host, backend.node_tls, backend.node_insecure_no_tls)
        self.server: NodeServer | None = None
        self._client_tls: ssl.SSLContext | None = None  # checks wss:// peers (listen makes it)
        self.ring: EventRing | None = None  # this node's recent events, for other nodes
        # The ring is kept on wall time: a test's virtual clock must not wait for it.
        self._wall_tasks = Supervisor(None, "fleet node")

    async def listen(self) -> None:
        """Listen for other nodes' calls (before the backend takes any shard), and tell
        the backend where, and whom to tell when its shards change."""
        backend = self.backend
        # Both contexts now, before anything starts: unusable files stop the start here.
        node_tls = backend.node_tls
        server_tls = None if node_tls is None else tls.server_context(node_tls)
        self._client_tls = None if node_tls is None else tls.client_context(node_tls)
        self.server = NodeServer(backend.node_id, lambda: backend.cluster_secret,
                                  self.serve, host=self._node_host,
                                  link_closed=self.owned.link_lost, tls=server_tls)
        await self.server.start()
        backend.bind(self._shards_changed, self.server.address, self._drain_shards)

    async def join(self) -> None:
        """The backend is open: route through the fleet, share its faults, keep events
        for other nodes' consoles."""
        self.routing.start(self.backend, self._client_tls)
        await self.backend.share_faults(self._faults)
        self.ring = EventRing(self._events, asyncio.get_running_loop().time)
        self._wall_tasks.reopen()
        self._wall_tasks.spawn(self._keep_ring(self.ring), name="event-ring")

    async def leave(self) -> None:
        """No more calls to or from other nodes. The objects' sockets are closed first,
        while the node connections still carry the closes of those relayed here: their
        clients reconnect to the shards' next owners."""
        await self.owned.close_moved(lambda key: True)
        await self.owned.stop()
        await self._wall_tasks.close()
        await self.routing.stop()
        await self.stop_listening()

    async def stop_listening(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            await server.stop()

    @staticmethod
    async def _keep_ring(ring: EventRing) -> None:
        while True:
            await asyncio.sleep(RING_IDLE_CHECK_S)
            ring.idle_check()

    # -- requests from other nodes --------------------------------------------------------

    async def serve(self, request: dict[str, Any], link: NodeLink | None = None) -> Any:
        """Another node forwards an object's event here, where its shard is held
        (`link`: the connection it came on, which a socket's frames go back over)."""
        op = request.get("op")
        if op in SOCKET_OPS and link is not None:
            return await self.owned.serve(str(op), request, link)
        handler = self._handlers.get(str(op))
        if not self._state.running and handler is not None:
            # Listening already (start) or still (stop), but not running events: nothing
            # ran, so the caller asks again, here once started or at the next owner.
            raise ShardMoved(f"the node {self.backend.node_id} is not running events yet "
                             "(starting) or any more (stopping); nothing ran here")
        self._state.check()
        if handler is not None:
            asked_by = None if link is None else link.node
            return await handler({**request, ASKED_BY: asked_by}, self.routing.held)
        if op == "events":
            if self.ring is None:
                return {"events": [], "last": 0, "missed": 0}
            return self.ring.pull(int(request.get("after") or 0))
        raise InvalidArgument(f"unknown node operation {op!r}")

    def fleet_events(self) -> FleetEvents:
        """A puller of the other nodes' events: `start()` it while someone watches,
        `drain()` what it got."""
        backend = self.backend

        async def peers() -> list[tuple[str, str]]:
            return [(str(n["node_id"]), str(n["address"])) for n in await backend.nodes()
                    if n["up"] and n["address"] and n["node_id"] != backend.node_id]

        async def ask(address: str, op: str, fields: dict[str, Any]) -> Any:
            return await self.routing.client(address).request(op, **fields)
        return FleetEvents(peers, ask)

    # -- shards ---------------------------------------------------------------------------

    async def _drain_shards(self, shards: set[int]) -> None:
        """Until no event of an object of these shards runs here (the backend stops
        new ones first): a shard handed over cleanly cuts nothing off."""
        backend = self.backend

        def busy() -> bool:
            return any(backend.shard_of(k) in shards for k in self._host.busy_keys()) or \
                any(backend.shard_of(k) in shards for k in self._scheduler.running)
        # Polled: events end in the host and attempts in the scheduler, with no one
        # signal for both; the backend bounds the wait.
        while busy():  # noqa: ASYNC110
            await asyncio.sleep(0.01)

    def _shards_changed(self, gained: set[int], lost: set[int]) -> None:
        """The backend gained or lost shard leases: the scheduler and the host follow."""
        if not self._state.running:
            return  # start() loads what is held when it starts the scheduler
        backend = self.backend

        def in_lost(key: ObjectKey) -> bool:
            return backend.shard_of(key) in lost

        self._tasks.spawn(self._follow_shards(bool(gained), in_lost if lost else None),
                          name="shards")

    async def _follow_shards(self, gained: bool,
                             lost: Callable[[ObjectKey], bool] | None) -> None:
        if lost is not None:
            await self.owned.close_moved(lost)
            self._scheduler.forget(lost)
            await self._host.release(lost)
        if gained:
            await self._scheduler.reload()
