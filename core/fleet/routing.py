"""Routing an object's events to the node that holds its shard.

One runtime on SQLite is its own fleet: every object is local. On a shared backend
(`PostgresBackend`) each object's shard is leased by one node; the router finds
it, and the runtime forwards the event there (`fleet/node.py`). An object whose
shard has no live owner is claimed by the caller's node, or, when another node
claims it first, reached there; either way within a bounded wait, else a clear
error.

A call whose owner cannot be reached, or no longer holds the shard, ran nowhere:
it is asked again of the shard's owner as the database names it, until the lease
of an owner that died runs out and another node takes the shard over. A call
whose connection to the owner ended while it ran there (the owner died) may have
run, up to its commit: it waits for the shard's next owner too, and then fails
with `NodeUnreachable` saying so, rather than run a second time unasked (a call
made then reaches the next owner at once).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from alarmtop.core.fleet.links import LinkLost, NodeClient
from alarmtop.core.model.errors import NodeUnreachable, PeerDown, ShardMoved
from alarmtop.core.model.node_tls import NodeTls

ObjectKey = tuple[str, str]
CLAIM_WAIT_S = 5.0


@runtime_checkable
class FleetBackend(Protocol):
    """A backend several runtime nodes share (leases, node-to-node calls)."""

    node_id: str
    cluster_secret: str
    lease_s: float
    drain_s: float  # how long a hand-over (or a clean stop) waits for what is in flight
    node_host: str  # where it listens for other nodes' calls
    node_tls: NodeTls | None  # its certificate for node links (None: ws://)
    node_insecure_no_tls: bool  # told that something else encrypts its node links

    def bind(self, on_change: Any, address: str | None = None,
             drain: Any = None) -> None: ...

    def shard_of(self, key: ObjectKey) -> int: ...

    async def owner_of(self, key: ObjectKey, fresh: bool = False
                       ) -> tuple[str | None, str | None]: ...

    async def claim_now(self, shard: int) -> bool: ...

    def may_run(self, key: ObjectKey) -> bool: ...

    def tenure(self, key: ObjectKey) -> int | None: ...

    async def nodes(self) -> list[dict[str, Any]]: ...

    async def claim_once(self, name: str, at_ms: int) -> bool: ...

    async def share_faults(self, registry: Any) -> None: ...


HERE = object()  # what `forward` answers when the object's events run on this node


class Router:
    """Where an object's events run: on this node, or forwarded to its owner."""

    async def peer(self, key: ObjectKey, fresh: bool = False) -> NodeClient | None:
        """The owner to forward the object's events to (None: they run here); `fresh`
        after the last one named did not hold the shard or did not answer."""
        return None

    async def route(self, key: ObjectKey, here: Callable[[], Awaitable[Any]], op: str,
                    **fields: Any) -> Any:
        """Run an event of the object: `here()` on this node, or `op` with `fields`
        sent to the node that holds its shard; its answer either way."""
        return await self.route_with(key, here, lambda peer: peer.request(op, **fields))

    async def route_with(self, key: ObjectKey, here: Callable[[], Awaitable[Any]],
                         there: Callable[[NodeClient], Awaitable[Any]]) -> Any:
        """`route`, with `there(peer)` saying what to ask of the owner."""
        return await here()

    async def close(self) -> None:
        pass


class FleetRouter(Router):
    def __init__(self, backend: FleetBackend, wait_s: float = CLAIM_WAIT_S,
                 tls: ssl.SSLContext | None = None) -> None:
        self._backend = backend
        self._wait_s = wait_s
        self._tls = tls
        # A dead owner is found out only when its lease runs out: a call to it waits
        # that long (and a little) for the shard's next owner before giving up.
        self._failover_s = max(wait_s, backend.lease_s + 2.0)
        self._clients: dict[str, NodeClient] = {}

    async def route_with(self, key: ObjectKey, here: Callable[[], Awaitable[Any]],
                         there: Callable[[NodeClient], Awaitable[Any]]) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._failover_s
        fresh = False
        while True:
            peer = await self.peer(key, fresh)
            try:
                if peer is None:
                    return await here()
                return await there(peer)
            except LinkLost as exc:
                raise await self._lost_during(key, exc, deadline) from exc
            except (PeerDown, ShardMoved) as exc:
                # Nothing ran: ask again who holds the shard, until its lease runs out
                # and a live node (maybe this one) takes it over.
                if loop.time() >= deadline:
                    raise NodeUnreachable(
                        f"{key[0]}/{key[1]}: its shard's owner cannot be reached ({exc}), "
                        f"and no other node took the shard over within "
                        f"{self._failover_s:g} s; check the fleet's nodes (rt.nodes(), or "
                        "the console's Nodes view)") from exc
                fresh = True  # the owner as last seen is not it (any more)
                await asyncio.sleep(0.1)

    async def _lost_during(self, key: ObjectKey, lost: LinkLost,
                           deadline: float) -> NodeUnreachable:
        """The error of a call whose owner went away while it ran there, once the
        shard's next owner holds it (or the wait for one ran out). The call is not made
        again: it may have run up to its commit, and running it twice is the caller's
        decision. A call made now reaches the next owner at once."""
        loop = asyncio.get_running_loop()
        name = f"{key[0]}/{key[1]}"
        while True:
            try:
                peer = await self.peer(key, fresh=True)
            except NodeUnreachable:
                pass  # no live owner yet, and this node could not take the shard: wait on
            else:
                if peer is None or peer.address != lost.address:
                    now_at = "this node" if peer is None else peer.address
                    return NodeUnreachable(
                        f"{name}: its owner at {lost.address} went away while the call ran "
                        f"there; the call may have run, up to its commit, and was not made "
                        f"again. The object is served at {now_at} now: call again if it "
                        "is safe to run twice")
            if loop.time() >= deadline:
                return NodeUnreachable(
                    f"{name}: its owner at {lost.address} went away while the call ran "
                    f"there (the call may have run, up to its commit), and no other node "
                    f"took the shard over within {self._failover_s:g} s; check the "
                    "fleet's nodes (rt.nodes(), or the console's Nodes view)")
            await asyncio.sleep(0.1)

    async def peer(self, key: ObjectKey, fresh: bool = False) -> NodeClient | None:
        backend = self._backend
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait_s
        while True:
            if backend.may_run(key):
                return None
            node, address = await backend.owner_of(key, fresh)
            fresh = True  # a second look reads the row
            if node is None or node == backend.node_id:
                # No live owner, or this node's own lease ran out (or is being handed
                # over): take it now unless another node or a hand-over is due to.
                if await backend.claim_now(backend.shard_of(key)):
                    return None
            elif address:
                return self.client(address)
            if loop.time() >= deadline:
                raise NodeUnreachable(
                    f"no live node holds the shard of {key[0]}/{key[1]} (shard "
                    f"{backend.shard_of(key)}), and this node could not claim it within "
                    f"{self._wait_s:g} s; check that the fleet's nodes reach PostgreSQL")
            await asyncio.sleep(0.05)

    def client(self, address: str) -> NodeClient:
        client = self._clients.get(address)
        if client is None:
            client = self._clients[address] = NodeClient(address, self._backend.node_id,
                                                         self._backend.cluster_secret,
                                                         self._tls)
        return client

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.close()


class Routing:
    """The router this node uses now: a `FleetRouter` while it runs as a fleet's node,
    a plain `Router` (everything here) otherwise. Calls, socket relays and operator
    actions route through it; its router changes as the node starts and stops."""

    def __init__(self) -> None:
        self.router: Router = Router()

    def start(self, backend: FleetBackend, tls: ssl.SSLContext | None = None) -> None:
        """Route through the fleet; `tls` checks the certificates of `wss://` peers."""
        self.router = FleetRouter(backend, tls=tls)

    async def stop(self) -> None:
        router, self.router = self.router, Router()
        await router.close()

    async def route(self, key: ObjectKey, here: Callable[[], Awaitable[Any]], op: str,
                    **fields: Any) -> Any:
        return await self.router.route(key, here, op, **fields)

    async def route_with(self, key: ObjectKey, here: Callable[[], Awaitable[Any]],
                         there: Callable[[NodeClient], Awaitable[Any]]) -> Any:
        return await self.router.route_with(key, here, there)

    async def peer(self, key: ObjectKey, fresh: bool = False) -> NodeClient | None:
        return await self.router.peer(key, fresh)

    async def held(self, key: ObjectKey) -> None:
        """Refuse a forwarded event unless this node holds the object's shard: nothing
        runs here, and the caller asks again."""
        if await self.router.peer(key) is not None:
            raise ShardMoved(f"{key[0]}/{key[1]} moved to another node; nothing ran here")

    def client(self, address: str) -> NodeClient:
        """A connection to another node (only while running as a fleet's node)."""
        router = self.router
        if not isinstance(router, FleetRouter):
            raise NodeUnreachable("this node is stopping")
        return router.client(address)
