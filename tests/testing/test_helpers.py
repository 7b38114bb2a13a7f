"""alarmtop.testing's helpers and fixtures, as users use them (on both backends)."""

from __future__ import annotations

from typing import Any

import pytest

from alarmtop.core import AlarmInfo, DurableObject, Runtime, SystemClock, VirtualClock
from alarmtop.core.durable import (
    CallbackConfig,
    CallbackExternalError,
    CallbackTimeoutError,
    DurableContext,
    Duration,
    durable_execution,
)
from alarmtop.core.model.errors import InvalidFault
from alarmtop.testing import (
    START_MS,
    GiveUp,
    NotReached,
    attempts,
    fail_callback,
    inject_fault,
    ladder,
    send_callback,
    until,
    until_dead,
    until_status,
    waiting_callback,
)
from alarmtop.testing.plugin import marked
from tests.conftest import RuntimeFactory


class Flaky(DurableObject):
    async def arm(self, delay_ms: int = 0) -> None:
        await self.ctx.storage.set_alarm(self.ctx.now_ms() + delay_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        raise RuntimeError("payment backend down")


class Steady(DurableObject):
    async def arm(self) -> None:
        await self.ctx.storage.set_alarm(self.ctx.now_ms() + 1000)

    async def alarm(self, info: AlarmInfo) -> None:
        await self.ctx.storage.put("fired", self.ctx.now_ms())

    async def fired(self) -> int | None:
        value = await self.ctx.storage.get("fired")
        return None if value is None else int(value)


class Restless(DurableObject):
    """Re-arms a millisecond later on every attempt: a timer a millisecond, forever."""

    async def arm(self) -> None:
        await self.ctx.storage.set_alarm(self.ctx.now_ms() + 1)

    async def alarm(self, info: AlarmInfo) -> None:
        await self.ctx.storage.set_alarm(self.ctx.now_ms() + 1)


@durable_execution(name="approve")
async def approve(event: Any, ctx: DurableContext) -> str:
    cb = await ctx.create_callback("approval", CallbackConfig(timeout=Duration(600)))
    try:
        return f"approved: {await cb.result()}"
    except CallbackTimeoutError:
        return "timed out"
    except CallbackExternalError as exc:
        return f"refused: {exc.error_type}: {exc.message}"


@durable_execution(name="quick")
async def quick(event: Any, ctx: DurableContext) -> str:
    return "done"


# Every alarmtop_runtime of this module registers Steady (the tests' own markers add more).
pytestmark = pytest.mark.alarmtop(register=Steady, hibernate_after=99.0)


# -- fixtures ---------------------------------------------------------------------------

@pytest.mark.alarmtop(register=[Flaky])
async def test_the_runtime_fixture_is_started_on_the_virtual_clock(
        alarmtop_runtime: Runtime, virtual_clock: VirtualClock) -> None:
    assert alarmtop_runtime.running and alarmtop_runtime.clock is virtual_clock
    assert virtual_clock.now_ms() == START_MS
    assert alarmtop_runtime.registered_class("Flaky") is Flaky
    await alarmtop_runtime.get(Flaky, "p0").arm()
    await until_dead(alarmtop_runtime, Flaky, "p0")


@pytest.mark.alarmtop(register=[Flaky])
async def test_nothing_is_left_over_from_the_test_before(alarmtop_runtime: Runtime) -> None:
    assert await alarmtop_runtime.alarms() == []
    assert await alarmtop_runtime.dead_letters() == []


@pytest.mark.alarmtop(register=[Flaky, Steady], hibernate_after=5.0)
def test_markers_add_up_and_the_closest_option_wins(request: pytest.FixtureRequest) -> None:
    things, options = marked(request.node)
    assert things == (Flaky, Steady)
    assert options == {"hibernate_after": 5.0}


@pytest.mark.alarmtop.with_args(Flaky)
def test_a_marker_without_keywords_is_refused_saying_how(
        request: pytest.FixtureRequest) -> None:
    with pytest.raises(TypeError, match=r"takes keywords: @pytest.mark.alarmtop\(register="):
        marked(request.node)


async def test_registering_after_start_works(alarmtop_runtime: Runtime,
                                             virtual_clock: VirtualClock) -> None:
    alarmtop_runtime.register_execution(quick)
    eid = await alarmtop_runtime.executions.start("quick", None)
    assert (await until_status(alarmtop_runtime, eid))["result"] == "done"


async def test_the_factory_restarts_on_the_same_data(
        alarmtop_runtime_factory: RuntimeFactory, virtual_clock: VirtualClock) -> None:
    first = await alarmtop_runtime_factory(Steady)
    await first.get(Steady, "s").arm()
    await first.stop()
    again = await alarmtop_runtime_factory(Steady)
    assert await until(again, again.get(Steady, "s").fired) == START_MS + 1000


async def test_the_factory_refuses_what_it_cannot_register(
        alarmtop_runtime_factory: RuntimeFactory) -> None:
    with pytest.raises(TypeError, match="DurableObject subclasses and @durable_execution"):
        await alarmtop_runtime_factory(object)


# -- waiting on the virtual clock --------------------------------------------------------

async def test_until_dead_walks_the_default_ladder(make_runtime: RuntimeFactory,
                                                   clock: VirtualClock) -> None:
    rt = await make_runtime(Flaky)
    await rt.get(Flaky, "p0").arm()
    dead = await until_dead(rt, Flaky, "p0")
    assert (dead.state, dead.retry_count) == ("dead", 6)
    assert await ladder(rt, Flaky, "p0") == [0, 2, 6, 14, 30, 62, 126]
    assert clock.now_ms() == START_MS + 126_000  # it stops at the moment it got there
    [first, *_] = await attempts(rt, "Flaky", "p0")
    assert first.error is not None and "payment backend down" in first.error


async def test_until_gives_up_at_its_bound_saying_what_it_reached(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    rt = await make_runtime(Flaky)
    await rt.get(Flaky, "p0").arm()
    with pytest.raises(NotReached) as caught:
        await until_dead(rt, Flaky, "p0", within=20)
    message = str(caught.value)
    assert message.startswith("the alarm of Flaky/p0 dead: not reached after 20 s of "
                              "virtual time")
    assert "within=20 s is the limit" in message
    assert "retrying, retry 4 of 6, next attempt in 10 s" in message
    assert "last error: RuntimeError: payment backend down" in message
    assert caught.value.waited_s == 20 and clock.now_ms() == START_MS + 20_000


async def test_until_stops_after_max_steps(make_runtime: RuntimeFactory,
                                           clock: VirtualClock) -> None:
    rt = await make_runtime(Restless)
    await rt.get(Restless, "r").arm()
    with pytest.raises(NotReached, match="50 timers is the limit"):
        await until_dead(rt, Restless, "r", max_steps=50)
    assert clock.now_ms() == START_MS + 50


async def test_until_takes_time_itself_as_a_goal(make_runtime: RuntimeFactory,
                                                 clock: VirtualClock) -> None:
    rt = await make_runtime()
    later = START_MS + 3_600_000
    assert await until(rt, lambda: clock.now_ms() >= later, within=3600)
    assert clock.now_ms() == later


async def test_a_check_that_gives_up_ends_the_wait(make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime()

    def check() -> bool:
        raise GiveUp("it can never happen")

    with pytest.raises(NotReached, match="it can never happen"):
        await until(rt, check, what="the impossible")


async def test_helpers_say_when_the_clock_is_not_virtual(make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime(clock=SystemClock())
    with pytest.raises(TypeError, match="runs on SystemClock: build it with Runtime"):
        await until_dead(rt, Flaky, "p0")
    await rt.stop()  # the next runtime is the same node (on PostgreSQL, one at a time)
    virtual = await make_runtime()
    await virtual.stop()
    with pytest.raises(RuntimeError, match="not running: start it first"):
        await until(virtual, lambda: True)


async def test_attempts_of_no_alarm_is_an_error(make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime(Steady)
    with pytest.raises(LookupError, match="Steady/s has no alarm"):
        await attempts(rt, Steady, "s")


# -- executions and callbacks ------------------------------------------------------------

async def test_send_callback_finds_it_by_name_and_the_execution_goes_on(
        make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime(approve)
    eid = await rt.executions.start("approve", None)
    callback_id = await send_callback(rt, eid, "approval", "yes")
    d = await rt.executions.describe(eid)
    assert d["status"] == "succeeded" and d["result"] == "approved: yes"
    assert d["callbacks"][0]["callback_id"] == callback_id


async def test_fail_callback(make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime(approve)
    eid = await rt.executions.start("approve", None)
    await fail_callback(rt, eid, "approval", "Rejected", "fraud check")
    assert (await until_status(rt, eid))["result"] == "refused: Rejected: fraud check"


async def test_a_callback_timeout_in_virtual_time(make_runtime: RuntimeFactory,
                                                  clock: VirtualClock) -> None:
    rt = await make_runtime(approve)
    eid = await rt.executions.start("approve", None)
    await waiting_callback(rt, eid, "approval")
    waited_from = clock.now_ms()
    d = await until_status(rt, eid, "succeeded")
    assert d["result"] == "timed out"
    assert clock.now_ms() - waited_from == 600_000


async def test_waiting_for_a_callback_of_an_ended_execution_gives_up(
        make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime(quick)
    eid = await rt.executions.start("quick", None)
    with pytest.raises(NotReached, match="the execution ended first") as caught:
        await waiting_callback(rt, eid, "approval")
    assert "succeeded; callbacks: none" in str(caught.value)


async def test_until_status_says_what_it_waits_on(make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime(approve)
    eid = await rt.executions.start("approve", None)
    with pytest.raises(NotReached) as caught:
        await until_status(rt, eid, "succeeded", within=60)
    assert f"execution {eid} succeeded: not reached after 60 s" in str(caught.value)
    assert "last seen: suspended, waiting for callback 'approval'" in str(caught.value)
    with pytest.raises(ValueError, match="'done' is not an execution status"):
        await until_status(rt, eid, "done")


# -- faults -------------------------------------------------------------------------------

async def test_a_fault_clears_at_the_end_of_its_block(make_runtime: RuntimeFactory,
                                                      clock: VirtualClock) -> None:
    rt = await make_runtime(Steady)
    steady = rt.get(Steady, "s")
    with inject_fault(rt, (Steady, "s"), "alarm_raise", times=None) as fault:
        assert fault.active
        await steady.arm()
        await clock.advance(1)
        assert await steady.fired() is None
    assert not fault.active and rt.faults.list() == []
    assert await until(rt, steady.fired) == START_MS + 3000  # the first retry, 2 s later


async def test_a_fault_for_a_class_nobody_registered_is_refused(
        make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime(Steady)
    with pytest.raises(ValueError, match="no class 'Stedy' is registered"):
        inject_fault(rt, "Stedy/s", "alarm_raise")
    with pytest.raises(InvalidFault, match="needs the name of the step"):
        inject_fault(rt, "e1", "step_raise")
    fault = inject_fault(rt, "e1", "step_raise", step="charge", times=2)
    fault.clear()
    fault.clear()  # clearing twice is harmless
    assert rt.faults.list() == []
