"""`runtime.lambda_api`: the Lambda API's durable-execution calls in AWS's shapes, the
door its HTTP routes go through. Real SDK handlers, both backends."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from alarmtop.core.model.aws_errors import (
    CallbackTimeoutException,
    InvalidParameterValueException,
    ResourceNotFoundException,
)
from tests.kernel.executions import aws_handlers as h


async def test_invoke_get_history_and_list(make_runtime: Any, clock: Any) -> None:
    rt = await make_runtime()
    rt.register_lambda("fn", h.two_steps)
    api = rt.lambda_api
    started = await api.invoke("fn", json.dumps("x"), execution_name="one")
    assert started["StatusCode"] == 202
    arn = started["DurableExecutionArn"]
    waiting = asyncio.ensure_future(api.invoke(
        "arn:aws:lambda:us-east-1:000000000000:function:fn:$LATEST", '"y"',
        execution_name="two", invocation_type="RequestResponse"))
    await clock.advance(3)
    answer = await waiting
    assert (answer["StatusCode"], json.loads(answer["Payload"])) == (200, "b:a:y")
    got = await api.get_execution(arn)
    assert (got["Status"], json.loads(got["Result"]), got["DurableExecutionName"]) == (
        "SUCCEEDED", "b:a:x", "one")
    first = await api.history(arn, max_items=4)
    assert len(first["Events"]) == 4 and first["NextMarker"] == "4"
    rest = await api.history(arn, include_execution_data=False, marker=first["NextMarker"])
    assert [ev["EventId"] for ev in rest["Events"]] == list(range(5, 11))
    assert rest["Events"][-1]["ExecutionSucceededDetails"]["Result"] == {"Truncated": True}
    listed = await api.list_by_function("fn", statuses=["SUCCEEDED"], max_items=1)
    assert len(listed["DurableExecutions"]) == 1 and listed["NextMarker"] == "1"
    rest_listed = await api.list_by_function("fn", marker=listed["NextMarker"])
    assert {e["DurableExecutionName"] for e in listed["DurableExecutions"] +
            rest_listed["DurableExecutions"]} == {"one", "two"}


async def test_stop_pause_resume_and_refusals(make_runtime: Any, clock: Any) -> None:
    rt = await make_runtime()
    rt.register_lambda("fn", h.callback_then_step)
    api = rt.lambda_api
    arn = (await api.invoke("fn", json.dumps({"timeout": 5}), execution_name="c1"))[
        "DurableExecutionArn"]
    await clock.advance(0)
    await api.pause(arn)
    with pytest.raises(InvalidParameterValueException, match="already paused"):
        await api.pause(arn)
    await api.resume(arn)
    await clock.advance(10)
    d = await rt.executions.describe("c1")
    callback_id = d["callbacks"][0]["callback_id"]
    with pytest.raises(CallbackTimeoutException):
        await api.callback_success(callback_id, b'"late"')
    with pytest.raises(ResourceNotFoundException):
        await api.callback_heartbeat("AAAA")
    with pytest.raises(ResourceNotFoundException):
        await api.get_execution(arn.replace("/c1/", "/c2/"))
    with pytest.raises(InvalidParameterValueException):
        await api.get_execution("arn:aws:nonsense")
    arn2 = (await api.invoke("fn", "{}", execution_name="c3"))["DurableExecutionArn"]
    await clock.advance(0)
    callback_id = (await rt.executions.describe("c3"))["callbacks"][0]["callback_id"]
    await api.callback_failure(callback_id, {"ErrorType": "No", "ErrorMessage": "rejected"})
    with pytest.raises(InvalidParameterValueException, match="already"):
        await api.callback_success(callback_id)
    await clock.advance(0)
    assert (await api.get_execution(arn2))["Status"] == "FAILED"
    arn4 = (await api.invoke("fn", "{}", execution_name="c4"))["DurableExecutionArn"]
    await clock.advance(0)
    await api.stop(arn4, {"ErrorMessage": "not needed"})
    assert (await api.get_execution(arn4))["Status"] == "STOPPED"
    audit = await rt.backend.audit_rows.audit_list()
    assert {r["action"] for r in audit if r["actor"] == "lambda-api"} >= {
        "pause", "resume", "abort"}
