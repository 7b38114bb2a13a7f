"""`alarmtop serve --lambda-api` for what boto3 cannot send: a signature dated out of
the 5-minute window (signed by botocore's own signer at that date), no signature,
a body over the limit, a route that does not exist; the key pair made on the first
start (0600, an AWS credentials file, printed once); the command line's mistakes."""

from __future__ import annotations

import http.client
import json
import os
import stat
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.server.lambda_serve import KEY_ID, REGION, SECRET, LambdaServe, start, stop
from tests.tui.test_cli_mistakes import RUN_S, alarmtop, assert_clear, env_without_tokens

pytest.importorskip("aws_durable_execution_sdk_python")


class DatedSigV4(SigV4Auth):
    """botocore's SigV4 signer, signing as of `when` instead of now."""

    def __init__(self, credentials: Credentials, when: datetime) -> None:
        super().__init__(credentials, "lambda", REGION)
        self.when = when

    def add_auth(self, request: AWSRequest) -> None:
        request.context["timestamp"] = self.when.strftime("%Y%m%dT%H%M%SZ")
        self._modify_request_before_signing(request)
        canonical = self.canonical_request(request)
        self._inject_signature_to_request(
            request, self.signature(self.string_to_sign(request, canonical), request))


def send(url: str, method: str, path: str, body: bytes = b"",
         headers: dict[str, str] | None = None, when: datetime | None = None,
         sign: bool = True) -> tuple[int, dict[str, str], dict[str, Any]]:
    """One request over a plain connection; signed by botocore's signer (at `when`)."""
    req = AWSRequest(method=method, url=url + path, data=body, headers=dict(headers or {}))
    if sign:
        DatedSigV4(Credentials(KEY_ID, SECRET), when or datetime.now(UTC)).add_auth(req)
    prepared = req.prepare()
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=RUN_S)
    try:
        conn.request(method, path, body=body, headers=dict(prepared.headers.items()))
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, \
            json.loads(data) if data else {}
    finally:
        conn.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LambdaServe]:
    server = start(tmp_path_factory.mktemp("lambda-wire"))
    yield server
    assert stop(server) == 0, server.text()


INVOKE = "/2015-03-31/functions/steps/invocations"


def test_a_signature_out_of_the_window_changes_nothing(served: LambdaServe) -> None:
    for when, words in [(datetime.now(UTC) - timedelta(minutes=6), "Signature expired"),
                        (datetime.now(UTC) + timedelta(minutes=6), "not yet current")]:
        status, headers, body = send(served.url, "POST", INVOKE, b'{"n": 1}', {
            "X-Amz-Invocation-Type": "Event", "X-Amz-Durable-Execution-Name": "stale"}, when)
        assert (status, headers["x-amzn-errortype"]) == (403, "InvalidSignatureException")
        assert words in body["message"], body
    # Within the window it is let in.
    status, headers, _ = send(served.url, "POST", INVOKE, b'{"n": 1}', {
        "X-Amz-Invocation-Type": "Event"}, datetime.now(UTC) - timedelta(minutes=4))
    assert status == 202 and headers["x-amz-durable-execution-arn"]
    listed = served.client().list_durable_executions_by_function(
        FunctionName="steps", DurableExecutionName="stale")
    assert listed["DurableExecutions"] == []


def test_no_signature_a_body_too_large_and_no_such_route(served: LambdaServe) -> None:
    status, headers, body = send(served.url, "GET", "/2025-12-01/functions/steps/"
                                 "durable-executions", sign=False)
    assert (status, headers["x-amzn-errortype"], body["message"]) == (
        403, "MissingAuthenticationTokenException", "Missing Authentication Token")
    parts = urlsplit(served.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=RUN_S)
    try:
        conn.putrequest("POST", INVOKE)
        conn.putheader("Content-Length", str(20 * 1024 * 1024))
        conn.endheaders()
        resp = conn.getresponse()
        assert (resp.status, resp.getheader("x-amzn-ErrorType")) == (
            413, "RequestTooLargeException")
        assert resp.getheader("Connection") == "close"
    finally:
        conn.close()
    status, headers, body = send(served.url, "GET", "/2025-12-01/nothing-here")
    assert (status, headers["x-amzn-errortype"]) == (404, "UnknownOperationException")
    status, headers, _ = send(served.url, "PUT", "/2025-12-01/durable-executions/x")
    assert (status, headers["x-amzn-errortype"]) == (404, "UnknownOperationException")


def test_the_key_pair_is_made_once_private_and_usable(tmp_path: Path) -> None:
    first = start(tmp_path, keys=False)
    try:
        path = first.data / "lambda.credentials"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        shown = [line for line in first.text().splitlines() if "new Lambda API key pair" in line]
        assert len(shown) == 1 and str(path) in shown[0]
        env = {"AWS_SHARED_CREDENTIALS_FILE": str(path)}
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            client = boto3.session.Session().client("lambda", endpoint_url=first.url,
                                                    region_name=REGION)
            assert client.list_durable_executions_by_function(
                FunctionName="steps")["DurableExecutions"] == []
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    finally:
        assert stop(first) == 0
    made = path.read_text()
    again = start(tmp_path, keys=False)
    try:
        assert "new Lambda API key pair" not in again.text()
        assert path.read_text() == made
    finally:
        stop(again)


def test_command_line_mistakes_are_one_line(tmp_path: Path) -> None:
    app = ("serve", "--app", "tests.server.lambda_app:build", "--port", "0", "--data-dir",
           str(tmp_path / "data"))
    assert_clear(alarmtop(*app, "--lambda-api", "0", "--lambda-api-host", "0.0.0.0"), 2,
                 "--lambda-api-host 0.0.0.0", "--tls-cert")
    assert_clear(alarmtop(*app, "--lambda-api-host", "127.0.0.1"), 2, "--lambda-api PORT")
    assert_clear(alarmtop(*app, "--lambda-api", "70000"), 2, "0 to 65535")
    assert_clear(alarmtop(*app, "--lambda-api", "0", env=env_without_tokens(
        ALARMTOP_LAMBDA_ACCESS_KEY_ID=KEY_ID)), 1, "ALARMTOP_LAMBDA_SECRET_ACCESS_KEY")
