"""Replay: recorded results are returned, never recomputed; divergence is caught."""

from __future__ import annotations

from typing import Any

from alarmtop.core import VirtualClock
from alarmtop.core.durable import (
    DurableContext,
    Duration,
    RetryStrategyConfig,
    StepConfig,
    StepError,
    create_retry_strategy,
    durable_execution,
)
from alarmtop.core.model.execution_config import JitterStrategy
from tests.conftest import RuntimeFactory

runs: list[str] = []


def counted(label: str) -> Any:
    def body() -> str:
        runs.append(label)
        return label.upper()
    body.__name__ = label
    return body


@durable_execution(name="two-steps")
async def two_steps(event: Any, ctx: DurableContext) -> str:
    a = await ctx.step(counted("first"))
    await ctx.wait(Duration(5))
    b = await ctx.step(counted("second"))
    return f"{a}+{b}"


@durable_execution(name="two-steps", version="2")
async def two_steps_changed(event: Any, ctx: DurableContext) -> str:
    a = await ctx.step(counted("renamed"))
    await ctx.wait(Duration(5))
    return str(a)


async def test_steps_are_not_recomputed_across_invocations(make_runtime: RuntimeFactory,
                                                           clock: VirtualClock) -> None:
    """The wait ends the first invocation; the second replays "first" from the log."""
    runs.clear()
    rt = await make_runtime()
    rt.register_execution(two_steps)
    await rt.executions.start("two-steps", None, execution_id="r1")
    await clock.advance(0)
    assert runs == ["first"]
    await clock.advance(5)
    d = await rt.executions.describe("r1")
    assert (d["status"], d["result"], runs) == ("succeeded", "FIRST+SECOND", ["first", "second"])
    types = [e["EventType"] for e in d["history"]]
    assert types == ["ExecutionStarted", "StepStarted", "StepSucceeded", "WaitStarted",
                     "InvocationCompleted", "WaitSucceeded", "StepStarted", "StepSucceeded",
                     "InvocationCompleted", "ExecutionSucceeded"]
    assert [e["EventId"] for e in d["history"]] == list(range(1, 11))


async def test_executions_stay_on_their_version(make_runtime: RuntimeFactory,
                                                clock: VirtualClock) -> None:
    """Registering version 2 while r2 waits: r2 finishes on version 1, new ones use 2."""
    runs.clear()
    rt = await make_runtime()
    rt.register_execution(two_steps)
    await rt.executions.start("two-steps", None, execution_id="r2")
    await clock.advance(0)
    rt.register_execution(two_steps_changed)
    await rt.executions.start("two-steps", None, execution_id="r3")
    await clock.advance(5)
    assert (await rt.executions.describe("r2"))["result"] == "FIRST+SECOND"
    d3 = await rt.executions.describe("r3")
    assert (d3["version"], d3["result"]) == ("2", "RENAMED")


async def test_a_changed_handler_is_a_non_determinism_error(make_runtime: RuntimeFactory,
                                                            clock: VirtualClock) -> None:
    """Replacing the code of a running version is caught at replay, shown, not replayed."""
    runs.clear()
    rt = await make_runtime()
    rt.register_execution(two_steps)
    sub = rt.events.subscribe("execution.")
    await rt.executions.start("two-steps", None, execution_id="r4")
    await clock.advance(0)
    # Same name and version, different code: what a careless deploy does.
    rt.executions.engine.handlers["two-steps"]["1"] = two_steps_changed.__class__(
        two_steps_changed.fn, "two-steps", "1")
    await clock.advance(5)
    d = await rt.executions.describe("r4")
    assert d["status"] == "failed"
    assert d["error"]["ErrorType"] == "NonDeterministicExecutionError"
    assert "'first'" in d["error"]["ErrorMessage"] and "'renamed'" in d["error"]["ErrorMessage"]
    assert runs == ["first"]
    seen = [e.type for e in sub.drain()]
    assert "execution.nondeterministic" in seen


attempts: dict[str, int] = {}


@durable_execution(name="flaky-step")
async def flaky_step(event: Any, ctx: DurableContext) -> str:
    def sometimes() -> str:
        attempts[event] = attempts.get(event, 0) + 1
        if attempts[event] < 3:
            raise ConnectionError(f"try {attempts[event]}")
        return "ok"

    cfg = StepConfig(retry_strategy=create_retry_strategy(RetryStrategyConfig(
        max_attempts=3, initial_delay=Duration(2), backoff_rate=3,
        jitter_strategy=JitterStrategy.NONE)))
    try:
        return str(await ctx.step(sometimes, name="sometimes", config=cfg))
    except StepError as exc:
        return f"gave up: {exc.error_type}"


async def test_step_retries_are_durable_waits(make_runtime: RuntimeFactory,
                                              clock: VirtualClock) -> None:
    """Retries follow the strategy (2 s, then 6 s) and each suspends the invocation."""
    attempts.pop("a", None)  # the module's count: one run per backend
    rt = await make_runtime()
    rt.register_execution(flaky_step)
    await rt.executions.start("flaky-step", "a", execution_id="f1")
    await clock.advance(0)
    await clock.advance(2)
    assert attempts["a"] == 2
    await clock.advance(6)
    d = await rt.executions.describe("f1")
    assert (d["status"], d["result"]) == ("succeeded", "ok")
    failed = [e["StepFailedDetails"]["RetryDetails"] for e in d["history"]
              if e["EventType"] == "StepFailed"]
    assert failed == [{"CurrentAttempt": 1, "NextAttemptDelaySeconds": 2},
                      {"CurrentAttempt": 2, "NextAttemptDelaySeconds": 6}]
    ok = [e for e in d["history"] if e["EventType"] == "StepSucceeded"]
    assert ok[0]["StepSucceededDetails"]["RetryDetails"] == {"CurrentAttempt": 3}


async def test_exhausted_step_error_is_rebuilt_on_replay(make_runtime: RuntimeFactory,
                                                         clock: VirtualClock) -> None:
    """A step that fails for good raises StepError with the original type, also on replay."""
    attempts["b"] = -10
    rt = await make_runtime()
    rt.register_execution(flaky_step)
    await rt.executions.start("flaky-step", "b", execution_id="f2")
    await clock.advance(30)
    d = await rt.executions.describe("f2")
    assert d["result"] == "gave up: ConnectionError"
