"""`ctx.block_concurrency_while` holds every event of the object, wherever it is called
from, and what it returns can be awaited on the virtual clock."""

from __future__ import annotations

import asyncio
from typing import Any

from alarmtop.core import DurableObject, ObjectContext, VirtualClock
from tests.conftest import START_MS, RuntimeFactory
from tests.kernel.tracked import spawn

HANDLES: dict[str, Any] = {}


class Napper(DurableObject):
    """Blocks in its constructor, or from a call, on a nap on the runtime clock."""

    def __init__(self, ctx: ObjectContext, env: Any) -> None:
        super().__init__(ctx, env)
        self.log: list[tuple[str, int]] = []
        if ctx.id.startswith("ctor"):
            HANDLES[ctx.id] = ctx.block_concurrency_while(self._nap)

    async def _nap(self) -> str:
        await self.ctx.sleep(5)
        self.log.append(("nap done", self.ctx.now_ms() - START_MS))
        return "rested"

    async def hold(self) -> int:
        """Blocks from inside a call: the call ends only once the nap is over."""
        self.ctx.block_concurrency_while(self._nap)
        return self.ctx.now_ms() - START_MS

    async def ping(self) -> list[tuple[str, int]]:
        self.log.append(("ping", self.ctx.now_ms() - START_MS))
        return self.log


async def test_a_blocker_started_from_a_call_holds_that_call_and_the_next(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    """Observation 6: the call used to return before the blocker ended, and the next
    event ran while it still held the object."""
    rt = await make_runtime(Napper)
    stub = rt.get(Napper, "call")
    hold = spawn(clock, stub.hold())
    await asyncio.sleep(0)
    ping = spawn(clock, stub.ping())
    await clock.advance(1)
    assert not hold.done(), "the call returned while its blocker was still running"
    assert not ping.done(), "the next event ran while the blocker held the object"
    await clock.advance(10)
    assert await hold == 0  # the value the call computed, handed out once the nap ended
    assert await ping == [["nap done", 5000], ["ping", 5000]]


async def test_awaiting_a_blocker_from_a_tracked_task_lets_time_move(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    """Observation 12: a test task that awaited the blocker counted as busy while the
    blocker slept on the same clock, so `advance` never returned."""
    rt = await make_runtime(Napper)
    call = spawn(clock, rt.get(Napper, "ctor-1").ping())
    await asyncio.sleep(0)

    async def wait_for_blocker() -> Any:
        return await HANDLES["ctor-1"]

    waiter = spawn(clock, wait_for_blocker())
    await asyncio.wait_for(clock.advance(10), timeout=10)
    assert await waiter == "rested"
    assert await call == [["nap done", 5000], ["ping", 5000]]
