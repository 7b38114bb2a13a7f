"""Execution lifecycle hooks across replay: an invocation is told once per run of the
handler, an operation starts and ends once, a step attempt once per attempt (never
for a replayed step)."""

from __future__ import annotations

from typing import Any

from alarmtop.core import VirtualClock
from alarmtop.core.durable import (
    DurableContext,
    Duration,
    RetryStrategyConfig,
    StepConfig,
    create_retry_strategy,
    durable_execution,
)
from alarmtop.core.model import hook_info
from alarmtop.core.model.operations import OpStatus, OpType
from tests.conftest import RuntimeFactory
from tests.kernel.test_hooks import Raises, Recorder

tries: dict[str, int] = {}
EXECUTION_HOOKS = ("on_invocation_start", "on_invocation_end", "on_operation_start",
                   "on_operation_end", "on_user_function_start", "on_user_function_end")


def flaky() -> str:
    tries["flaky"] = tries.get("flaky", 0) + 1
    if tries["flaky"] == 1:
        raise RuntimeError("first try fails")
    return "ok"


RETRY_ONCE = StepConfig(retry_strategy=create_retry_strategy(
    RetryStrategyConfig(max_attempts=3, initial_delay=Duration(1))))


@durable_execution(name="journey")
async def journey(event: Any, ctx: DurableContext) -> str:
    a = await ctx.step(lambda: "a", name="first")
    await ctx.wait(Duration(5), name="pause")
    b = await ctx.step(flaky, config=RETRY_ONCE, name="flaky")
    return a + b


@durable_execution(name="doomed")
async def doomed(event: Any, ctx: DurableContext) -> None:
    def fails() -> None:
        raise ValueError("always")

    await ctx.step(fails, config=StepConfig(retry_strategy=create_retry_strategy(
        RetryStrategyConfig(max_attempts=1))), name="fails")


async def test_hooks_across_replay(make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    tries.clear()
    rec = Recorder()
    rt = await make_runtime(plugins=[rec])
    rt.register_execution(journey)
    await rt.executions.start("journey", None, execution_id="j1")
    await clock.advance(0)
    await clock.advance(5)  # the wait ends: invocation 2 fails flaky's first attempt
    await clock.advance(2)  # its retry: invocation 3
    d = await rt.executions.describe("j1")
    assert (d["status"], d["result"]) == ("succeeded", "aok")

    starts = rec.named("on_invocation_start")
    assert [(s.invocation, s.is_first_invocation) for s in starts] == [
        (1, True), (2, False), (3, False)]
    ends = rec.named("on_invocation_end")
    assert [e.start for e in ends] == starts
    assert [e.status for e in ends] == [hook_info.InvocationStatus.PENDING] * 2 + [
        hook_info.InvocationStatus.SUCCEEDED]

    # Each operation starts once and ends once, whatever replays it.
    op_starts = rec.named("on_operation_start")
    op_ends = rec.named("on_operation_end")
    assert [(o.operation_type, o.name) for o in op_starts] == [
        (OpType.STEP, "first"), (OpType.WAIT, "pause"), (OpType.STEP, "flaky")]
    assert sorted((o.name, o.status) for o in op_ends) == [
        ("first", OpStatus.SUCCEEDED), ("flaky", OpStatus.SUCCEEDED),
        ("pause", OpStatus.SUCCEEDED)]
    assert {o.operation_id for o in op_starts} == {o.operation_id for o in op_ends}

    # One attempt hook per attempt: "first" ran once (replayed twice), flaky twice.
    attempts = [(a.start.name, a.attempt, a.outcome)
                for a in rec.named("on_user_function_end")]
    assert attempts == [("first", 1, hook_info.UserFunctionOutcome.SUCCEEDED),
                        ("flaky", 1, hook_info.UserFunctionOutcome.FAILED),
                        ("flaky", 2, hook_info.UserFunctionOutcome.SUCCEEDED)]
    failed = rec.named("on_user_function_end")[1]
    assert failed.error is not None and failed.error["ErrorMessage"] == "first try fails"

    # Order within the first invocation: start, the step's hooks, the end last.
    told = [name for name, _ in rec.heard if name in EXECUTION_HOOKS]
    first = told[:6]
    assert first == ["on_invocation_start", "on_operation_start", "on_user_function_start",
                     "on_user_function_end", "on_operation_end", "on_operation_start"]
    assert told[-1] == "on_invocation_end"
    # The engine's own object events wrap each invocation (the execution's alarm).
    alarm_events = [i for i in rec.named("on_object_event_start") if i.event == "alarm"]
    assert {(i.object_class, i.object_name) for i in alarm_events} == {("Execution", "j1")}


async def test_a_failed_execution_ends_its_invocation_failed(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    rec = Recorder()
    rt = await make_runtime(plugins=[rec])
    rt.register_execution(doomed)
    await rt.executions.start("doomed", None, execution_id="d1")
    await clock.advance(0)
    assert (await rt.executions.describe("d1"))["status"] == "failed"
    ends = rec.named("on_invocation_end")
    assert [(e.status, e.execution_status) for e in ends] == [(hook_info.InvocationStatus.FAILED,
                                                                "failed")]
    assert ends[0].error is not None and "always" in ends[0].error["ErrorMessage"]
    op_end = rec.named("on_operation_end")
    assert [(o.name, o.status) for o in op_end] == [("fails", OpStatus.FAILED)]


async def test_handler_plugins_hear_their_handler_after_the_runtimes(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    order: list[str] = []
    runtime_wide, own = Recorder("runtime", order), Recorder("own", order)

    @durable_execution(name="own-plugins", plugins=[own])
    async def handler(event: Any, ctx: DurableContext) -> int:
        return int(await ctx.step(lambda: 1, name="one"))

    rt = await make_runtime(plugins=[runtime_wide])
    rt.register_execution(handler)
    rt.register_execution(journey)
    await rt.executions.start("own-plugins", None, execution_id="o1")
    tries.clear()
    await rt.executions.start("journey", None, execution_id="j2")
    await clock.advance(0)

    mine = {i.execution_id for i in own.named("on_invocation_start")}
    assert mine == {"o1"}  # not told of another handler's executions
    everyone = {i.execution_id for i in runtime_wide.named("on_invocation_start")}
    assert everyone == {"o1", "j2"}
    # For o1, each hook reaches the runtime's plugin first, then the handler's.
    o1 = [label for label, (_, info) in zip(order, _merged(runtime_wide, own), strict=True)
          if getattr(info, "execution_id", None) == "o1"]
    assert o1[:2] == ["runtime", "own"]


def _merged(a: Recorder, b: Recorder) -> list[tuple[str, Any]]:
    """Interleave two recorders' calls in the order they happened (each appended to the
    shared order as it heard)."""
    ia, ib = iter(a.heard), iter(b.heard)
    out = []
    assert a.order is not None
    for label in a.order:
        out.append(next(ia) if label == a.label else next(ib))
    return out


async def test_a_raising_plugin_leaves_the_history_as_it_would_be(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    """The same handler with and without a plugin that raises in every hook: the same
    history, event for event."""
    bad = Raises()
    faulty = durable_execution(name="journey-faulty", plugins=[bad])(journey.fn)
    rt = await make_runtime()
    rt.register_execution(journey)
    rt.register_execution(faulty)
    histories = []
    for name in ("journey", "journey-faulty"):
        tries.clear()
        await rt.executions.start(name, None, execution_id=name)
        await clock.advance(0)
        await clock.advance(5)
        await clock.advance(2)
        d = await rt.executions.describe(name)
        assert (d["status"], d["result"]) == ("succeeded", "aok")
        histories.append([(e["EventType"], e.get("Name")) for e in d["history"]])
    assert histories[0] == histories[1]
    assert bad.calls == 3 * 2 + 3 * 2 + 3 * 2  # invocations, operations, attempts
