"""Waiting for a busy object with bounded patience, and delays that a clear ends.

`tasks.patience(s)` bounds how long the current task waits for an object's turn:
past it the wait raises `ObjectBusy`, naming what holds the object and since when,
and what the caller waited to do was not done. Tasks it starts do not inherit it.
An `alarm_delay` fault sleeps on the runtime clock until it is cleared.
"""

from __future__ import annotations

import asyncio

import pytest

from alarmtop.core import DurableObject, VirtualClock
from alarmtop.core.kernel.supervisor import patience, patience_left
from alarmtop.core.model.errors import ObjectBusy
from tests.conftest import RuntimeFactory
from tests.kernel.tracked import spawn


class Slow(DurableObject):
    async def hold(self, seconds: float) -> None:
        await self.ctx.sleep(seconds)

    async def put(self, value: int) -> None:
        await self.ctx.storage.put("v", value)

    async def get(self) -> int | None:
        value = await self.ctx.storage.get("v")
        return None if value is None else int(value)


async def test_a_caller_out_of_patience_is_told_what_holds_the_object(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    rt = await make_runtime(Slow)
    holder = spawn(clock, rt.get(Slow, "s").hold(60))
    await clock.advance(7)
    assert not holder.done()
    with patience(0.05), pytest.raises(ObjectBusy) as caught:
        await rt.get(Slow, "s").put(1)
    err = caught.value
    assert str(err) == ("Slow/s is busy handling a call to hold() (started 7 s ago); nothing "
                        "was done after waiting 0.05 s for it")
    assert (err.class_name, err.object_name, err.doing, err.age_s) == (
        "Slow", "s", "handling a call to hold()", 7.0)
    await clock.advance(60)
    await holder
    assert await rt.get(Slow, "s").get() is None  # the put never ran


async def test_patience_belongs_to_the_task_that_set_it() -> None:
    async def child() -> object:
        return patience_left()

    with patience(5):
        mine = patience_left()
        inherited = await asyncio.get_running_loop().create_task(child())
    assert mine is not None and 4 < mine[0] <= 5 and mine[1] == 5
    assert inherited is None
    assert patience_left() is None


async def test_without_patience_the_caller_waits_its_turn(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    rt = await make_runtime(Slow)
    holder = spawn(clock, rt.get(Slow, "s").hold(60))
    await clock.advance(1)
    waiter = spawn(clock, rt.get(Slow, "s").put(2))
    await clock.advance(60)
    await holder
    await waiter
    assert await rt.get(Slow, "s").get() == 2


async def test_clearing_a_delay_fault_ends_the_delay_now(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    rt = await make_runtime(Slow)
    fid = rt.faults.inject("Slow/s", "alarm_delay", times=1, seconds=60)
    fault = rt.faults.take("Slow/s", "alarm_delay")
    assert fault is not None
    sleeper = spawn(clock, rt.faults.delay(fault, clock))
    await clock.advance(5)
    assert not sleeper.done()
    # Used up, but listed while its delay runs: an operator can still clear it.
    assert [(f["id"], f["remaining"]) for f in rt.faults.list()] == [(fid, 0)]
    rt.faults.clear(fid)
    await clock.settle()
    assert sleeper.done() and clock.now_ms() - fault.created_ms == 5000
    assert rt.faults.list() == []


async def test_a_delay_that_ends_by_itself_leaves_no_trace(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    rt = await make_runtime(Slow)
    fid = rt.faults.inject("Slow/s", "alarm_delay", times=None, seconds=2)
    fault = rt.faults.take("Slow/s", "alarm_delay")
    assert fault is not None
    sleeper = spawn(clock, rt.faults.delay(fault, clock))
    await clock.advance(2)
    assert sleeper.done()
    assert [f["id"] for f in rt.faults.list()] == [fid]  # 'always': still there
    rt.faults.clear(fid)
    assert rt.faults.list() == []
