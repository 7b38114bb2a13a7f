"""`register_lambda(..., endpoint="http://host:port")`: a handler in any language, behind
the Lambda runtime-emulator invoke contract.

Each invocation is one `POST {endpoint}/2015-03-31/functions/function/invocations`
whose body is the invocation's input (a durable function's JSON envelope:
`DurableExecutionArn`, `CheckpointToken`, `InitialExecutionState`; a plain
function's event) and whose answer is the handler's (the SDK's `{Status, Result,
Error}`, or a plain function's value). The handler checkpoints back through the
Lambda API (`alarmtop serve --lambda-api`, its `AWS_ENDPOINT_URL_LAMBDA`), as on
Lambda. An endpoint that cannot be reached, does not answer by the invocation's
deadline, answers an HTTP error, a function error or anything but JSON fails that
invocation (retried by the function's policy, then a dead letter).

The client is HTTP/1.1 on asyncio, one connection per invocation (`Connection:
close`), its answer bounded by the response limit and awaited until the
invocation's deadline (`AwsOptions.invocation_timeout_s`, on the wall clock: the
handler runs in real time). Like a handler in a thread, the exchange is the
runtime's work: a virtual clock stands still until the answer (or the deadline).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from typing import Any
from urllib.parse import urlsplit

from alarmtop.core.kernel.executions.aws.invoker import Request
from alarmtop.core.kernel.executions.aws.processes import InvocationRaised
from alarmtop.core.model.aws_invocation import TIMEOUT_ERROR

INVOKE_PATH = "/2015-03-31/functions/function/invocations"
ENDPOINT_ERROR = "Runtime.EndpointError"
HEAD_LIMIT = 64 * 1024


def _failure(error_type: str, message: str) -> InvocationRaised:
    return InvocationRaised({"ErrorType": error_type, "ErrorMessage": message})


class EndpointInvoker:
    """Invocations sent to handlers behind endpoints (see the module docstring)."""

    def __init__(self, response_bytes: int, workers: int = 64) -> None:
        self._max_body = response_bytes + 64 * 1024  # the answer's JSON around the result
        self._slots = asyncio.Semaphore(workers)

    async def invoke(self, request: Request) -> dict[str, Any]:
        fn = request.function
        assert fn.endpoint is not None
        payload = request.payload if fn.durable else request.payload.get("Input")
        body = json.dumps(payload).encode()
        deadline = max(0.0, request.deadline_s - time.time())
        async with self._slots:
            status, answer = await self._exchange(fn.endpoint, body,
                                                  request.context.aws_request_id, deadline)
        return _output(fn.endpoint, status, answer, fn.durable)

    async def _exchange(self, endpoint: str, body: bytes, request_id: str,
                        deadline_s: float) -> tuple[int, bytes]:
        parts = urlsplit(endpoint)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        context = ssl.create_default_context() if parts.scheme == "https" else None
        try:
            async with asyncio.timeout(deadline_s):
                reader, writer = await asyncio.open_connection(host, port, ssl=context)
                try:
                    writer.write((f"POST {parts.path}{INVOKE_PATH} HTTP/1.1\r\nHost: "
                                  f"{parts.netloc}\r\nContent-Type: application/json\r\n"
                                  f"Content-Length: {len(body)}\r\nConnection: close\r\n"
                                  f"Lambda-Runtime-Aws-Request-Id: {request_id}\r\n\r\n"
                                  ).encode("latin-1") + body)
                    await writer.drain()
                    return await self._read_response(reader)
                finally:
                    writer.close()
        except TimeoutError:
            raise _failure(TIMEOUT_ERROR, f"{endpoint} did not answer within the invocation's "
                                          f"timeout ({deadline_s:.0f}s left)") from None
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ValueError) as exc:
            raise _failure(ENDPOINT_ERROR, f"{endpoint}: {type(exc).__name__}: {exc}") from None

    async def _read_response(self, reader: asyncio.StreamReader) -> tuple[int, bytes]:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        if len(head) > HEAD_LIMIT:
            raise ValueError("the answer's head is too large")
        lines = head.split("\r\n")
        status_line = lines[0].split(" ", 2)
        if len(status_line) < 2 or not status_line[0].startswith("HTTP/1.") or \
                not status_line[1].isdigit():
            raise ValueError(f"not an HTTP answer: {lines[0][:60]!r}")
        headers = {k.strip().lower(): v.strip() for k, _, v in
                   (line.partition(":") for line in lines[1:] if line)}
        if headers.get("transfer-encoding", "").lower() == "chunked":
            return int(status_line[1]), await self._chunked(reader)
        if "content-length" in headers:
            n = int(headers["content-length"])
            if n > self._max_body:
                raise ValueError(f"the answer is {n} bytes, over the response limit")
            return int(status_line[1]), await reader.readexactly(n)
        data = await reader.read(self._max_body + 1)  # to the end of the connection
        if len(data) > self._max_body:
            raise ValueError("the answer is over the response limit")
        return int(status_line[1]), data

    async def _chunked(self, reader: asyncio.StreamReader) -> bytes:
        out = bytearray()
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return bytes(out)
            if len(out) + size > self._max_body:
                raise ValueError("the answer is over the response limit")
            out += await reader.readexactly(size)
            await reader.readexactly(2)

    async def close(self) -> None:
        """Nothing to close: each invocation's connection ends with it."""


def _output(endpoint: str, status: int, body: bytes, durable: bool) -> dict[str, Any]:
    """The handler's answer as the service reads it; `InvocationRaised` for a failed
    invocation."""
    if status != 200:
        raise _failure(ENDPOINT_ERROR, f"{endpoint} answered HTTP {status}: "
                                       f"{body[:200].decode('utf-8', 'replace')}")
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise _failure("Runtime.InvalidResponse", f"{endpoint} answered something that is "
                                                  f"not JSON: {body[:80]!r}") from None
    if isinstance(value, dict) and "errorType" in value and "Status" not in value:
        error: dict[str, Any] = {"ErrorType": str(value.get("errorType")),
                                 "ErrorMessage": str(value.get("errorMessage", ""))}
        if isinstance(value.get("stackTrace"), list):
            error["StackTrace"] = [str(line) for line in value["stackTrace"]]
        if durable:  # the runtime's report of an unhandled error: the invocation failed
            raise InvocationRaised(error)
        return {"Status": "FAILED", "Error": error}
    if not durable:
        return {"Status": "SUCCEEDED", "Result": json.dumps(value)}
    if not isinstance(value, dict):
        raise _failure("Runtime.InvalidResponse", f"{endpoint} answered "
                                                  f"{type(value).__name__}, not the SDK's "
                                                  "output object")
    return value
