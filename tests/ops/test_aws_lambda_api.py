"""`runtime.lambda_api`: the Lambda API's durable-execution calls in AWS's shapes, the
door its HTTP routes go through. Real SDK handlers, both backends."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from alarmtop.core.model.aws_errors import (
    CallbackTimeoutException,
    DurableExecutionAlreadyStartedException,
    InvalidParameterValueException,
    InvalidRequestContentException,
    ResourceConflictException,
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
    assert len(listed["DurableExecutions"]) == 1 and listed["NextMarker"]
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
    assert (await api.get_execution(arn))["Status"] == "PAUSED"
    with pytest.raises(ResourceConflictException, match="already paused"):
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


async def test_list_by_function_pages_by_key_with_every_filter(make_runtime: Any,
                                                                clock: Any) -> None:
    """Newest first (oldest with ReverseOrder), by status (PAUSED apart from RUNNING),
    start time, name and version, paged by marker; other functions' executions and
    native ones of the same name are not listed."""
    rt = await make_runtime()
    rt.register_lambda("fn", h.callback_then_step)
    rt.register_lambda("other", h.two_steps)
    api = rt.lambda_api
    arns = []
    for i in range(7):
        arns.append((await api.invoke("fn", "{}", execution_name=f"e{i}"))[
            "DurableExecutionArn"])
        await clock.advance(1)
    await api.invoke("other", '"x"', execution_name="o1")
    await api.stop(arns[1], {"ErrorMessage": "no"})
    await api.pause(arns[2])
    t0 = (await api.get_execution(arns[0]))["StartTimestamp"]

    async def every(**options: Any) -> list[str]:
        names, marker = [], None
        while True:
            page = await api.list_by_function("fn", marker=marker, max_items=2, **options)
            assert len(page["DurableExecutions"]) <= 2
            names += [e["DurableExecutionName"] for e in page["DurableExecutions"]]
            marker = page.get("NextMarker")
            if marker is None:
                return names

    assert await every() == [f"e{i}" for i in range(6, -1, -1)]
    assert await every(reverse_order=True) == [f"e{i}" for i in range(7)]
    assert await every(statuses=["STOPPED"]) == ["e1"]
    assert await every(statuses=["PAUSED"]) == ["e2"]
    assert await every(statuses=["RUNNING"]) == ["e6", "e5", "e4", "e3", "e0"]
    assert await every(statuses=["RUNNING", "STOPPED"]) == ["e6", "e5", "e4", "e3", "e1",
                                                             "e0"]
    assert await every(statuses=["DELETING"]) == []
    assert await every(started_after=t0 + 2, started_before=t0 + 4) == ["e4", "e3", "e2"]
    assert await every(execution_name="e5") == ["e5"]
    assert await every(qualifier="$LATEST") == [f"e{i}" for i in range(6, -1, -1)]
    listed = (await api.list_by_function("fn", max_items=1))["DurableExecutions"][0]
    assert (listed["DurableExecutionArn"], listed["Status"]) == (arns[6], "RUNNING")
    assert listed["FunctionArn"].endswith(":function:fn:$LATEST")
    for bad in ({"statuses": ["NOPE"]}, {"statuses": []}, {"marker": "x"},
                {"max_items": 1001}, {"started_after": "yesterday"}):
        with pytest.raises(InvalidParameterValueException):
            await api.list_by_function("fn", **bad)
    with pytest.raises(ResourceNotFoundException):
        await api.list_by_function("nobody")


async def test_delete_a_finished_execution_and_all_its_data(make_runtime: Any,
                                                            clock: Any) -> None:
    rt = await make_runtime()
    rt.register_lambda("fn", h.two_steps)
    api = rt.lambda_api
    arn = (await api.invoke("fn", '"x"', execution_name="d1"))["DurableExecutionArn"]
    await clock.advance(0)
    with pytest.raises(ResourceConflictException, match="RUNNING"):
        await api.delete(arn)  # not finished: nothing changes
    assert (await api.get_execution(arn))["Status"] == "RUNNING"
    await clock.advance(3)
    assert (await api.get_execution(arn))["Status"] == "SUCCEEDED"
    before = await rt.executions.counts()
    answer = await api.delete(arn)
    assert answer["DeletionRequestTimestamp"] > 0
    for read in (api.get_execution(arn), api.history(arn), api.delete(arn)):
        with pytest.raises(ResourceNotFoundException):
            await read
    assert await api.list_by_function("fn") == {"DurableExecutions": []}
    after = {**before, "succeeded": before["succeeded"] - 1}
    assert await rt.executions.counts() == {k: n for k, n in after.items() if n}
    await rt.backend.database.write([])  # the counters read back after a commit
    assert rt.backend.alarm_rows.counters() == await rt.backend.alarm_rows.recount()
    assert [e for e in await rt.backend.execution_log.timers() if e["execution_id"] == "d1"] \
        == []
    audit = await rt.backend.audit_rows.audit_list()
    assert [(r["action"], r["target"], r["ok"]) for r in audit][:1] == [("delete", "d1", True)]
    # The name is free again: a new execution under it starts from nothing.
    arn2 = (await api.invoke("fn", '"y"', execution_name="d1"))["DurableExecutionArn"]
    await clock.advance(3)
    got = await api.get_execution(arn2)
    assert (got["Status"], json.loads(got["Result"])) == ("SUCCEEDED", "b:a:y")


async def test_invoke_by_name_is_idempotent_and_refuses_another_payload(
        make_runtime: Any, clock: Any) -> None:
    rt = await make_runtime()
    rt.register_lambda("fn", h.two_steps)
    api = rt.lambda_api
    first = await api.invoke("fn", '"x"', execution_name="same")
    again = await api.invoke("fn", '"x"', execution_name="same")
    assert first == again
    with pytest.raises(DurableExecutionAlreadyStartedException):
        await api.invoke("fn", '"z"', execution_name="same")
    with pytest.raises(InvalidRequestContentException):
        await api.invoke("fn", "{not json", execution_name="bad")
    with pytest.raises(InvalidParameterValueException):
        await api.invoke("fn", "{}", invocation_type="Sync")
    assert await api.invoke("fn", "{}", invocation_type="DryRun") == {"StatusCode": 204}
    got = await api.get_execution(first["DurableExecutionArn"], include_execution_data=False)
    assert got["ExecutionDataIncluded"] is False and "InputPayload" not in got
    await clock.advance(3)
    assert len(await rt.executions.list()) == 1
