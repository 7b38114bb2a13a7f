"""A small, strict HTTP/1.1 server on asyncio, for the Lambda API (`lambda_http`).

What it takes: one request at a time per connection (kept alive unless either side
says `Connection: close`), a request line and headers of at most `max_head_bytes`
and `max_headers` lines, a body of at most `max_body_bytes` given by one
`Content-Length` (chunked bodies are refused: boto3 never sends one), within
`head_timeout_s` and `body_timeout_s`; an idle kept-alive connection is closed
after `idle_timeout_s`, and at most `max_connections` are open at once (more are
closed at once). What breaks those rules is answered with the error the
`refusal` function makes (the Lambda API's shape) and the connection is closed:
a request that was not read whole leaves nothing sound to read next.

The handler gets an `HttpRequest` and returns an `HttpResponse`; whatever it
raises is logged and answered 500. `stop(grace_s)` closes the port, lets requests
in flight end within the grace, then cuts every connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus

log = logging.getLogger("alarmtop.server.http")
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz"
                   "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


@dataclass(frozen=True)
class HttpLimits:
    """Bounds on what a client may send and how slowly (see the module docstring)."""

    max_head_bytes: int = 16 * 1024
    max_headers: int = 100
    max_body_bytes: int = 8 * 1024 * 1024  # Lambda's 6 MB payloads, JSON-escaped
    head_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    idle_timeout_s: float = 60.0
    max_connections: int = 256


@dataclass
class HttpRequest:
    method: str
    target: str  # as sent: the path and the query, still percent-encoded
    headers: list[tuple[str, str]]
    body: bytes
    peer: str  # the client's address

    @property
    def path(self) -> str:
        return self.target.partition("?")[0]

    @property
    def query(self) -> str:
        return self.target.partition("?")[2]

    def header(self, name: str) -> str | None:
        lower = name.lower()
        for k, v in self.headers:
            if k.lower() == lower:
                return v
        return None


@dataclass
class HttpResponse:
    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    close: bool = False  # close the connection after it


class BadRequest(Exception):
    """The client broke HTTP/1.1 or a limit: answer `status` and close."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]
Refusal = Callable[[int, str], HttpResponse]  # (status, message) -> the answer


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def encode_response(resp: HttpResponse, keep_alive: bool) -> bytes:
    lines = [f"HTTP/1.1 {resp.status} {_reason(resp.status)}",
             f"Date: {formatdate(usegmt=True)}", f"Content-Length: {len(resp.body)}"]
    lines += [f"{k}: {v}" for k, v in resp.headers if "\r" not in v and "\n" not in v]
    if not keep_alive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + resp.body


def parse_head(head: bytes, limits: HttpLimits) -> tuple[str, str, list[tuple[str, str]]]:
    """The method, target and headers of a request head (its bytes up to the blank
    line); `BadRequest` for anything HTTP/1.1 does not allow."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        raise BadRequest(400, "the request head is not text") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        raise BadRequest(400, "the request line is not 'METHOD TARGET HTTP/1.1'")
    method, target, version = parts
    if version != "HTTP/1.1":
        raise BadRequest(505, f"only HTTP/1.1 is served, not {version[:20]!r}")
    if not method or any(c not in _TOKEN for c in method):
        raise BadRequest(400, "the method is not a token")
    if not target.startswith("/") or any(ord(c) <= 32 or ord(c) >= 127 for c in target):
        raise BadRequest(400, "the request target is not an origin-form path")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        if line[0] in " \t":
            raise BadRequest(400, "folded header lines are not accepted")
        name, sep, value = line.partition(":")
        if not sep or not name or any(c not in _TOKEN for c in name):
            raise BadRequest(400, f"a header line is not 'Name: value': {line[:40]!r}")
        headers.append((name, value.strip(" \t")))
        if len(headers) > limits.max_headers:
            raise BadRequest(431, f"more than {limits.max_headers} headers")
    return method, target, headers


def body_length(headers: list[tuple[str, str]], limits: HttpLimits) -> int:
    """How many body bytes follow the head; `BadRequest` when it cannot be known or is
    over the limit."""
    lower = [(k.lower(), v) for k, v in headers]
    if any(k == "transfer-encoding" for k, _ in lower):
        raise BadRequest(501, "Transfer-Encoding is not accepted: send the body with a "
                              "Content-Length")
    lengths = {v.strip() for k, v in lower if k == "content-length"}
    if not lengths:
        return 0
    if len(lengths) > 1:
        raise BadRequest(400, "Content-Length is given more than once, with different values")
    (value,) = lengths
    if not value.isdigit() or len(value) > 12:
        raise BadRequest(400, f"Content-Length {value[:20]!r} is not a number of bytes")
    n = int(value)
    if n > limits.max_body_bytes:
        raise BadRequest(413, f"the request body is {n} bytes, over the limit of "
                              f"{limits.max_body_bytes}")
    return n


class HttpServer:
    """See the module docstring."""

    def __init__(self, handler: Handler, refusal: Refusal, host: str, port: int, *,
                 ssl_context: ssl.SSLContext | None = None,
                 limits: HttpLimits | None = None) -> None:
        self._handler, self._refusal = handler, refusal
        self.host, self.port = host, port
        self._ssl = ssl_context
        self.limits = limits or HttpLimits()
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self._busy: set[asyncio.Task[None]] = set()  # connections in the middle of a request
        self._closing = False
        self.abandoned = 0

    async def bind(self) -> None:
        """Take the port without accepting yet (see `OpsServer.bind`)."""
        if self._server is None:
            self._server = await asyncio.start_server(
                self._accept, self.host, self.port, ssl=self._ssl, start_serving=False,
                limit=self.limits.max_head_bytes + 4, backlog=128)
            self.port = self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        await self.bind()
        assert self._server is not None
        await self._server.start_serving()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if self._closing or len(self._connections) >= self.limits.max_connections:
            writer.close()
            return
        self._connections[task] = writer
        try:
            await self._serve(reader, writer, task)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, OSError):
            pass  # the client went away: nothing to answer
        except asyncio.CancelledError:
            if not self._closing:
                raise
            # Cut off by stop(): this task is the server's own, and ends here (asyncio's
            # stream callback would otherwise trip over a cancelled task).
        finally:
            self._connections.pop(task, None)
            self._busy.discard(task)
            writer.close()

    def _peer(self, writer: asyncio.StreamWriter) -> str:
        peer = writer.get_extra_info("peername")
        return str(peer[0]) if isinstance(peer, tuple) and peer else "?"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     task: asyncio.Task[None]) -> None:
        peer, first = self._peer(writer), True
        limits = self.limits
        while not self._closing:
            try:
                head = await self._read_head(reader, limits.head_timeout_s if first
                                             else limits.idle_timeout_s, first)
                if head is None:
                    return
                self._busy.add(task)
                method, target, headers = parse_head(head, limits)
                length = body_length(headers, limits)
                if length and any(k.lower() == "expect" and v.lower() == "100-continue"
                                  for k, v in headers):
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                try:
                    async with asyncio.timeout(limits.body_timeout_s):
                        body = await reader.readexactly(length) if length else b""
                except TimeoutError:
                    raise BadRequest(408, f"the body did not arrive within "
                                          f"{limits.body_timeout_s:g}s") from None
            except BadRequest as exc:
                writer.write(encode_response(self._refusal(exc.status, exc.message), False))
                await writer.drain()
                return
            request = HttpRequest(method, target, headers, body, peer)
            keep = (request.header("connection") or "").lower() != "close"
            try:
                response = await self._handler(request)
            except Exception:
                log.exception("the Lambda API could not answer %s %s", method,
                              request.path[:200])
                response = self._refusal(500, "the service failed to answer")
            keep = keep and not response.close and not self._closing
            writer.write(encode_response(response, keep))
            await writer.drain()
            self._busy.discard(task)
            if not keep:
                return
            first = False

    async def _read_head(self, reader: asyncio.StreamReader, timeout_s: float,
                         first: bool) -> bytes | None:
        """The next request's head; None when the client closed (or, between requests,
        stayed idle too long)."""
        try:
            async with asyncio.timeout(timeout_s):
                return await reader.readuntil(b"\r\n\r\n")
        except TimeoutError:
            if first:
                raise BadRequest(408, f"the request head did not arrive within "
                                      f"{timeout_s:g}s") from None
            return None
        except asyncio.LimitOverrunError:
            raise BadRequest(431, f"the request head is over {self.limits.max_head_bytes} "
                                  "bytes") from None
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise BadRequest(400, "the connection ended inside a request head") from None
            return None

    async def stop(self, grace_s: float | None = 1.0) -> None:
        """Close the port; requests in flight end within `grace_s`, then every
        connection is cut (`abandoned`: those that did not end when cut)."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        for task, writer in list(self._connections.items()):
            if task not in self._busy:  # idle: its read ends at once, as at the client's close
                writer.close()
        if self._busy:
            await asyncio.wait(set(self._busy), timeout=grace_s)
        for task, writer in list(self._connections.items()):
            writer.close()
            task.cancel()
        if self._connections:
            await asyncio.wait(set(self._connections), timeout=0.5)
        self.abandoned = sum(not t.done() for t in self._connections)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 0.5)
