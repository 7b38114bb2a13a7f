"""alarmtop as the service side of the real AWS SDK: invocations, checkpoints, tokens.

Handlers written with `aws-durable-execution-sdk-python` (`aws_handlers`) run
through `rt.register_lambda`, on the VirtualClock, on both backends. A handler held
inside a step (its gate) keeps its invocation running while the test looks: the
clock's `advance` then runs as a task of its own (it returns once the runtime is
idle, which it is not while a handler runs), and the test waits for what it looks
for with a deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from alarmtop.core.model.aws_errors import AwsServiceError
from alarmtop.core.model.aws_state import AwsState, current_token
from tests.kernel.executions import aws_handlers as h

DEADLINE_S = 10.0


@pytest.fixture(autouse=True)
def fresh_handlers() -> None:
    """Gates and records are keyed by ARN, and tests reuse ids: start each one clean."""
    h.GATES.clear()
    h.RUNS.clear()
    h.SWITCHES.clear()


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Wait (bounded, in real time) for state a handler thread is bringing about."""
    loop = asyncio.get_running_loop()
    end = loop.time() + DEADLINE_S
    while not await check():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def kinds(history: list[dict[str, Any]]) -> list[str]:
    return [f"{ev['EventType']}:{ev.get('Name') or ''}".rstrip(":") for ev in history]


async def started(make_runtime: Any, fn: Any, name: str = "fn", event: Any = None,
                  eid: str = "e1", **options: Any) -> Any:
    rt = await make_runtime(**options)
    rt.register_lambda(name, fn)
    await rt.executions.start(name, event, execution_id=eid)
    return rt


async def test_steps_and_a_wait_run_through_the_sdk(make_runtime: Any, clock: Any) -> None:
    rt = await started(make_runtime, h.two_steps, event="x")
    await clock.advance(0)
    d = await rt.executions.describe("e1")
    assert d["status"] == "suspended" and d["kind"] == "aws"
    assert d["arn"].endswith(":function:fn:$LATEST/durable-execution/e1/" + d["arn"][-36:])
    board = await rt.timers()
    assert [(r["kind"], r["execution_id"]) for r in board["rows"]] == [
        ("wait", "e1"), ("execution_timeout", "e1")]  # a year: AWS's longest
    await clock.advance(2)
    d = await rt.executions.describe("e1")
    assert (d["status"], d["result"], d["invocations"]) == ("succeeded", "b:a:x", 2)
    assert kinds(d["history"]) == [
        "ExecutionStarted", "StepStarted:a", "StepSucceeded:a", "WaitStarted",
        "InvocationCompleted", "WaitSucceeded", "StepStarted:b", "StepSucceeded:b",
        "InvocationCompleted", "ExecutionSucceeded"]
    assert h.RUNS[d["arn"]] == ["a", "b"]  # the replay did not run `a` again
    page = await rt.execution_page()
    assert [r.id for r in page] == ["e1"]


async def test_checkpoints_land_while_the_handler_runs(make_runtime: Any, clock: Any) -> None:
    """The handler runs outside the object's turn: its checkpoints are events that
    commit while it still runs, and the invocation is one, not several."""
    rt = await started(make_runtime, h.held)
    arn = (await rt.executions.describe("e1"))["arn"]
    running = asyncio.ensure_future(clock.advance(0))

    async def b_is_running() -> bool:
        return "StepStarted:b" in kinds(await rt.executions.history("e1"))
    await until(b_is_running, "step b to start")
    d = await rt.executions.describe("e1")
    assert "StepSucceeded:a" in kinds(d["history"]) and d["status"] == "running"
    assert d["aws"]["in_invocation"] and d["invocations"] == 1
    h.GATES[arn].set()
    await running
    d = await rt.executions.describe("e1")
    assert (d["status"], d["invocations"]) == ("succeeded", 1)


async def test_a_callback_during_an_invocation_waits_for_it(make_runtime: Any,
                                                            clock: Any) -> None:
    """One invocation at a time: a completion while one runs does not start another."""
    rt = await started(make_runtime, h.held_with_callback)
    arn = (await rt.executions.describe("e1"))["arn"]
    running = asyncio.ensure_future(clock.advance(0))

    async def holding() -> bool:
        return "StepStarted:b" in kinds(await rt.executions.history("e1"))
    await until(holding, "step b to start")
    callback_id = (await rt.executions.describe("e1"))["callbacks"][0]["callback_id"]
    await rt.executions.send_callback_success(callback_id, "yes")  # raw: the SDK's default
    d = await rt.executions.describe("e1")
    assert d["invocations"] == 1 and d["aws"]["in_invocation"]
    h.GATES[arn].set()
    await running
    await clock.advance(1)
    d = await rt.executions.describe("e1")
    assert d["status"] == "succeeded" and d["result"] == "yes"
    assert kinds(d["history"]).count("InvocationCompleted") == d["invocations"]


async def test_tokens_rotate_and_a_repeated_call_is_answered_the_same(
        make_runtime: Any, clock: Any) -> None:
    rt = await started(make_runtime, h.held)
    arn = (await rt.executions.describe("e1"))["arn"]
    running = asyncio.ensure_future(clock.advance(0))

    async def holding() -> bool:
        return "StepStarted:b" in kinds(await rt.executions.history("e1"))
    await until(holding, "step b to start")
    rec = await rt.backend.execution_log.get("e1")
    token = current_token("e1", AwsState.from_dict(rec.aws))
    first = await rt.aws.checkpoint(arn, token, [], "client-1")
    again = await rt.aws.checkpoint(arn, token, [], "client-1")
    assert first == again and first["CheckpointToken"] != token
    with pytest.raises(AwsServiceError, match="Invalid checkpoint token"):
        await rt.aws.checkpoint(arn, token, [], None)  # used: each call rotates it
    state = await rt.aws.get_state(arn, first["CheckpointToken"])
    assert state["Operations"][0]["Type"] == "EXECUTION"
    # The handler's own token is spent now: its next checkpoint is refused, the SDK
    # ends the invocation, and the execution runs again from what is durable.
    h.GATES[arn].set()
    await running
    await clock.advance(5)
    d = await rt.executions.describe("e1")
    assert d["status"] == "succeeded" and d["invocations"] == 2, kinds(d["history"])
    errors = [ev["InvocationCompletedDetails"].get("Error") for ev in d["history"]
              if ev["EventType"] == "InvocationCompleted"]
    assert errors[0] is not None and errors[1] is None


async def test_pause_withholds_the_token_and_resume_runs_it_again(
        make_runtime: Any, clock: Any) -> None:
    rt = await started(make_runtime, h.held)
    arn = (await rt.executions.describe("e1"))["arn"]
    running = asyncio.ensure_future(clock.advance(0))

    async def holding() -> bool:
        return "StepStarted:b" in kinds(await rt.executions.history("e1"))
    await until(holding, "step b to start")
    await rt.executions.pause("e1", reason="look first")
    h.GATES[arn].set()
    await running
    await clock.advance(60)
    d = await rt.executions.describe("e1")
    assert d["paused"] and d["invocations"] == 1 and d["status"] == "suspended"
    assert "StepSucceeded:b" in kinds(d["history"])  # accepted, though the token was not
    await rt.executions.resume("e1")
    await clock.advance(0)
    d = await rt.executions.describe("e1")
    assert (d["status"], d["invocations"]) == ("succeeded", 2)
    assert h.RUNS[arn] == ["a", "b", "c"]


async def test_stop_ends_a_running_invocation(make_runtime: Any, clock: Any) -> None:
    rt = await started(make_runtime, h.held)
    arn = (await rt.executions.describe("e1"))["arn"]
    running = asyncio.ensure_future(clock.advance(0))

    async def holding() -> bool:
        return "StepStarted:b" in kinds(await rt.executions.history("e1"))
    await until(holding, "step b to start")
    await rt.executions.abort("e1", "wrong input")
    h.GATES[arn].set()
    await running
    d = await rt.executions.describe("e1")
    assert d["status"] == "aborted"
    assert kinds(d["history"])[-2:] == ["InvocationCompleted", "ExecutionStopped"]
    assert "c" not in h.RUNS[arn]
    audit = await rt.backend.audit_rows.audit_list()
    assert any(row["action"] == "abort" and row["target"] == "e1" for row in audit)


async def test_a_callback_times_out_on_the_runtime_clock(make_runtime: Any,
                                                         clock: Any) -> None:
    rt = await started(make_runtime, h.callback_then_step, event={"timeout": 30,
                                                                  "heartbeat": 10})
    await clock.advance(0)
    rows = (await rt.timers())["rows"]
    assert {r["kind"] for r in rows} == {"callback_timeout", "heartbeat", "execution_timeout"}
    callback_id = (await rt.executions.describe("e1"))["callbacks"][0]["callback_id"]
    await clock.advance(8)
    await rt.executions.send_callback_heartbeat(callback_id)
    await clock.advance(8)  # 16 s: alive, thanks to the heartbeat
    assert (await rt.executions.describe("e1"))["status"] == "suspended"
    await clock.advance(3)  # 19 s: 11 s since the heartbeat
    d = await rt.executions.describe("e1")
    timed_out = [ev for ev in d["history"] if ev["EventType"] == "CallbackTimedOut"]
    assert timed_out[0]["CallbackTimedOutDetails"]["Error"]["Payload"]["ErrorType"] == \
        "Callback.Heartbeat"
    assert d["status"] == "failed"


async def test_a_callback_answered_by_hand_is_audited(make_runtime: Any, clock: Any) -> None:
    rt = await started(make_runtime, h.callback_then_step, event={})
    await clock.advance(0)
    callback_id = (await rt.executions.describe("e1"))["callbacks"][0]["callback_id"]
    assert callback_id.rstrip("=").isalnum() or set(callback_id) <= set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
    await rt.executions.complete_callback(callback_id, "success", "ok", actor="ana",
                                          reason="checked by phone")
    await clock.advance(0)
    d = await rt.executions.describe("e1")
    assert (d["status"], d["result"]) == ("succeeded", "approved:ok")
    audit = await rt.backend.audit_rows.audit_list()
    assert any(r["action"] == "complete_callback" and r["actor"] == "ana" for r in audit)
