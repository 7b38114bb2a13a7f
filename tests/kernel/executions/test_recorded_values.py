"""`ctx.now()`/`ctx.now_ms()`/`ctx.random()` are recorded: replays see the same values."""

from __future__ import annotations

from typing import Any

from alarmtop.core import VirtualClock
from alarmtop.core.durable import DurableContext, Duration, durable_execution
from tests.conftest import RuntimeFactory

seen: list[tuple[int, str, float, int]] = []


@durable_execution(name="stamped")
async def stamped(event: Any, ctx: DurableContext) -> dict[str, Any]:
    at = ctx.now_ms()
    when = ctx.now().isoformat()
    rng = ctx.random()
    draw, pick = rng.random(), rng.randint(1, 1_000_000)
    seen.append((at, when, draw, pick))
    await ctx.step(lambda: "side effect", name="effect")
    await ctx.wait(Duration(30))
    later = ctx.now_ms()
    return {"at": at, "draw": draw, "pick": pick, "later": later}


async def test_values_are_the_same_on_every_replay(make_runtime: RuntimeFactory,
                                                   clock: VirtualClock) -> None:
    """Three invocations (start, after the wait, and none in between) see one value."""
    seen.clear()
    rt = await make_runtime()
    rt.register_execution(stamped)
    start = clock.now_ms()
    await rt.executions.start("stamped", None, execution_id="v1")
    await clock.advance(31)
    d = await rt.executions.describe("v1")
    assert d["status"] == "succeeded"
    assert len(seen) == 2 and seen[0] == seen[1]
    assert seen[0][0] == start and d["result"]["at"] == start
    assert d["result"]["later"] == start + 30_000  # taken after the wait, once
    # Outside the AWS history: no event was added for them.
    assert {e["EventType"] for e in d["history"]} <= {
        "ExecutionStarted", "StepStarted", "StepSucceeded", "WaitStarted", "WaitSucceeded",
        "InvocationCompleted", "ExecutionSucceeded"}


async def test_values_survive_a_crash_and_a_restart(make_runtime: RuntimeFactory,
                                                    clock: VirtualClock) -> None:
    """A crash after the values were used by a step, then a whole new runtime: the
    replay takes them from the log, not from the clock or a new seed."""
    seen.clear()
    rt = await make_runtime()
    rt.register_execution(stamped)
    rt.faults.inject("v2", "step_crash", 1, step="effect", point="C")
    await rt.executions.start("stamped", None, execution_id="v2")
    await clock.advance(5)  # crashed after the step's checkpoint; retried a second later
    assert len(seen) == 2 and seen[0] == seen[1]
    await rt.stop()
    rt2 = await make_runtime()
    rt2.register_execution(stamped)
    await clock.advance(40)
    d = await rt2.executions.describe("v2")
    assert d["status"] == "succeeded"
    assert len(seen) == 3 and seen[2] == seen[0]
    assert (d["result"]["at"], d["result"]["draw"]) == (seen[0][0], seen[0][2])


async def test_two_executions_draw_different_seeds(make_runtime: RuntimeFactory,
                                                   clock: VirtualClock) -> None:
    seen.clear()
    rt = await make_runtime()
    rt.register_execution(stamped)
    await rt.executions.start("stamped", None, execution_id="v3")
    await rt.executions.start("stamped", None, execution_id="v4")
    await clock.advance(1)
    assert len(seen) == 2 and seen[0][2] != seen[1][2]
