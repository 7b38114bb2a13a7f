"""How the console talks to a server: an `OpsClient` protocol and its WebSocket form.

The console depends only on the protocol (tests may hand it another one); the
WebSocket client speaks `/ops`: hello, then frames (welcome, snapshot, delta)
delivered in order, and requests matched to their results by id.

When it cannot connect it says why in words an operator can act on (nothing
listening, TLS on one side only, a wrong path, a certificate not trusted):
`Disconnected.reason`, and `WebSocketOpsClient.last_error` until the next
connection works, for the console's header to show while it retries.

Each request is built as the server's own typed `Command` (`wire.command`, from
the server's command table), so a request the server would refuse for its fields
is refused here, at once and in the server's words, before anything is sent. The
table is what this console knows: an older server that lacks an op answers
"unknown op", which the console handles where it asks (the timers board).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import json
import socket
import ssl
from collections.abc import AsyncIterator
from typing import Any, Protocol
from urllib.parse import urlsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import (
    ConnectionClosed,
    InvalidHandshake,
    InvalidMessage,
    InvalidStatus,
    InvalidURI,
)
from websockets.frames import Close

from alarmtop.server import wire


class CommandError(Exception):
    """The server refused a command; the message is the server's."""


class Disconnected(Exception):
    """The connection to the server went away, or could not be made.

    `reason` says why, short enough for a header ("connection refused: nothing
    listens on 127.0.0.1:8765 ...")."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def describe_failure(exc: BaseException, url: str) -> str:
    """Why connecting to `url` failed, and what to try."""
    parts = urlsplit(url)
    where = parts.netloc or url
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (f"TLS: {where}'s certificate is not trusted ({exc.verify_message}); "
                "trust its CA (SSL_CERT_FILE=ca.pem), or check the host name")
    if isinstance(exc, ssl.SSLError) or (
            parts.scheme == "wss" and isinstance(exc, (ConnectionResetError, EOFError))):
        # A plain server reads the TLS hello as a bad HTTP request and hangs up.
        why = getattr(exc, "reason", None) or "the connection was reset"
        return (f"TLS handshake with {where} failed ({why}): the server may not speak "
                "TLS; try ws:// instead of wss://")
    if isinstance(exc, InvalidStatus):
        code = exc.response.status_code
        if code == 404:
            return (f"wrong path: {where} has no {parts.path or '/'} (the ops channel is "
                    "/ops)")
        return f"{where} answered HTTP {code} instead of opening a WebSocket"
    if isinstance(exc, InvalidMessage) and parts.scheme == "ws":
        return (f"{where} did not answer as a WebSocket server: if it speaks TLS, use "
                "wss:// instead of ws://")
    if isinstance(exc, (InvalidURI, InvalidHandshake)):
        return f"no WebSocket at {url}: {exc}"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve {parts.hostname}: check the host name in the URL"
    if isinstance(exc, TimeoutError):
        return f"no answer from {where} in time: is it reachable, and is it alarmtop?"
    if isinstance(exc, ConnectionRefusedError) or (
            isinstance(exc, OSError) and exc.errno == errno.ECONNREFUSED):
        return (f"connection refused: nothing listens on {where} (is `alarmtop serve` "
                "running there?)")
    if isinstance(exc, ConnectionClosed):
        return f"{where} closed the connection during hello"
    if isinstance(exc, OSError):
        return f"cannot reach {where}: {exc.strerror or exc}"
    return f"cannot reach {where}: {exc}"


def closed_by_server(rcvd: Close | None) -> str:
    """Why an open connection ended: the server's close code and reason when it sent
    them."""
    return "the server closed the connection" + (
        f" ({rcvd.code} {rcvd.reason}".rstrip() + ")" if rcvd else "")


class OpsClient(Protocol):
    role: str | None

    async def connect(self) -> None: ...

    async def close(self) -> None: ...

    def frames(self) -> AsyncIterator[dict[str, Any]]: ...

    async def request(self, op: str, **args: Any) -> Any: ...


CLOSE_TIMEOUT_S = 1.0  # a server that does not answer our close is not waited on longer


class WebSocketOpsClient:
    """`/ops` over a WebSocket. A request waits `timeout_s` for its answer (longer than
    the server's command deadline, so the server's reason comes first) and says so
    when none comes."""

    def __init__(self, url: str, token: str, timeout_s: float = 15.0) -> None:
        self.url = url
        self.token = token
        self.timeout_s = timeout_s
        self.role: str | None = None
        self.last_error: str | None = None  # why the last attempt failed, until one works
        self._ws: ClientConnection | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._frames: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        """Connect and say hello; raises `Disconnected` or `CommandError` (bad token)."""
        await self.close()
        try:
            self._ws = await connect(self.url, open_timeout=self.timeout_s, max_size=None,
                                     close_timeout=CLOSE_TIMEOUT_S)
            await self._ws.send(wire.encode(wire.Hello(self.token).message()))
            first = json.loads(await asyncio.wait_for(self._ws.recv(), self.timeout_s))
        except (OSError, ConnectionClosed, TimeoutError, InvalidHandshake, InvalidURI) as exc:
            self.last_error = describe_failure(exc, self.url)
            await self.close()
            raise Disconnected(self.last_error) from None
        if first.get("type") != "welcome":
            await self.close()
            self.last_error = f"refused: {first.get('error') or 'unexpected first frame'}"
            raise CommandError(first.get("error") or f"unexpected first frame {first}")
        self.role, self.last_error = first["role"], None
        self._frames = asyncio.Queue()
        self._frames.put_nowait(first)
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        ws = self._ws
        assert ws is not None
        try:
            async for raw in ws:
                msg = json.loads(raw)
                if msg.get("type") == "result":
                    fut = self._pending.pop(msg.get("id"), None)
                    if fut is not None and not fut.done():
                        fut.set_result(msg)
                else:
                    self._frames.put_nowait(msg)
            # The iteration ends without an exception on a normal close (1000, 1001: a
            # server that stops says "going away"): the reason is owed all the same.
            self.last_error = closed_by_server(ws.protocol.close_rcvd)
        except ConnectionClosed as exc:
            self.last_error = closed_by_server(exc.rcvd)
        finally:
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(Disconnected("connection lost before the result"))
            self._pending.clear()
            self._frames.put_nowait(None)

    async def frames(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            frame = await self._frames.get()
            if frame is None:
                raise Disconnected(self.last_error or "the server closed the connection")
            yield frame

    async def request(self, op: str, **args: Any) -> Any:
        """The answer to `op` with `args`; raises `CommandError` with the server's words
        when it refuses (or would: a field it does not take, or of the wrong type)."""
        if self._ws is None:
            raise Disconnected("not connected")
        cid = next(self._ids)
        try:
            frame = wire.encode(wire.command(op, cid, **args).message())
        except wire.ProtocolError as exc:
            raise CommandError(exc.message) from exc
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[cid] = fut
        try:
            await self._ws.send(frame)
        except ConnectionClosed:
            self._pending.pop(cid, None)
            raise Disconnected("connection lost") from None
        try:
            msg = await asyncio.wait_for(fut, self.timeout_s)
        except TimeoutError:
            self._pending.pop(cid, None)
            raise TimeoutError(f"no answer from the server within {self.timeout_s:g} s") \
                from None
        if not msg.get("ok"):
            raise CommandError(msg.get("error") or "refused")
        return msg.get("data")

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None
        if self._ws is not None:
            ws, self._ws = self._ws, None
            with contextlib.suppress(OSError):
                await ws.close()
