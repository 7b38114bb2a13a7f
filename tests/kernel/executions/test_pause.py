"""Pause and resume: nothing runs while paused; what fell due runs on resume."""

from __future__ import annotations

from typing import Any

import pytest

from alarmtop.core import VirtualClock
from alarmtop.core.durable import (
    CallbackConfig,
    CallbackTimeoutError,
    DurableContext,
    Duration,
    durable_execution,
)
from alarmtop.core.model.execution_errors import InvalidExecutionState
from tests.conftest import RuntimeFactory

runs: list[str] = []


@durable_execution(name="nap")
async def nap(event: Any, ctx: DurableContext) -> str:
    await ctx.step(lambda: runs.append("before"), name="before")
    await ctx.wait(Duration(10))
    await ctx.step(lambda: runs.append("after"), name="after")
    return "done"


@durable_execution(name="hold")
async def hold(event: Any, ctx: DurableContext) -> str:
    cb = await ctx.create_callback("answer", CallbackConfig(timeout=Duration(30)))
    try:
        return str(await cb.result())
    except CallbackTimeoutError:
        runs.append("timed out")
        return "no answer"


def types(d: dict[str, Any]) -> list[str]:
    return [e["EventType"] for e in d["history"]]


async def test_pause_across_a_due_wait(make_runtime: RuntimeFactory,
                                       clock: VirtualClock) -> None:
    """The wait falls due while paused: nothing runs; on resume it completes, once."""
    runs.clear()
    rt = await make_runtime()
    rt.register_execution(nap)
    await rt.executions.start("nap", None, execution_id="p1")
    await clock.advance(1)
    out = await rt.executions.pause("p1", reason="vendor outage", actor="ops@host")
    assert out == {"execution_id": "p1", "status": "suspended", "paused": True}
    await clock.advance(60)  # the wait was due at +10 s
    d = await rt.executions.describe("p1")
    assert (d["status"], d["paused"], d["paused_reason"]) == ("suspended", True,
                                                              "vendor outage")
    assert runs == ["before"] and "WaitSucceeded" not in types(d)
    assert await rt.alarm("Execution", "p1") is None  # paused: no alarm fires
    await rt.executions.resume("p1", actor="ops@host")
    await clock.advance(0)
    d = await rt.executions.describe("p1")
    assert (d["status"], d["result"], d["paused"]) == ("succeeded", "done", False)
    assert runs == ["before", "after"]
    assert types(d).count("WaitSucceeded") == 1
    audit = [(a["action"], a["target"], a["ok"], a["reason"]) for a in await rt.audit.list()]
    assert audit[:2] == [("resume", "p1", True, None), ("pause", "p1", True, "vendor outage")]


async def test_a_callback_timeout_due_while_paused_fires_on_resume(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    runs.clear()
    rt = await make_runtime()
    rt.register_execution(hold)
    await rt.executions.start("hold", None, execution_id="p2")
    await clock.advance(1)
    await rt.executions.pause("p2")
    await clock.advance(120)
    d = await rt.executions.describe("p2")
    assert "CallbackTimedOut" not in types(d) and runs == []
    timers = await rt.executions.timers(execution_id="p2")
    assert [(t["kind"], t["paused"]) for t in timers] == [("callback_timeout", True)]
    await rt.executions.resume("p2")
    await clock.advance(0)
    d = await rt.executions.describe("p2")
    assert (d["status"], d["result"], runs) == ("succeeded", "no answer", ["timed out"])
    assert types(d).count("CallbackTimedOut") == 1
    assert await rt.executions.timers(execution_id="p2") == []


async def test_a_callback_sent_while_paused_is_kept_and_acted_on_at_resume(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    rt = await make_runtime()
    rt.register_execution(hold)
    await rt.executions.start("hold", None, execution_id="p3")
    await clock.advance(1)
    await rt.executions.pause("p3")
    cb = (await rt.executions.describe("p3"))["callbacks"][0]["callback_id"]
    await rt.executions.send_callback_success(cb, "yes")
    await clock.advance(5)
    assert (await rt.executions.describe("p3"))["status"] == "suspended"
    await rt.executions.resume("p3")
    await clock.advance(0)
    assert (await rt.executions.describe("p3"))["result"] == "yes"


async def test_bad_pauses_are_refused_audited_and_change_nothing(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    rt = await make_runtime()
    rt.register_execution(nap)
    await rt.executions.start("nap", None, execution_id="p4")
    await clock.advance(1)
    with pytest.raises(InvalidExecutionState, match="not paused"):
        await rt.executions.resume("p4")
    await rt.executions.pause("p4")
    with pytest.raises(InvalidExecutionState, match="already paused"):
        await rt.executions.pause("p4")
    rows = await rt.audit.list()
    assert [(r["action"], r["ok"]) for r in rows[:3]] == [("pause", False), ("pause", True),
                                                           ("resume", False)]
    assert (await rt.executions.describe("p4"))["paused"] is True
