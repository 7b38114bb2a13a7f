"""Routing an object's events to the node that holds its shard.

One runtime on SQLite is its own fleet: every object is local. On a shared backend
(`PostgresBackend`) each object's shard is leased by one node; the router finds
it, and the runtime forwards the event there (`core/nodes.py`). An object whose
shard has no live owner is claimed by the caller's node, or, when another node
claims it first, reached there; either way within a bounded wait, else a clear
error.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol, runtime_checkable

from alarmtop.core.errors import NodeUnreachable
from alarmtop.core.nodes import NodeClient

ObjectKey = tuple[str, str]
CLAIM_WAIT_S = 5.0


@runtime_checkable
class FleetBackend(Protocol):
    """A backend several runtime nodes share (leases, node-to-node calls)."""

    node_id: str
    cluster_secret: str

    def bind(self, on_change: Any, address: str | None = None) -> None: ...

    def shard_of(self, key: ObjectKey) -> int: ...

    async def owner_of(self, key: ObjectKey) -> tuple[str | None, str | None]: ...

    async def claim_now(self, shard: int) -> bool: ...

    async def nodes(self) -> list[dict[str, Any]]: ...


class Router:
    """Where an object's events run: here (None), or the peer to forward them to."""

    async def peer(self, key: ObjectKey) -> NodeClient | None:
        return None

    async def close(self) -> None:
        pass


class FleetRouter(Router):
    def __init__(self, backend: FleetBackend, wait_s: float = CLAIM_WAIT_S) -> None:
        self._backend = backend
        self._wait_s = wait_s
        self._clients: dict[str, NodeClient] = {}

    async def peer(self, key: ObjectKey) -> NodeClient | None:
        backend = self._backend
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait_s
        while True:
            node, address = await backend.owner_of(key)
            if node == backend.node_id:
                return None
            if node is None:
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
                                                         self._backend.cluster_secret)
        return client

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.close()
