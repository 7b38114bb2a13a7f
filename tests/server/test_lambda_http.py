"""`alarmtop serve --lambda-api`: every route of the Lambda API, called with boto3's own
Lambda client against a real serve process, on SQLite and on PostgreSQL; AWS's error
shapes for bad input; SigV4 refusals that change nothing and are logged once.

Hand-written HTTP appears only where boto3 cannot make the request (a stale date,
malformed HTTP): `test_lambda_http_wire.py`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests import pg
from tests.conftest import RESET_SQL
from tests.server.lambda_serve import SECRET, LambdaServe, start, stop, until

pytest.importorskip("aws_durable_execution_sdk_python")


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def served(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[LambdaServe]:
    dsn = None
    if request.param == "postgres":
        cluster: pg.Cluster = request.getfixturevalue("pg_cluster")
        cluster.run(str(cluster.bin / "psql"), "-h", "127.0.0.1", "-p", str(cluster.port),
                    "-U", "postgres", "-q", "-v", "ON_ERROR_STOP=1", "-c", RESET_SQL)
        dsn = cluster.dsn
    server = start(tmp_path_factory.mktemp(f"lambda-{request.param}"), dsn=dsn)
    yield server
    assert stop(server) == 0, server.text()
    # (The SDK logs the tracebacks of handlers that fail, as Lambda would: not ours.)
    for sign in ("Task exception was never retrieved", "Exception in callback",
                 "could not answer"):
        assert sign not in server.text(), server.text()


def code(exc: ClientError) -> tuple[str, int]:
    return exc.response["Error"]["Code"], exc.response["ResponseMetadata"]["HTTPStatusCode"]


def refused(call: Any, **args: Any) -> tuple[str, int, str]:
    with pytest.raises(ClientError) as info:
        call(**args)
    return (*code(info.value), info.value.response["Error"]["Message"])


def history(client: Any, arn: str, **args: Any) -> list[dict[str, Any]]:
    """Every event, page by page as the API gives them."""
    events: list[dict[str, Any]] = []
    marker = None
    while True:
        page = client.get_durable_execution_history(
            DurableExecutionArn=arn, **args, **({"Marker": marker} if marker else {}))
        events += page["Events"]
        marker = page.get("NextMarker")
        if not marker:
            return events


def callback_id(client: Any, arn: str) -> str:
    def started() -> str | None:
        for ev in history(client, arn):
            if ev["EventType"] == "CallbackStarted":
                return str(ev["CallbackStartedDetails"]["CallbackId"])
        return None
    return until(started, "the callback to start")


def ended(client: Any, arn: str) -> dict[str, Any]:
    return until(lambda: (lambda got: got if got["Status"] != "RUNNING" else None)(
        client.get_durable_execution(DurableExecutionArn=arn)), "the execution's end")


def test_invoke_both_ways_get_and_history(served: LambdaServe) -> None:
    c = served.client()
    out = c.invoke(FunctionName="steps", Payload=json.dumps({"n": 3}).encode(),
                   DurableExecutionName="rr-1")
    assert out["StatusCode"] == 200 and "FunctionError" not in out
    assert json.loads(out["Payload"].read()) == [0, 1, 2]
    assert out["ExecutedVersion"] == "$LATEST"
    arn = out["DurableExecutionArn"]
    assert arn.startswith("arn:aws:lambda:us-east-1:") and "/durable-execution/rr-1/" in arn
    again = c.invoke(FunctionName="steps", Payload=json.dumps({"n": 3}).encode(),
                     DurableExecutionName="rr-1")
    assert again["DurableExecutionArn"] == arn  # the same name and payload: the same one
    event = c.invoke(FunctionName="arn:aws:lambda:us-east-1:000000000000:function:steps",
                     InvocationType="Event", Payload=b'{"n": 2}', DurableExecutionName="ev-1")
    assert event["StatusCode"] == 202 and event["Payload"].read() == b""
    got = ended(c, event["DurableExecutionArn"])
    assert (got["Status"], json.loads(got["Result"]), got["DurableExecutionName"]) == (
        "SUCCEEDED", [0, 1], "ev-1")
    assert got["FunctionArn"].endswith(":function:steps:$LATEST")
    assert got["EndTimestamp"] >= got["StartTimestamp"]
    assert json.loads(got["InputPayload"]) == {"n": 2}
    lean = c.get_durable_execution(DurableExecutionArn=arn, IncludeExecutionData=False)
    assert lean["ExecutionDataIncluded"] is False and "Result" not in lean
    assert c.invoke(FunctionName="steps", InvocationType="DryRun")["StatusCode"] == 204

    events = history(c, arn, MaxItems=2)
    assert [e["EventId"] for e in events] == list(range(1, len(events) + 1))
    kinds = [e["EventType"] for e in events]
    assert kinds[0] == "ExecutionStarted" and kinds[-1] == "ExecutionSucceeded"
    assert kinds.count("StepSucceeded") == 3
    newest = history(c, arn, MaxItems=3, ReverseOrder=True)
    assert newest == events[::-1]
    bare = history(c, arn, IncludeExecutionData=False)
    assert bare[-1]["ExecutionSucceededDetails"]["Result"] == {"Truncated": True}
    assert events[-1]["ExecutionSucceededDetails"]["Result"]["Payload"] == "[0, 1, 2]"


def test_invoke_refusals_in_aws_shapes(served: LambdaServe) -> None:
    c = served.client()
    assert refused(c.invoke, FunctionName="nobody", Payload=b"{}")[:2] == (
        "ResourceNotFoundException", 404)
    assert refused(c.invoke, FunctionName="steps", Payload=b"{not json")[:2] == (
        "InvalidRequestContentException", 400)
    c.invoke(FunctionName="steps", InvocationType="Event", Payload=b'{"n": 1}',
             DurableExecutionName="taken")
    assert refused(c.invoke, FunctionName="steps", InvocationType="Event",
                   Payload=b'{"n": 2}', DurableExecutionName="taken")[:2] == (
        "DurableExecutionAlreadyStartedException", 409)
    assert refused(c.invoke, FunctionName="steps:7", Payload=b"{}")[:2] == (
        "ResourceNotFoundException", 404)
    arn = "arn:aws:lambda:us-east-1:000000000000:function:steps:$LATEST/durable-execution/x/y"
    for call, args in [(c.get_durable_execution, {}), (c.get_durable_execution_history, {}),
                       (c.stop_durable_execution, {}), (c.pause_durable_execution, {}),
                       (c.resume_durable_execution, {}), (c.delete_durable_execution, {})]:
        assert refused(call, DurableExecutionArn=arn, **args)[:2] == (
            "ResourceNotFoundException", 404), call
    taken = arn.replace("/x/", "/taken/")
    assert refused(c.get_durable_execution_history, DurableExecutionArn=taken,
                   Marker="not-a-marker")[:2] == ("InvalidParameterValueException", 400)
    # A stale or made-up token: the SDK re-runs the invocation on this message.
    kind, status, message = refused(c.checkpoint_durable_execution, DurableExecutionArn=taken,
                                    CheckpointToken="AAAA", Updates=[])
    assert (kind, status) == ("InvalidParameterValueException", 400)
    assert message.startswith("Invalid checkpoint token"), message
    assert refused(c.get_durable_execution_state, DurableExecutionArn=taken,
                   CheckpointToken="AAAA", Marker="", MaxItems=10)[:2] == (
        "InvalidParameterValueException", 400)
    for bad in ("nope", "AAAA", "Zm9vYmFy"):
        for call in (c.send_durable_execution_callback_success,
                     c.send_durable_execution_callback_heartbeat):
            assert refused(call, CallbackId=bad)[:2] == ("ResourceNotFoundException", 404)


def test_list_by_function_filters_and_pages(served: LambdaServe) -> None:
    c = served.client()
    arns = []
    for i in range(5):
        arns.append(c.invoke(FunctionName="cb", InvocationType="Event", Payload=b"{}",
                             DurableExecutionName=f"list-{i}")["DurableExecutionArn"])
    for arn in arns:
        callback_id(c, arn)
    c.stop_durable_execution(DurableExecutionArn=arns[1], Error={"ErrorMessage": "not needed"})
    c.pause_durable_execution(DurableExecutionArn=arns[2], Reason="looking")

    def listed(**args: Any) -> list[str]:
        names, marker = [], None
        while True:
            page = c.list_durable_executions_by_function(
                FunctionName="cb", MaxItems=2, **args, **({"Marker": marker} if marker else {}))
            assert len(page["DurableExecutions"]) <= 2
            names += [e["DurableExecutionName"] for e in page["DurableExecutions"]
                      if e["DurableExecutionName"].startswith("list-")]
            marker = page.get("NextMarker")
            if not marker:
                return names

    assert listed() == [f"list-{i}" for i in range(4, -1, -1)]
    assert listed(ReverseOrder=True) == [f"list-{i}" for i in range(5)]
    assert listed(Statuses=["STOPPED"]) == ["list-1"]
    assert listed(Statuses=["PAUSED"]) == ["list-2"]
    assert listed(Statuses=["RUNNING", "PAUSED"]) == ["list-4", "list-3", "list-2", "list-0"]
    first = c.get_durable_execution(DurableExecutionArn=arns[0])["StartTimestamp"]
    third = c.get_durable_execution(DurableExecutionArn=arns[2])["StartTimestamp"]
    assert listed(StartedAfter=first, StartedBefore=third) == ["list-2", "list-1", "list-0"]
    assert listed(StartedAfter=datetime.now(UTC) + timedelta(days=1)) == []
    assert listed(DurableExecutionName="list-3") == ["list-3"]
    row = c.list_durable_executions_by_function(FunctionName="cb",
                                                DurableExecutionName="list-2")
    assert [(e["DurableExecutionArn"], e["Status"]) for e in row["DurableExecutions"]] == [
        (arns[2], "PAUSED")]
    assert refused(c.list_durable_executions_by_function, FunctionName="nobody")[:2] == (
        "ResourceNotFoundException", 404)
    assert refused(c.list_durable_executions_by_function, FunctionName="cb",
                   Marker="junk")[:2] == ("InvalidParameterValueException", 400)
    for arn in arns:
        if arn != arns[1]:
            c.stop_durable_execution(DurableExecutionArn=arn)


def test_callbacks_pause_resume_stop_and_delete(served: LambdaServe) -> None:
    c = served.client()
    start = c.invoke(FunctionName="cb", InvocationType="Event",
                     Payload=json.dumps({"heartbeat": 3600}).encode(), DurableExecutionName="cb-ok")
    arn = start["DurableExecutionArn"]
    cid = callback_id(c, arn)
    c.send_durable_execution_callback_heartbeat(CallbackId=cid)
    assert c.pause_durable_execution(DurableExecutionArn=arn)["ResponseMetadata"][
        "HTTPStatusCode"] == 202
    got = c.get_durable_execution(DurableExecutionArn=arn)
    assert got["Status"] == "PAUSED" and got["PauseDetails"]["ExecutionTimeoutPaused"] is False
    assert refused(c.pause_durable_execution, DurableExecutionArn=arn)[:2] == (
        "ResourceConflictException", 409)
    assert refused(c.pause_durable_execution, DurableExecutionArn=arn,
                   ExecutionTimeoutPaused=True)[:2] == ("InvalidParameterValueException", 400)
    c.resume_durable_execution(DurableExecutionArn=arn, Reason="seen")
    assert refused(c.resume_durable_execution, DurableExecutionArn=arn)[:2] == (
        "ResourceConflictException", 409)
    assert refused(c.delete_durable_execution, DurableExecutionArn=arn)[:2] == (
        "ResourceConflictException", 409)
    c.send_durable_execution_callback_success(CallbackId=cid, Result=b"yes")  # as sent
    got = ended(c, arn)
    assert (got["Status"], json.loads(got["Result"])) == ("SUCCEEDED", "approved:yes")
    assert refused(c.send_durable_execution_callback_success, CallbackId=cid,
                   Result=b'"again"')[:2] == ("InvalidParameterValueException", 400)

    no = c.invoke(FunctionName="cb", InvocationType="Event", Payload=b"{}",
                  DurableExecutionName="cb-no")["DurableExecutionArn"]
    c.send_durable_execution_callback_failure(
        CallbackId=callback_id(c, no), Error={"ErrorType": "Rejected", "ErrorMessage": "no"})
    got = ended(c, no)
    assert got["Status"] == "FAILED" and got["Error"]["ErrorMessage"] == "no"

    late = c.invoke(FunctionName="cb", InvocationType="Event", Payload=json.dumps(
        {"timeout": 1}).encode(), DurableExecutionName="cb-late")["DurableExecutionArn"]
    late_id = callback_id(c, late)
    assert ended(c, late)["Status"] == "FAILED"
    assert refused(c.send_durable_execution_callback_success, CallbackId=late_id)[:2] == (
        "CallbackTimeoutException", 400)

    stopped = c.invoke(FunctionName="cb", InvocationType="Event", Payload=b"{}",
                       DurableExecutionName="cb-stop")["DurableExecutionArn"]
    callback_id(c, stopped)
    answer = c.stop_durable_execution(DurableExecutionArn=stopped,
                                      Error={"ErrorMessage": "changed plans"})
    assert answer["StopTimestamp"] is not None
    got = c.get_durable_execution(DurableExecutionArn=stopped)
    assert got["Status"] == "STOPPED" and got["Error"]["ErrorMessage"] == "changed plans"
    assert refused(c.stop_durable_execution, DurableExecutionArn=stopped)[:2] == (
        "InvalidParameterValueException", 400)

    deleted = c.delete_durable_execution(DurableExecutionArn=stopped)
    assert deleted["ResponseMetadata"]["HTTPStatusCode"] == 202
    assert deleted["DeletionRequestTimestamp"] is not None
    assert refused(c.get_durable_execution, DurableExecutionArn=stopped)[:2] == (
        "ResourceNotFoundException", 404)
    assert refused(c.get_durable_execution_history, DurableExecutionArn=stopped)[:2] == (
        "ResourceNotFoundException", 404)
    assert c.list_durable_executions_by_function(
        FunctionName="cb", DurableExecutionName="cb-stop")["DurableExecutions"] == []


def test_a_wrong_signature_or_key_changes_nothing_and_is_logged_once(
        served: LambdaServe) -> None:
    good = served.client()
    for client, expected in [
            (served.client(secret="not-the-secret-0123456789abcdefABCDEFGH"),
             "InvalidSignatureException"),
            (served.client(key_id="AKIAUNKNOWNKEY000000"), "UnrecognizedClientException"),
            (served.client(region="eu-west-1"), "InvalidSignatureException")]:
        for name in ("sig-1", "sig-2", "sig-3"):
            assert refused(client.invoke, FunctionName="steps", InvocationType="Event",
                           Payload=b'{"n": 1}', DurableExecutionName=name)[:2] == (expected, 403)
        assert refused(client.list_durable_executions_by_function,
                       FunctionName="steps")[:2] == (expected, 403)
    assert good.list_durable_executions_by_function(
        FunctionName="steps", DurableExecutionName="sig-1")["DurableExecutions"] == []
    lines = [line for line in served.text().splitlines() if "Lambda API: refused" in line]
    assert len(lines) == 1, lines  # one client, one window: one line
    assert "127.0.0.1" in lines[0] and "nothing was changed" in lines[0]
    assert SECRET not in served.text()
