"""The execution commands: handlers applied to a real runtime through the ops service,
frames decoded by the wire, audited by the runtime itself."""

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
from alarmtop.server import execution_commands, wire
from alarmtop.server.commands import COMMANDS
from alarmtop.server.ops import OpsService, Session
from alarmtop.server.protocol import Audit
from tests.conftest import RuntimeFactory
from tests.server.conftest import OPERATOR, VIEWER, ClientFactory, ServerFactory

down = {"on": True}
SAGA_ACTIONS = {"retry_compensation", "resolve", "abort", "hand_to_human"}
TOOLS = {"pause", "resume", "redrive", "fork", "complete_callback"}


async def run(ops: OpsService, op: str, who: Session, **fields: Any) -> Any:
    """`op` as a client would send it, run by the ops service."""
    return await ops.run(wire.command(op, 1, **fields), who)


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
    specs = {spec.op: spec for spec in execution_commands.SPECS}
    assert all(COMMANDS[op] is spec for op, spec in specs.items())
    audited_by = {rule: {op for op, spec in specs.items() if spec.audit is rule}
                  for rule in Audit}
    assert audited_by == {Audit.RUNTIME: SAGA_ACTIONS | TOOLS,
                          Audit.SERVER: {"send_callback"},
                          Audit.QUERY: {"replay_check", "execution_timers"}}
    assert audited_by[Audit.RUNTIME] <= wire.OPERATOR_OPS
    assert not audited_by[Audit.QUERY] & wire.OPERATOR_OPS
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
    ops = OpsService(rt)
    who = Session("operator", "10.0.0.7:5511")
    await rt.executions.start("pay", None, execution_id="x1")
    await clock.advance(1)
    assert (await run(ops, "pause", who, execution_id="x1", reason="audit"))["paused"]
    timers = await run(ops, "execution_timers", who, execution_id="x1")
    assert timers == {"rows": [], "next": None}  # a callback with no deadline
    await run(ops, "resume", who, execution_id="x1")
    cb = (await rt.executions.describe("x1"))["callbacks"][0]["callback_id"]
    await run(ops, "complete_callback", who, callback_id=cb, payload="go")
    await clock.advance(1)
    assert (await rt.executions.describe("x1"))["status"] == "failed"
    check = await run(ops, "replay_check", who, execution_id="x1")
    assert check["summary"] == "replays cleanly"
    down["on"] = False
    forked = await run(ops, "fork", who, execution_id="x1", from_step="charge",
                       new_execution_id="x1-b")
    out = await run(ops, "redrive", who, execution_id="x1", reason="back up")
    assert out["from_operation"] == "3"
    await clock.advance(1)
    assert (await rt.executions.describe("x1"))["result"] == "charged"
    assert (await rt.executions.describe(forked["execution_id"]))["result"] == "charged"
    rows = await rt.audit.list()
    assert [r["action"] for r in rows] == ["redrive", "fork", "complete_callback",
                                           "resume", "pause"]  # one row each, the runtime's
    assert {(r["actor"], r["role"]) for r in rows} == {(who.address, who.role)}
    await ops.close()


async def test_a_refused_op_is_audited_once_and_raises(make_runtime: RuntimeFactory,
                                                       clock: VirtualClock) -> None:
    rt = await make_runtime()
    rt.register_execution(pay)
    await rt.executions.start("pay", None, execution_id="x2")
    await clock.advance(1)
    ops = OpsService(rt)
    with pytest.raises(InvalidExecutionState, match="suspended; only a failed"):
        await run(ops, "redrive", Session("operator", "c"), execution_id="x2")
    rows = await rt.audit.list()
    assert len(rows) == 1 and (rows[0]["action"], rows[0]["ok"]) == ("redrive", False)
    with pytest.raises(wire.ProtocolError, match="unknown op 'nope'"):
        await run(ops, "nope", Session("operator", "c"))
    await ops.close()


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
