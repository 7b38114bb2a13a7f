"""Bad input to executions: a clear error, and nothing changes."""

from __future__ import annotations

from typing import Any

import pytest

from alarmtop.core import VirtualClock
from alarmtop.core.durable import DurableContext, durable_execution
from alarmtop.core.model.errors import InvalidArgument, NotSerializable
from alarmtop.core.model.execution_errors import (
    CallbackAlreadyCompleted,
    InvalidExecutionState,
    UnknownCallback,
    UnknownExecution,
    ValidationError,
)
from tests.conftest import RuntimeFactory


@durable_execution(name="waits-for-callback")
async def waits(event: Any, ctx: DurableContext) -> Any:
    cb = await ctx.create_callback("answer")
    return await cb.result()


@durable_execution(name="bad-result")
async def bad_result(event: Any, ctx: DurableContext) -> Any:
    return await ctx.step(lambda: {1, 2, 3}, name="returns_a_set")


async def test_unknown_handler_name(make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime()
    rt.register_execution(waits)
    with pytest.raises(UnknownExecution, match="register_execution"):
        await rt.executions.start("no-such-handler", {})
    assert await rt.executions.list() == []


async def test_unknown_execution_id(make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime()
    rt.register_execution(waits)
    with pytest.raises(UnknownExecution):
        await rt.executions.describe("nope")
    with pytest.raises(UnknownExecution):
        await rt.executions.retry_compensation("nope")
    with pytest.raises(ValidationError, match="printable"):
        await rt.executions.describe("has space")


async def test_non_serialisable_input(make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime()
    rt.register_execution(waits)
    with pytest.raises(NotSerializable, match="input"):
        await rt.executions.start("waits-for-callback", {"when": object()})
    assert await rt.executions.list() == []


async def test_callback_ids_unknown_or_completed(make_runtime: RuntimeFactory,
                                                 clock: VirtualClock) -> None:
    rt = await make_runtime()
    rt.register_execution(waits)
    await rt.executions.start("waits-for-callback", None, execution_id="w1")
    await clock.advance(0)
    with pytest.raises(UnknownCallback, match="callback_id"):
        await rt.executions.send_callback_success("made-up", "x")
    with pytest.raises(UnknownCallback):
        await rt.executions.send_callback_success("cb1.WyJ3MSIsIjk5Il0", "x")  # w1, op 99
    (cb,) = (await rt.executions.describe("w1"))["callbacks"]
    await rt.executions.send_callback_success(cb["callback_id"], {"answer": 42})
    await clock.advance(0)
    with pytest.raises(CallbackAlreadyCompleted, match="already"):
        await rt.executions.send_callback_failure(cb["callback_id"], "X", "late")
    d = await rt.executions.describe("w1")
    assert (d["status"], d["result"]) == ("succeeded", {"answer": 42})


async def test_non_serialisable_step_result_fails_the_step(make_runtime: RuntimeFactory,
                                                           clock: VirtualClock) -> None:
    rt = await make_runtime()
    rt.register_execution(bad_result)
    await rt.executions.start("bad-result", None, execution_id="b1")
    await clock.advance(0)
    d = await rt.executions.describe("b1")
    assert d["status"] == "failed"
    assert "not serialisable" in d["error"]["ErrorMessage"]
    failed = [e for e in d["history"] if e["EventType"] == "StepFailed"]
    assert len(failed) == 1  # not retried: retrying cannot fix it


async def test_operator_actions_that_do_not_apply(make_runtime: RuntimeFactory,
                                                  clock: VirtualClock) -> None:
    rt = await make_runtime()
    rt.register_execution(waits)
    await rt.executions.start("waits-for-callback", None, execution_id="w2")
    await clock.advance(0)
    with pytest.raises(InvalidExecutionState, match="not waiting for a human"):
        await rt.executions.retry_compensation("w2")
    with pytest.raises(InvalidArgument, match="note"):
        await rt.executions.resolve("w2", note="")
    audit = await rt.audit.list()  # refused actions are audited too, newest first
    assert [(a["action"], a["ok"]) for a in audit] == [("resolve", False),
                                                        ("retry_compensation", False)]
    assert (await rt.executions.describe("w2"))["status"] == "suspended"


async def test_hand_to_human_holds_until_resolved(make_runtime: RuntimeFactory,
                                                  clock: VirtualClock) -> None:
    rt = await make_runtime()
    rt.register_execution(waits)
    await rt.executions.start("waits-for-callback", None, execution_id="w3")
    await clock.advance(0)
    await rt.executions.hand_to_human("w3", reason="customer called", actor="dana")
    (cb,) = (await rt.executions.describe("w3"))["callbacks"]
    await rt.executions.send_callback_success(cb["callback_id"], "done")
    await clock.advance(5)
    d = await rt.executions.describe("w3")
    assert (d["status"], d["human_hold"]) == ("needs_human", "customer called")
    await rt.executions.resolve("w3", note="checked with the customer", actor="dana")
    await clock.advance(0)
    assert (await rt.executions.describe("w3"))["result"] == "done"
