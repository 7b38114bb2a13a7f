"""`register_lambda(name, None, endpoint=...)`: handlers behind the Lambda runtime-emulator
invoke contract, on both backends. A real HTTP endpoint (a small server on a real
socket, in the test) answers each invocation; one that cannot be reached, answers
garbage, an HTTP error, a function error, or nothing by the invocation's deadline
fails that invocation: it runs again by the function's policy, then is a dead
letter an operator re-arms. (The SDK's own handler behind an endpoint, checkpointing
over HTTP, is `tests/server/test_lambda_endpoint.py`.)"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from alarmtop.core import AwsOptions
from alarmtop.core.model.alarm_policy import RetryPolicy
from alarmtop.core.model.execution_errors import ValidationError
from tests.kernel.executions import aws_handlers as h

INVOKE_PATH = "/2015-03-31/functions/function/invocations"
RETRIES = RetryPolicy(max_retries=2, initial_delay_s=1.0, max_delay_s=1.0)


class Endpoint:
    """A handler's endpoint, in the emulator's contract; `mode` says how it answers."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.bodies: list[Any] = []
        self.paths: list[str] = []
        self._server: asyncio.Server | None = None
        self._hung: list[asyncio.StreamWriter] = []
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        length = int(next(line.split(":")[1] for line in head.split("\r\n")
                          if line.lower().startswith("content-length")))
        self.paths.append(head.split(" ")[1])
        self.bodies.append(json.loads(await reader.readexactly(length)))
        if self.mode == "hang":
            self._hung.append(writer)
            return
        status, body = self.answer()
        data = body.encode()
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
        await writer.drain()
        writer.close()

    def answer(self) -> tuple[int, str]:
        if self.mode == "double":
            return 200, json.dumps(self.bodies[-1] * 2)
        return {
            "ok": (200, json.dumps({"Status": "SUCCEEDED", "Result": json.dumps("fine")})),
            "garbage": (200, "this is not JSON"),
            "http500": (500, "internal trouble"),
            "error": (200, json.dumps({"errorType": "Handler.Crash", "errorMessage": "boom",
                                       "stackTrace": ["line 1"]})),
        }[self.mode]

    async def stop(self) -> None:
        for writer in self._hung:
            writer.close()
        if self._server is not None:
            self._server.close()


@pytest.fixture
async def endpoint() -> AsyncIterator[Endpoint]:
    ep = Endpoint()
    await ep.start()
    yield ep
    await ep.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_durable_endpoint_gets_the_envelope_and_its_answer_ends_the_execution(
        make_runtime: Any, clock: Any, endpoint: Endpoint) -> None:
    rt = await make_runtime()
    rt.register_lambda("remote", None, endpoint=endpoint.url + "/")
    await rt.executions.start("remote", {"k": 1}, execution_id="r1")
    await clock.advance(0)
    d = await rt.executions.describe("r1")
    assert (d["status"], d["result"]) == ("succeeded", "fine")
    assert endpoint.paths == [INVOKE_PATH]
    envelope = endpoint.bodies[0]
    assert envelope["DurableExecutionArn"] == d["arn"] and envelope["CheckpointToken"]
    ops = envelope["InitialExecutionState"]["Operations"]
    assert ops[0]["Type"] == "EXECUTION"
    assert json.loads(ops[0]["ExecutionDetails"]["InputPayload"]) == {"k": 1}


async def test_a_plain_endpoint_is_called_once_by_a_chained_invoke(
        make_runtime: Any, clock: Any, endpoint: Endpoint) -> None:
    rt = await make_runtime()
    endpoint.mode = "double"
    rt.register_lambda("double", None, endpoint=endpoint.url, durable=False)
    rt.register_lambda("caller", h.invokes)
    await rt.executions.start("caller", {"target": "double", "payload": 21}, execution_id="c1")
    await clock.advance(5)
    d = await rt.executions.describe("c1")
    assert (d["status"], d["result"]) == ("succeeded", 42)
    assert endpoint.bodies == [21]


@pytest.mark.parametrize(("mode", "error_type"), [
    ("closed", "Runtime.EndpointError"), ("garbage", "Runtime.InvalidResponse"),
    ("http500", "Runtime.EndpointError"), ("error", "Handler.Crash"),
    ("hang", "Sandbox.Timedout")])
async def test_an_endpoint_that_fails_fails_the_invocation_then_is_a_dead_letter(
        make_runtime: Any, clock: Any, endpoint: Endpoint, mode: str, error_type: str) -> None:
    rt = await make_runtime(aws=AwsOptions(invocation_timeout_s=0.5))
    url = f"http://127.0.0.1:{free_port()}" if mode == "closed" else endpoint.url
    endpoint.mode = mode
    rt.register_lambda("remote", None, endpoint=url, retries=RETRIES)
    await rt.executions.start("remote", {"k": 1}, execution_id="r1")
    await clock.advance(0)
    d = await rt.executions.describe("r1")
    assert d["status"] == "running" and d["aws"]["failures"] == 1
    assert d["aws"]["last_failure"]["ErrorType"] == error_type
    for _ in range(3):
        await clock.advance(1)
    d = await rt.executions.describe("r1")
    assert d["aws"]["failures"] == 3 and d["aws"]["dead_letter"], d["aws"]
    assert [(a.object_class, a.object_name) for a in await rt.dead_letters()] == [
        ("Execution", "r1")]
    failed = [ev["InvocationCompletedDetails"]["Error"]["Payload"]["ErrorType"]
              for ev in d["history"] if ev["EventType"] == "InvocationCompleted"]
    assert failed == [error_type] * 3
    # Mended, an operator's re-arm runs it again, and it ends.
    url_ok = endpoint.url
    endpoint.mode = "ok"
    rt.register_lambda("remote", None, endpoint=url_ok, retries=RETRIES)
    await rt.rearm("Execution", "r1")
    await clock.advance(1)
    d = await rt.executions.describe("r1")
    assert (d["status"], d["result"]) == ("succeeded", "fine")


async def test_an_endpoint_is_a_url_and_comes_alone(make_runtime: Any) -> None:
    rt = await make_runtime()
    for bad in ("ftp://x", "http://", "http://h:port", "http://h/x?y=1", 7):
        with pytest.raises(ValidationError):
            rt.register_lambda("r", None, endpoint=bad)
    with pytest.raises(ValidationError, match="not both"):
        rt.register_lambda("r", h.two_steps, endpoint="http://127.0.0.1:9")
    with pytest.raises(ValidationError, match="isolation"):
        rt.register_lambda("r", None, endpoint="http://127.0.0.1:9", isolation="process")
