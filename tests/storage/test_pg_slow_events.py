"""On PostgreSQL, slow events do not starve the others, nor the runtime's own work.

An event holds a connection from its first storage call to its commit. With every
event connection held by events that wrote and then wait, another object's call
still runs at once (a connection is opened for it), and so do the lease keeper's
renewal and the operators' queries: they have connections of their own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from alarmtop.core import DurableObject, PostgresBackend, Runtime, VirtualClock
from tests.conftest import START_MS
from tests.fleet.conftest import until

POOL = 3
PROMPT_S = 5.0  # generous on a loaded machine; the starved call waited forever
Began = asyncio.Queue[str]  # the slow events that hold their connection


class Slow(DurableObject):
    async def hold(self) -> None:
        await self.ctx.storage.put("began", True)  # takes an event connection
        self.env.put_nowait(self.ctx.id)
        await self.ctx.sleep(3600)  # a virtual hour the test never lets pass

    async def ping(self) -> str:
        await self.ctx.storage.put("pinged", True)
        return "pong"


@pytest.fixture
async def rt(pg_dsn: str) -> AsyncIterator[tuple[Runtime, PostgresBackend, Began]]:
    began: Began = asyncio.Queue()
    backend = PostgresBackend(pg_dsn, shards=8, pool_size=POOL)
    runtime = Runtime(backend=backend, clock=VirtualClock(START_MS), env=began)
    runtime.register(Slow)
    async with runtime:
        yield runtime, backend, began


async def test_other_calls_and_the_runtime_go_on_while_slow_events_hold_every_connection(
        rt: tuple[Runtime, PostgresBackend, Began]) -> None:
    runtime, backend, began = rt
    holds = [asyncio.create_task(runtime.get(Slow, f"slow-{i}").hold())
             for i in range(POOL + 1)]
    try:
        async with asyncio.timeout(60):
            for _ in range(POOL + 1):
                await began.get()
        # Every pooled event connection is held, and one more.
        async with asyncio.timeout(PROMPT_S):
            assert await runtime.get(Slow, "fast").ping() == "pong"
            await backend.keep_leases_once()  # the renewal does not wait for them
            assert len(backend.epochs) == 8
            assert await runtime.count_objects() >= POOL + 2
            await runtime.audit.record("operator", "look", None)
            assert await runtime.audit.count() == 1
    finally:
        for task in holds:
            task.cancel()
        await asyncio.gather(*holds, return_exceptions=True)


async def test_the_overflow_is_bounded_and_given_back(
        rt: tuple[Runtime, PostgresBackend, Began]) -> None:
    """Past the pool and as many again, an event waits its turn; the connections opened
    for the waiting ones are closed after their commits."""
    runtime, backend, began = rt
    events = backend.events
    assert events is not None
    holds = [asyncio.create_task(runtime.get(Slow, f"slow-{i}").hold())
             for i in range(2 * POOL)]
    try:
        async with asyncio.timeout(60):
            for _ in range(2 * POOL):
                await began.get()
        assert events.extra == POOL
        waiting = asyncio.create_task(runtime.get(Slow, "late").ping())
        # Past its patience, with no overflow left: it waits for a pooled connection.
        await until(lambda: events.waiting == 1, within=60, what="the late event waiting")
        assert not waiting.done() and events.extra == POOL  # bounded: no more opened
        holds[0].cancel()
        async with asyncio.timeout(PROMPT_S):
            assert await waiting == "pong"
    finally:
        for task in holds:
            task.cancel()
        await asyncio.gather(*holds, return_exceptions=True)
    assert events.extra == 0
