"""An operator completes or fails a waiting callback by hand, audited."""

from __future__ import annotations

from typing import Any

import pytest

from alarmtop.core import VirtualClock
from alarmtop.core.durable import (
    CallbackExternalError,
    DurableContext,
    ValidationError,
    durable_execution,
)
from alarmtop.core.model.execution_errors import (
    CallbackAlreadyCompleted,
    InvalidExecutionState,
    UnknownCallback,
)
from tests.conftest import RuntimeFactory


@durable_execution(name="ask")
async def ask(event: Any, ctx: DurableContext) -> str:
    cb = await ctx.create_callback("approval")
    try:
        return f"approved: {await cb.result()}"
    except CallbackExternalError as exc:
        return f"refused: {exc.error_type}: {exc.message}"


async def waiting(rt: Any, clock: VirtualClock, execution_id: str) -> str:
    rt.register_execution(ask)
    await rt.executions.start("ask", None, execution_id=execution_id)
    await clock.advance(1)
    return str((await rt.executions.describe(execution_id))["callbacks"][0]["callback_id"])


async def test_complete_and_fail_by_hand(make_runtime: RuntimeFactory,
                                         clock: VirtualClock) -> None:
    rt = await make_runtime()
    ok_id = await waiting(rt, clock, "c1")
    no_id = await waiting(rt, clock, "c2")
    await rt.executions.complete_callback(ok_id, "success", {"by": "ops"}, actor="ops@host",
                                          role="operator", reason="vendor confirmed by phone")
    await rt.executions.complete_callback(no_id, "failure", error_type="Rejected",
                                          message="fraud check", actor="ops@host")
    await clock.advance(1)
    assert (await rt.executions.describe("c1"))["result"] == "approved: {'by': 'ops'}"
    assert (await rt.executions.describe("c2"))["result"] == "refused: Rejected: fraud check"
    rows = await rt.audit.list()
    assert [(r["action"], r["target"], r["ok"]) for r in rows[:2]] == [
        ("complete_callback", "c2", True), ("complete_callback", "c1", True)]
    assert rows[1]["reason"] == "vendor confirmed by phone" and rows[1]["role"] == "operator"


async def test_bad_callbacks_by_hand_are_refused_and_audited(make_runtime: RuntimeFactory,
                                                             clock: VirtualClock) -> None:
    rt = await make_runtime()
    cb = await waiting(rt, clock, "c3")
    with pytest.raises(ValidationError, match="'success' or 'failure'"):
        await rt.executions.complete_callback(cb, "maybe")
    with pytest.raises(UnknownCallback):
        await rt.executions.complete_callback("cb1.nonsense")
    await rt.executions.complete_callback(cb, "success", "yes")
    with pytest.raises(CallbackAlreadyCompleted):
        await rt.executions.complete_callback(cb, "success", "again")
    oks = [r["ok"] for r in (await rt.audit.list())[:4]]
    assert oks == [False, True, False, False]
    await clock.advance(1)
    assert (await rt.executions.describe("c3"))["result"] == "approved: yes"


@durable_execution(name="undo")
async def undo(event: Any, ctx: DurableContext) -> str:
    saga = ctx.saga()
    await ctx.step(lambda: "held", name="hold")
    saga.push("hold", lambda: "released")
    await saga.compensate()
    return "undone"


async def test_a_human_decision_is_not_a_callback_to_complete(make_runtime: RuntimeFactory,
                                                              clock: VirtualClock) -> None:
    rt = await make_runtime()
    rt.register_execution(undo)
    rt.faults.inject("u1", "compensation_fail", None, step="compensate_hold")
    await rt.executions.start("undo", None, execution_id="u1")
    await clock.advance(10)
    d = await rt.executions.describe("u1")
    assert d["status"] == "needs_human"
    (human,) = [c for c in d["callbacks"] if c["kind"] == "HumanDecision"]
    with pytest.raises(InvalidExecutionState, match="retry_compensation, resolve or abort"):
        await rt.executions.complete_callback(human["callback_id"], "success", "ok")
    assert (await rt.executions.describe("u1"))["status"] == "needs_human"
