"""The ops server: `/ops` for consoles, `/objects/<Class>/<name>` for object
WebSockets, `/metrics` for Prometheus. Binds 127.0.0.1 unless told otherwise.

The socket handlers only decode, call the runtime and encode; the protocol is in
`wire`, the commands in `ops`, the fan-out in `feed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from typing import Any
from urllib.parse import unquote

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from alarmtop.core import Runtime
from alarmtop.core.errors import AlarmtopError
from alarmtop.server.auth import Tokens
from alarmtop.server.feed import ClientChannel, Feed
from alarmtop.server.metrics import Metrics
from alarmtop.server.ops import OpsService, Session
from alarmtop.server.wire import (
    MAX_FRAME_BYTES,
    Command,
    Hello,
    ProtocolError,
    decode,
    encode,
    failure,
    result,
    welcome,
)

log = logging.getLogger("alarmtop.server")
HELLO_TIMEOUT_S = 10.0
RATE_PER_S = 50.0
RATE_BURST = 100.0
CLOSE_TIMEOUT_S = 5.0
MAX_REJECTED = 20  # consecutive rate-limited commands before the connection is closed
CLOSE_POLICY = 1008


class RateLimit:
    """A token bucket on the wall clock (pacing clients is not runtime work)."""

    def __init__(self, per_s: float = RATE_PER_S, burst: float = RATE_BURST) -> None:
        self.per_s, self.burst = per_s, burst
        self.tokens, self.at = burst, time.monotonic()
        self.rejected = 0

    def allow(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.per_s)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            self.rejected = 0
            return True
        self.rejected += 1
        return False


class _SocketTransport:
    """An object WebSocket as the runtime's socket registry sees it."""

    def __init__(self, conn: ServerConnection) -> None:
        self._conn = conn
        self.address = _address(conn)

    async def send(self, message: str) -> None:
        with contextlib.suppress(ConnectionClosed):
            await self._conn.send(message)

    async def close(self, code: int, reason: str) -> None:
        await self._conn.close(code, reason)


def _address(conn: ServerConnection) -> str:
    addr = conn.remote_address
    return f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)


class OpsServer:
    def __init__(self, runtime: Runtime, tokens: Tokens, host: str = "127.0.0.1",
                 port: int = 8765, *, ssl_context: ssl.SSLContext | None = None,
                 tick_s: float = 0.25, rate_per_s: float = RATE_PER_S) -> None:
        self.rt = runtime
        self.tokens = tokens
        self.host, self.port = host, port
        self._ssl = ssl_context
        self.ops = OpsService(runtime)
        self.feed = Feed(self.ops, tick_s)
        self.metrics = Metrics(runtime)
        self._rate = rate_per_s
        self._server: Server | None = None
        self.viewers = 0

    async def start(self) -> None:
        """Listen; returns once the port is bound (`self.port` is then the real one)."""
        self._server = await serve(self._handle, self.host, self.port,
                                   process_request=self._process_request,
                                   max_size=MAX_FRAME_BYTES, ssl=self._ssl,
                                   close_timeout=CLOSE_TIMEOUT_S, logger=log)
        sock = next(iter(self._server.sockets))
        self.port = sock.getsockname()[1]
        self.feed.start()

    async def stop(self) -> None:
        await self.feed.stop()
        self.metrics.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def __aenter__(self) -> OpsServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        scheme = "wss" if self._ssl else "ws"
        return f"{scheme}://{self.host}:{self.port}/ops"

    # -- HTTP -----------------------------------------------------------------------------

    async def _process_request(self, conn: ServerConnection, request: Request
                               ) -> Response | None:
        path = request.path.split("?", 1)[0]
        if path == "/metrics":
            body = await self.metrics.render(self.viewers)
            return Response(200, "OK", Headers([
                ("Content-Type", "text/plain; version=0.0.4; charset=utf-8"),
                ("Content-Length", str(len(body)))]), body)
        if path == "/ops" or path.startswith("/objects/"):
            return None
        return conn.respond(404, "not found: the ops channel is /ops, object sockets are "
                                 "/objects/<Class>/<name>, metrics are /metrics\n")

    async def _handle(self, conn: ServerConnection) -> None:
        assert conn.request is not None
        path = conn.request.path.split("?", 1)[0]
        if path == "/ops":
            await self._ops(conn)
        else:
            await self._object_socket(conn, path[len("/objects/"):])

    # -- the ops channel ------------------------------------------------------------------

    async def _hello(self, conn: ServerConnection) -> str | None:
        try:
            async with asyncio.timeout(HELLO_TIMEOUT_S):
                frame = await conn.recv()
        except TimeoutError:
            await conn.close(CLOSE_POLICY, "send hello first")
            return None
        except ConnectionClosed:
            return None  # left before saying hello: nothing to answer
        try:
            msg = decode(frame)
        except ProtocolError as exc:
            await conn.send(encode(failure(None, exc.message)))
            await conn.close(CLOSE_POLICY, "hello expected")
            return None
        if not isinstance(msg, Hello):
            await conn.send(encode(failure(None, 'the first message must be {"op": "hello", '
                                                 '"token": "..."}')))
            await conn.close(CLOSE_POLICY, "hello expected")
            return None
        role = self.tokens.role_of(msg.token)
        if role is None:
            await conn.send(encode(failure(None, "invalid token")))
            await conn.close(CLOSE_POLICY, "invalid token")
            return None
        return role

    async def _ops(self, conn: ServerConnection) -> None:
        role = await self._hello(conn)
        if role is None:
            return
        session = Session(role, _address(conn))
        try:
            await conn.send(encode(welcome(role)))
            await conn.send(await self.feed.snapshot_frame())
        except ConnectionClosed:
            return  # left right after hello: normal, nothing to clean up
        channel = ClientChannel(conn.send, self.feed.snapshot_frame)
        writer = asyncio.get_running_loop().create_task(channel.run())
        self.feed.clients.add(channel)
        self.viewers += 1
        self.rt.events.emit("viewer.connected", {"address": session.address, "role": role})
        try:
            await self._serve_commands(conn, channel, session)
        except ConnectionClosed:
            pass
        finally:
            self.feed.clients.discard(channel)
            self.viewers -= 1
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                await writer
            self.rt.events.emit("viewer.disconnected", {"address": session.address})

    async def _serve_commands(self, conn: ServerConnection, channel: ClientChannel,
                              session: Session) -> None:
        limit = RateLimit(self._rate)
        async for frame in conn:
            if limit.allow():
                channel.send_result(encode(await self._command(frame, session)))
                continue
            channel.send_result(encode(failure(_peek_id(frame), "rate limited: at most "
                                               f"{self._rate:g} commands per second")))
            if limit.rejected >= MAX_REJECTED:
                await channel.flush()
                # A flooding client's unread frames would hold a polite close for the
                # whole close timeout: send the close frame, then cut the connection.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.2):
                        await conn.close(CLOSE_POLICY, "too many requests")
                conn.transport.abort()
                return
            await asyncio.sleep(0)  # let the writer answer before reading on

    async def _command(self, frame: str | bytes, session: Session) -> dict[str, Any]:
        try:
            msg = decode(frame)
        except ProtocolError as exc:
            return failure(exc.id, exc.message)
        if not isinstance(msg, Command):
            return failure(None, "already said hello")
        try:
            return result(msg.id, await self.ops.run(msg, session))
        except (AlarmtopError, ProtocolError, PermissionError, ValueError, LookupError) as exc:
            return failure(msg.id, str(exc))
        except Exception as exc:  # a bug must not take the server down: say so and log it
            log.exception("command %s failed", msg.op)
            return failure(msg.id, f"internal error: {type(exc).__name__}: {exc}")

    # -- object WebSockets ----------------------------------------------------------------

    async def _object_socket(self, conn: ServerConnection, rest: str) -> None:
        cls, _, name = rest.partition("/")
        cls, name = unquote(cls), unquote(name)
        registry = self.rt.sockets
        try:
            self.rt.get(cls, name)  # validates the class and the name
        except AlarmtopError as exc:
            await conn.close(CLOSE_POLICY, str(exc)[:120])
            return
        ws = registry.connect((cls, name), _SocketTransport(conn))
        assert conn.request is not None
        request = {"path": conn.request.path, "address": _address(conn),
                   "headers": dict(conn.request.headers.raw_items())}
        try:
            await self.rt.socket_event(cls, name, "web_socket_connect", ws, request)
        except Exception as exc:
            registry.remove(ws.id)
            await conn.close(1011, f"object refused the connection: {exc}"[:120])
            return
        if not registry.is_accepted(ws):
            registry.remove(ws.id)
            await conn.close(CLOSE_POLICY, "the object did not accept the connection")
            return
        code, reason, clean = 1000, "", True
        try:
            async for message in conn:
                text = message if isinstance(message, str) else message.decode("utf-8", "replace")
                auto = registry.auto_response((cls, name), text, ws.id, self.rt.clock.now_ms())
                if auto is not None:
                    await conn.send(auto)  # answered without waking the object
                    continue
                await self.rt.socket_event(cls, name, "web_socket_message", ws, text)
        except ConnectionClosed as exc:
            rcvd = exc.rcvd
            code, reason, clean = (rcvd.code, rcvd.reason, True) if rcvd else (1006, "", False)
        except Exception as exc:
            with contextlib.suppress(Exception):
                await self.rt.socket_event(cls, name, "web_socket_error", ws, str(exc))
            code, reason, clean = 1011, str(exc), False
        else:
            code, reason = conn.close_code or 1005, conn.close_reason or ""
        registry.remove(ws.id, code, reason)
        if self.rt.running:
            with contextlib.suppress(Exception):
                await self.rt.socket_event(cls, name, "web_socket_close", ws, code, reason, clean)


def _peek_id(frame: str | bytes) -> int | None:
    try:
        msg = decode(frame)
    except ProtocolError as exc:
        return exc.id
    return msg.id if isinstance(msg, Command) else None
