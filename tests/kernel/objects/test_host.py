"""ObjectHost: one event at a time per object, handed over in order, cancellations included."""

from __future__ import annotations

import asyncio

from alarmtop.core import DurableObject
from tests.conftest import RuntimeFactory


class Plain(DurableObject):
    pass


KEY = ("Plain", "p")


async def spin(rounds: int = 10) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


async def test_a_free_turn_is_taken_without_waiting(make_runtime: RuntimeFactory) -> None:
    host = (await make_runtime(Plain)).host
    r, ready = host.enter(KEY)
    assert ready and r.busy
    second, ready2 = host.enter(("Plain", "q"))  # another object: its own turn
    assert ready2
    host.leave_turn(second)
    host.leave_turn(r)
    assert not r.busy and not host.is_resident(KEY)


async def test_turns_are_handed_over_in_order(make_runtime: RuntimeFactory) -> None:
    host = (await make_runtime(Plain)).host
    order: list[str] = []
    release = asyncio.Event()

    async def event(name: str, hold: bool) -> None:
        async with host.exclusive(KEY):
            order.append(f"{name} in")
            if hold:
                await release.wait()
            order.append(f"{name} out")

    tasks = [asyncio.create_task(event("a", True))]
    await spin()
    tasks += [asyncio.create_task(event(n, False)) for n in "bcd"]
    await spin()
    assert order == ["a in"]
    release.set()
    await asyncio.gather(*tasks)
    assert order == ["a in", "a out", "b in", "b out", "c in", "c out", "d in", "d out"]


async def test_a_waiter_cancelled_while_waiting_is_skipped(make_runtime: RuntimeFactory) -> None:
    host = (await make_runtime(Plain)).host
    order: list[str] = []
    release = asyncio.Event()

    async def event(name: str) -> None:
        async with host.exclusive(KEY):
            order.append(name)
            if name == "a":
                await release.wait()

    a = asyncio.create_task(event("a"))
    await spin()
    b, c = asyncio.create_task(event("b")), asyncio.create_task(event("c"))
    await spin()
    b.cancel()
    await spin()
    release.set()
    await asyncio.gather(a, c)
    assert b.cancelled() and order == ["a", "c"]
    assert not host.is_resident(KEY) and KEY not in host._residents


async def test_a_waiter_cancelled_after_being_handed_the_turn_passes_it_on(
        make_runtime: RuntimeFactory) -> None:
    host = (await make_runtime(Plain)).host
    r, ready = host.enter(KEY)
    assert ready
    order: list[str] = []

    async def event(name: str) -> None:
        async with host.exclusive(KEY):
            order.append(name)

    b, c = asyncio.create_task(event("b")), asyncio.create_task(event("c"))
    await spin()
    host.leave_turn(r)  # b is handed the turn ...
    b.cancel()  # ... and cancelled before it could run
    await asyncio.wait_for(c, 1)
    await asyncio.gather(b, return_exceptions=True)
    assert b.cancelled() and order == ["c"]
    assert KEY not in host._residents


async def test_an_object_is_not_hibernated_during_its_event(make_runtime: RuntimeFactory) -> None:
    host = (await make_runtime(Plain)).host
    async with host.exclusive(KEY) as r:
        await host.wake(r)
        assert not await host.hibernate(KEY)
    assert await host.hibernate(KEY)
    assert not host.is_resident(KEY)
