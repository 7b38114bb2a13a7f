"""Executions of the AWS SDK's handlers through the ops server, as the console sees
them: listed and described like native ones (with their ARN and AWS history), a
callback answered by an operator, a fault at the checkpoint boundary injected, all
over a real server and real clients."""

from __future__ import annotations

from typing import Any

import pytest

from alarmtop.core import VirtualClock
from tests.conftest import RuntimeFactory
from tests.environment import required
from tests.server.conftest import OPERATOR, VIEWER, ClientFactory, ServerFactory

try:
    from tests.kernel.executions import aws_handlers as h
except ImportError:  # pragma: no cover - the aws extra is missing
    if required():
        raise
    pytest.skip("the AWS SDK is not installed (pip install -e '.[aws]')",
                allow_module_level=True)


async def test_an_sdk_execution_through_the_ops_server(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory) -> None:
    rt = await make_runtime()
    rt.register_lambda("approvals", h.callback_then_step)
    await rt.executions.start("approvals", {}, execution_id="sdk-1")
    await clock.advance(0)
    url = (await serve(rt)).url
    viewer = await client(url, VIEWER)
    rows = (await viewer.ok("executions"))["rows"]
    assert [(r["execution_id"], r["name"], r["status"]) for r in rows] == [
        ("sdk-1", "approvals", "suspended")]
    detail: Any = await viewer.ok("execution", execution_id="sdk-1")
    assert detail["arn"].endswith("/durable-execution/sdk-1/" + detail["arn"][-36:])
    assert [ev["EventType"] for ev in detail["history"]][:3] == [
        "ExecutionStarted", "CallbackStarted", "InvocationCompleted"]
    callback_id = detail["callbacks"][0]["callback_id"]
    operator = await client(url, OPERATOR)
    await operator.ok("inject_fault", target="sdk-1", kind="checkpoint_revoke")
    await operator.ok("send_callback", callback_id=callback_id, payload="yes")
    await clock.advance(1)
    d = await rt.executions.describe("sdk-1")
    assert (d["status"], d["result"]) == ("succeeded", "approved:yes")
    assert d["invocations"] == 3  # the withheld token cost one more
    audit = (await operator.ok("audit", target="sdk-1"))["rows"]
    assert any(r["action"] == "send_callback" for r in audit)
