"""`register_lambda(..., endpoint=...)` end to end: a handler of the real AWS SDK in a
process of its own, behind a Lambda runtime-emulator shim, invoked by a real
`alarmtop serve --lambda-api` and checkpointing back to it over HTTP with the SDK's
own boto3 client (`AWS_ENDPOINT_URL_LAMBDA`), on SQLite and on PostgreSQL. The
invocation's state comes in pages (a small response limit), so the SDK reads it
with GetDurableExecutionState too."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import pg
from tests.conftest import RESET_SQL
from tests.server.lambda_serve import (
    KEY_ID,
    REGION,
    SECRET,
    LambdaServe,
    free_port,
    start,
    stop,
    until,
)
from tests.tui.test_cli_mistakes import ROOT, env_without_tokens

pytest.importorskip("aws_durable_execution_sdk_python")


@dataclass
class Remote:
    served: LambdaServe
    shim: subprocess.Popen[str]
    calls: Path
    shim_log: Path


def start_shim(tmp: Path, lambda_url: str) -> tuple[subprocess.Popen[str], int, Path, Path]:
    port_file, calls, log = tmp / "shim.port", tmp / "calls.log", tmp / "shim.log"
    env = env_without_tokens(AWS_ENDPOINT_URL_LAMBDA=lambda_url, AWS_ACCESS_KEY_ID=KEY_ID,
                             AWS_SECRET_ACCESS_KEY=SECRET, AWS_REGION=REGION,
                             AWS_DEFAULT_REGION=REGION)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE"):
        env.pop(name, None)
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.server.lambda_shim", str(port_file),
             "tests.server.remote_handler:remote", str(calls)],
            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=err, text=True)
    port = until(lambda: int(port_file.read_text()) if port_file.exists() and
                 port_file.read_text() else None, "the shim's port")
    return proc, port, calls, log


@pytest.fixture(params=["sqlite", "postgres"])
def remote(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Remote]:
    dsn = None
    if request.param == "postgres":
        cluster: pg.Cluster = request.getfixturevalue("pg_cluster")
        cluster.run(str(cluster.bin / "psql"), "-h", "127.0.0.1", "-p", str(cluster.port),
                    "-U", "postgres", "-q", "-v", "ON_ERROR_STOP=1", "-c", RESET_SQL)
        dsn = cluster.dsn
    lambda_port = free_port()
    shim, shim_port, calls, shim_log = start_shim(tmp_path, f"http://127.0.0.1:{lambda_port}")
    try:
        served = start(tmp_path, dsn=dsn, lambda_port=lambda_port,
                       ALARMTOP_TEST_ENDPOINT=f"http://127.0.0.1:{shim_port}",
                       ALARMTOP_TEST_RESPONSE_BYTES="1500")
        try:
            yield Remote(served, shim, calls, shim_log)
        finally:
            assert stop(served) == 0, served.text()
    finally:
        shim.terminate()
        shim.wait()


def history(client: Any, arn: str) -> list[dict[str, Any]]:
    return list(client.get_durable_execution_history(DurableExecutionArn=arn,
                                                     MaxItems=1000)["Events"])


def test_an_sdk_handler_behind_an_endpoint_checkpoints_over_http(remote: Remote) -> None:
    c = remote.served.client()
    arn = c.invoke(FunctionName="remote", InvocationType="Event", Payload=b'{"n": 12}',
                   DurableExecutionName="far-1")["DurableExecutionArn"]

    def callback_started() -> str | None:
        for ev in history(c, arn):
            if ev["EventType"] == "CallbackStarted":
                return str(ev["CallbackStartedDetails"]["CallbackId"])
        return None
    cid = until(callback_started, "the remote handler's callback")
    c.send_durable_execution_callback_success(CallbackId=cid, Result=b"approved")
    got = until(lambda: (lambda g: g if g["Status"] != "RUNNING" else None)(
        c.get_durable_execution(DurableExecutionArn=arn)), "the execution's end")
    assert got["Status"] == "SUCCEEDED", (got, remote.served.text(), remote.shim_log.read_text())
    assert json.loads(got["Result"]) == {"steps": [f"s{i}" for i in range(12)],
                                         "verdict": "approved"}
    events = history(c, arn)
    succeeded = [ev["Name"] for ev in events if ev["EventType"] == "StepSucceeded"]
    assert succeeded == [f"s{i}" for i in range(12)]  # each once: replays skipped them
    invocations = [ev for ev in events if ev["EventType"] == "InvocationCompleted"]
    assert len(invocations) == 3 and not any("Error" in ev["InvocationCompletedDetails"]
                                             for ev in invocations)
    calls = remote.calls.read_text().split()
    assert "CheckpointDurableExecution" in calls and "GetDurableExecutionState" in calls
