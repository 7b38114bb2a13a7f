"""invoke: one execution starts another and waits for its result."""

from __future__ import annotations

from typing import Any

from alarmtop.core import VirtualClock
from alarmtop.core.durable import DurableContext, Duration, durable_execution
from alarmtop.core.model.execution_errors import InvokeError
from tests.conftest import RuntimeFactory


@durable_execution(name="echo")
async def echo(event: Any, ctx: DurableContext) -> Any:
    await ctx.wait(Duration(2))
    if event == "fail":
        raise ValueError("child says no")
    return event


@durable_execution(name="caller")
async def caller(event: Any, ctx: DurableContext) -> Any:
    try:
        return await ctx.invoke("echo", event, name="call-echo")
    except InvokeError as exc:
        return f"caught {exc.error_type}: {exc.message}"


async def test_invoke_waits_for_the_child(make_runtime: RuntimeFactory,
                                          clock: VirtualClock) -> None:
    rt = await make_runtime()
    rt.register_execution(echo)
    rt.register_execution(caller)
    await rt.executions.start("caller", {"x": 1}, execution_id="p")
    await clock.advance(0)
    assert (await rt.executions.describe("p"))["status"] == "suspended"
    assert (await rt.executions.describe("p.1"))["status"] == "suspended"
    await clock.advance(2)
    d = await rt.executions.describe("p")
    assert (d["status"], d["result"]) == ("succeeded", {"x": 1})
    started = next(e for e in d["history"] if e["EventType"] == "ChainedInvokeStarted")
    assert started["ChainedInvokeStartedDetails"]["FunctionName"] == "echo"
    assert started["ChainedInvokeStartedDetails"]["DurableExecutionArn"] == "p.1"
    assert started["Name"] == "call-echo"
    types = [e["EventType"] for e in d["history"]]
    assert types.index("ChainedInvokeSucceeded") > types.index("InvocationCompleted")


async def test_invoke_failure_is_an_invoke_error(make_runtime: RuntimeFactory,
                                                 clock: VirtualClock) -> None:
    rt = await make_runtime()
    rt.register_execution(echo)
    rt.register_execution(caller)
    await rt.executions.start("caller", "fail", execution_id="q")
    await clock.advance(3)
    d = await rt.executions.describe("q")
    assert d["result"] == "caught ValueError: child says no"
