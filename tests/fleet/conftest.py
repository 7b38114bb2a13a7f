"""Fleets of runtimes on one real PostgreSQL (the session's throwaway cluster).

In-process fleets share the test's virtual clock for the objects' time; the shard
leases run on the wall clock, as they do between processes. Tests that need a
lease round now call `keep_leases_once()` on a node instead of waiting for its
keeper (whose period, a third of `lease_s`, is long in these tests).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from alarmtop.core import AlarmInfo, DurableObject, PostgresBackend, Runtime, VirtualClock
from alarmtop.core.fleet import handshake

SHARDS = 8
WAIT_S = 10.0


class Counter(DurableObject):
    """Counts calls; can raise, hold an event open, and set an alarm."""

    async def add(self, n: int = 1) -> int:
        value = int(await self.ctx.storage.get("n") or 0) + n
        await self.ctx.storage.put("n", value)
        return value

    async def fail(self, text: str) -> None:
        raise ValueError(text)

    async def arm(self, delay_ms: int) -> int:
        at = self.ctx.now_ms() + delay_ms
        await self.ctx.storage.set_alarm(at)
        return at

    async def fired(self) -> int:
        return int(await self.ctx.storage.get("fired") or 0)

    async def alarm(self, info: AlarmInfo) -> None:
        if await self.ctx.storage.get("broken"):
            raise RuntimeError("downstream unavailable")
        await self.ctx.storage.put("fired", int(await self.ctx.storage.get("fired") or 0) + 1)

    async def break_alarm(self) -> None:
        await self.ctx.storage.put("broken", True)


async def until(cond: Callable[[], Awaitable[bool] | bool], within: float = WAIT_S,
                what: str = "the condition") -> None:
    """Poll (wall clock, bounded): leases and node links run on real time."""
    deadline = time.monotonic() + within
    while True:
        got = cond()
        if not isinstance(got, bool):
            got = await got
        if got:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {within} s")
        await asyncio.sleep(0.02)


NodeFactory = Callable[..., Awaitable[Runtime]]


@pytest.fixture
async def node(pg_dsn: str, clock: VirtualClock, tmp_path: Path) -> AsyncIterator[NodeFactory]:
    """Start fleet nodes on the test's PostgreSQL database; all stop afterwards."""
    started: list[Runtime] = []

    async def make(node_id: str, *classes: type, lease_s: float = 30.0,
                   **options: Any) -> Runtime:
        backend = PostgresBackend(pg_dsn, node_id=node_id, shards=SHARDS, lease_s=lease_s)
        rt = Runtime(tmp_path / node_id, clock=clock, backend=backend, **options)
        for cls in classes or (Counter,):
            rt.register(cls)
        await rt.start()
        started.append(rt)
        return rt

    yield make
    for rt in reversed(started):
        await rt.stop()


def backend_of(rt: Runtime) -> PostgresBackend:
    assert isinstance(rt.backend, PostgresBackend)
    return rt.backend


async def balance(*nodes: Runtime, rounds: int = 4) -> None:
    """Lease rounds on every node in turn until each holds its fair share."""
    for _ in range(rounds):
        for rt in nodes:
            await backend_of(rt).keep_leases_once()
    # Let the runtimes follow the shards they gained or lost.
    await asyncio.sleep(0.05)


async def cut_off(rt: Runtime) -> None:
    """`rt` as a process that crashed is seen by another starting under its node id:
    nothing answers at its node address any more, though its leases still run."""
    assert rt.node is not None
    server = rt.node.server
    assert server is not None
    await server.stop()


def name_on(rt: Runtime, cls: str = "Counter", prefix: str = "obj") -> str:
    """An object name whose shard `rt` holds now."""
    backend = backend_of(rt)
    for i in range(10_000):
        name = f"{prefix}-{i}"
        if backend.shard_of((cls, name)) in backend.epochs:
            return name
    raise AssertionError(f"{backend.node_id} holds no shard")


async def stall_and_claim_back(a: Runtime, b: Runtime, shard: int,
                               on_b: Callable[[], Awaitable[None]]) -> None:
    """Node a stalls unnoticed (its heartbeat and leases run out: a loaded machine, a
    paused process); b takes the shard over and runs `on_b`, then goes away; a's next
    lease round claims the shard back under a newer epoch."""
    first_epoch = backend_of(a).epochs[shard]
    async with backend_of(a)._require_pool().acquire() as conn:
        await conn.execute("UPDATE alarmtop.nodes SET renewed_ms = 0 WHERE node_id = $1",
                           backend_of(a).node_id)
        await conn.execute("UPDATE alarmtop.shards SET expires_ms = 0 WHERE owner = $1",
                           backend_of(a).node_id)

    async def b_holds() -> bool:
        await backend_of(b).keep_leases_once()
        return shard in backend_of(b).epochs
    await until(b_holds, what="b taking the shard over")
    await on_b()
    await b.stop()

    async def a_holds_again() -> bool:
        await backend_of(a).keep_leases_once()
        return backend_of(a).epochs.get(shard, first_epoch) > first_epoch
    await until(a_holds_again, what="a claiming the shard back")


async def prove(conn: Any, secret: str, node: str, protocol: int | None = 2) -> str:
    """The caller's side of a node link's handshake on a raw connection `conn`: answer
    the listener's challenge with a proof of `secret`; the hello frame sent (for a
    test that replays it). The listener's welcome, or its close, comes next."""
    _, nonce = handshake.read_challenge(await asyncio.wait_for(conn.recv(), WAIT_S))
    hello = handshake.hello(secret, nonce, node, protocol)
    await conn.send(hello)
    return hello
