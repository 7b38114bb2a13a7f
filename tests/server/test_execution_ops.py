"""The execution-tool ops: handlers applied to a real runtime, frames decoded by the wire."""

from __future__ import annotations

import json
from typing import Any

import pytest

from alarmtop.core import VirtualClock
from alarmtop.core.durable import (
    DurableContext,
    RetryPresets,
    StepConfig,
    durable_execution,
)
from alarmtop.core.model.execution_errors import InvalidExecutionState
from alarmtop.server import wire
from alarmtop.server.execution_ops import (
    RUNTIME_AUDITED,
    TOOL_QUERIES,
    ExecutionTools,
    tool_ops,
)
from tests.conftest import RuntimeFactory
from tests.server.conftest import OPERATOR, VIEWER, ClientFactory, ServerFactory

down = {"on": True}


def charge() -> str:
    if down["on"]:
        raise ConnectionError("processor down")
    return "charged"


@durable_execution(name="pay")
async def pay(event: Any, ctx: DurableContext) -> str:
    await ctx.step(lambda: "ok", name="check")
    cb = await ctx.create_callback("confirm")
    await cb.result()
    return str(await ctx.step(charge, name="charge",
                              config=StepConfig(retry_strategy=RetryPresets.none())))


def test_the_ops_are_in_the_wire_table() -> None:
    spec = tool_ops(wire.Field)
    assert RUNTIME_AUDITED == {op for op, (operator, _) in spec.items() if operator}
    assert TOOL_QUERIES == {op for op, (operator, _) in spec.items() if not operator}
    assert all(wire.OPS[op] == spec[op] for op in spec)
    assert RUNTIME_AUDITED <= wire.OPERATOR_OPS and not TOOL_QUERIES & wire.OPERATOR_OPS
    cmd = wire.decode(json.dumps({"op": "redrive", "id": 3, "execution_id": "e1",
                                  "force": True}))
    assert isinstance(cmd, wire.Command) and cmd.args == {"execution_id": "e1", "force": True}
    with pytest.raises(wire.ProtocolError, match="force"):
        wire.decode(json.dumps({"op": "redrive", "id": 4, "execution_id": "e1",
                                "force": "yes"}))
    with pytest.raises(wire.ProtocolError, match="from_step"):
        wire.decode(json.dumps({"op": "fork", "id": 5, "execution_id": "e1"}))


async def test_each_op_on_a_real_runtime(make_runtime: RuntimeFactory,
                                         clock: VirtualClock) -> None:
    down["on"] = True
    rt = await make_runtime()
    rt.register_execution(pay)
    tools = ExecutionTools(rt)
    who = ("10.0.0.7:5511", "operator")
    await rt.executions.start("pay", None, execution_id="x1")
    await clock.advance(1)
    assert (await tools.run("pause", {"execution_id": "x1", "reason": "audit"}, *who))[
        "paused"]
    timers = await tools.run("execution_timers", {"execution_id": "x1"}, *who)
    assert timers == {"rows": [], "next": None}  # a callback with no deadline
    await tools.run("resume", {"execution_id": "x1"}, *who)
    cb = (await rt.executions.describe("x1"))["callbacks"][0]["callback_id"]
    await tools.run("complete_callback", {"callback_id": cb, "payload": "go"}, *who)
    await clock.advance(1)
    assert (await rt.executions.describe("x1"))["status"] == "failed"
    check = await tools.run("replay_check", {"execution_id": "x1"}, *who)
    assert check["summary"] == "replays cleanly"
    down["on"] = False
    forked = await tools.run("fork", {"execution_id": "x1", "from_step": "charge",
                                      "new_execution_id": "x1-b"}, *who)
    out = await tools.run("redrive", {"execution_id": "x1", "reason": "back up"}, *who)
    assert out["from_operation"] == "3"
    await clock.advance(1)
    assert (await rt.executions.describe("x1"))["result"] == "charged"
    assert (await rt.executions.describe(forked["execution_id"]))["result"] == "charged"
    rows = await rt.audit.list()
    assert [r["action"] for r in rows[:5]] == ["redrive", "fork", "complete_callback",
                                               "resume", "pause"]
    assert {(r["actor"], r["role"]) for r in rows[:5]} == {who}


async def test_a_refused_op_is_audited_once_and_raises(make_runtime: RuntimeFactory,
                                                       clock: VirtualClock) -> None:
    rt = await make_runtime()
    rt.register_execution(pay)
    await rt.executions.start("pay", None, execution_id="x2")
    await clock.advance(1)
    with pytest.raises(InvalidExecutionState, match="suspended; only a failed"):
        await ExecutionTools(rt).run("redrive", {"execution_id": "x2"}, "c", "operator")
    rows = await rt.audit.list()
    assert len(rows) == 1 and (rows[0]["action"], rows[0]["ok"]) == ("redrive", False)
    with pytest.raises(wire.ProtocolError, match="unknown execution tool op"):
        await ExecutionTools(rt).run("nope", {}, "c", "operator")


async def test_over_a_real_socket_viewers_query_and_operators_act_audited_once(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory) -> None:
    rt = await make_runtime()
    rt.register_execution(pay)
    await rt.executions.start("pay", None, execution_id="w1")
    await clock.advance(1)
    server = await serve(rt)
    viewer = await client(server.url, VIEWER)
    timers = await viewer.ok("execution_timers", execution_id="w1")
    assert timers == {"rows": [], "next": None}
    assert (await viewer.ok("replay_check", execution_id="w1"))["summary"] == \
        "replays cleanly"
    refused = await viewer.request("pause", execution_id="w1")
    assert refused["ok"] is False and "operator role" in refused["error"]
    operator = await client(server.url, OPERATOR)
    assert (await operator.ok("pause", execution_id="w1", reason="look first"))["paused"]
    bad = await operator.request("fork", execution_id="w1")
    assert bad["ok"] is False and "from_step" in bad["error"]
    await operator.ok("resume", execution_id="w1")
    rows = await rt.audit.list()
    assert [(r["action"], r["ok"]) for r in rows] == [
        ("resume", True), ("fork", False), ("pause", True), ("pause", False)]
    assert rows[2]["reason"] == "look first" and rows[3]["role"] == "viewer"
