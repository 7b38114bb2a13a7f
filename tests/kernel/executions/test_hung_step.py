"""A step that hangs: operators' pause and abort answer within the command deadline
(they do not wait for the step), and after a step ran past `alarm_timeout` the first
abort works (it used to fail on a UNIQUE constraint; the second worked)."""

from __future__ import annotations

import asyncio
from typing import Any

from alarmtop.core import VirtualClock
from alarmtop.core.durable import DurableContext, durable_execution
from tests.conftest import RuntimeFactory

started: list[str] = []
CLOCK: list[VirtualClock] = []


@durable_execution(name="hung")
async def hung(event: Any, ctx: DurableContext) -> str:
    async def forever() -> str:
        started.append("step")
        await CLOCK[0].sleep(10**6)  # a vendor call that never answers
        return "never"
    await ctx.step(forever, name="call vendor")
    return "done"


async def test_abort_after_a_step_ran_past_the_alarm_timeout(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    started.clear()
    CLOCK[:] = [clock]
    rt = await make_runtime(alarm_timeout=60)
    rt.register_execution(hung)
    await rt.executions.start("hung", None, execution_id="h1")
    await clock.advance(1)
    assert started == ["step"]
    await clock.advance(59)  # cut off by the alarm timeout; its retry is a second later
    status = await rt.alarm("Execution", "h1")
    assert status is not None and status.state == "retrying", status
    assert started == ["step"]
    out = await rt.executions.abort("h1", reason="vendor down")
    assert out["status"] == "aborted"
    d = await rt.executions.describe("h1")
    assert d["status"] == "aborted"


async def test_abort_and_pause_of_a_hung_step_answer_at_once(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    """Within the command deadline on the wall clock, without the virtual clock moving:
    the invocation in flight ends as a failed attempt, then the action is applied."""
    started.clear()
    CLOCK[:] = [clock]
    rt = await make_runtime()  # the default alarm_timeout: 15 minutes
    rt.register_execution(hung)
    failed = rt.events.subscribe("alarm.failed")
    for eid in ("p1", "a1"):
        await rt.executions.start("hung", None, execution_id=eid)
    await clock.advance(1)
    assert started == ["step", "step"]
    async with asyncio.timeout(5):
        paused = await rt.executions.pause("p1", reason="vendor down")
        aborted = await rt.executions.abort("a1", reason="vendor down for good")
    assert paused["paused"] is True and aborted["status"] == "aborted"
    errors = [e.data["error"] for e in failed.drain()]
    assert len(errors) == 2 and all("AlarmHandlerInterrupted" in e for e in errors), errors
    await clock.advance(600)
    assert started == ["step", "step"]  # paused: nothing runs; aborted: nothing more
    assert (await rt.executions.describe("a1"))["status"] == "aborted"
    await rt.executions.resume("p1")
    await clock.advance(1)
    assert started == ["step", "step", "step"]  # on resume, the step runs again
