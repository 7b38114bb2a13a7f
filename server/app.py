"""The ops server: `/ops` for consoles, `/objects/<Class>/<name>` for object
WebSockets, `/metrics` for Prometheus. Binds 127.0.0.1 unless told otherwise, and
refuses to serve beyond this machine without TLS unless told that too.

The socket handlers only decode, call the runtime and encode; the protocol is in
`wire`, the commands and their audit in `ops`, the fan-out in `feed`, object
sockets in `objects`, and who may connect or how fast in `guard`.

Every WebSocket route checks `Origin` first: browsers send it, and only origins on
the allow-list (`allow_origins`, none by default) get in; clients that send none
(the console, scripts) are not browsers and are let through to the token check.

The frames of one `/ops` connection are read in order and each runs in a task of
its own, answered by id when it ends: a query never waits behind a slow command,
and a command on a busy object fails alone, at its deadline (see `ops`). A
connection has at most `MAX_IN_FLIGHT` frames running; past that the next frame
is read once one of them ends (every one ends by its deadline).

Until it is welcomed, a connection has shown no token and holds no place a
console needs: it waits in a small lobby of its own, from accept (however far it
gets: a silent TCP socket, a handshake, a WebSocket with no hello) for at most
HANDSHAKE_TIMEOUT_S then HELLO_TIMEOUT_S; when the lobby is full, the address
holding most of it loses its oldest (`admission`, `lobby`). The welcomed clients
have their own cap, `max_clients`. Both are in the runtime's descriptor budget.

`stop(grace_s)` is bounded: connections get a close frame, and whatever has not
ended within the grace (a client that never answers the close, a handler stuck
on an object) is cut off, so `alarmtop serve` and the console quit in time.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import ssl
import time
from collections.abc import Iterable
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from alarmtop.core import Runtime
from alarmtop.core.model.errors import AlarmtopError
from alarmtop.core.ops import Supervisor
from alarmtop.server.admission import Admission
from alarmtop.server.auth import Tokens
from alarmtop.server.feed import ClientChannel, Feed, Frame
from alarmtop.server.guard import (
    CLOSE_POLICY,
    RateLimit,
    Refusal,
    check_bind,
    check_origin,
)
from alarmtop.server.metrics import Metrics
from alarmtop.server.objects import ObjectSocketLimits, ObjectSockets, refuse
from alarmtop.server.ops import DEADLINE_S, OpsService, Session
from alarmtop.server.wire import (
    MAX_FRAME_BYTES,
    QUERY_OPS,
    Command,
    Hello,
    ProtocolError,
    close_reason,
    decode,
    encode,
    failure,
    result,
    welcome,
)

log = logging.getLogger("alarmtop.server")
_UNSERVED_LOG = logging.getLogger("alarmtop.server.unserved")
_UNSERVED_LOG.setLevel(logging.WARNING)
# From accept to welcome, a connection has shown no token: it waits in a small lobby
# of its own (`admission`), for a short while. A console says hello as soon as its
# WebSocket is open; the handshake's deadline covers TLS on a slow link.
HANDSHAKE_TIMEOUT_S = 5.0
HELLO_TIMEOUT_S = 3.0
# Commands change things and are audited: a person at a console sends a few a second.
RATE_PER_S = 50.0
RATE_BURST = 100.0
# Queries are what the console does on its own (pages and the ones around them, the
# detail of the row under the cursor): a key held down is 30 a second, each a query or
# two, so these leave the console ten times the room it needs.
QUERY_RATE_PER_S = 500.0
QUERY_BURST = 1000.0
CLOSE_TIMEOUT_S = 5.0
MAX_REJECTED = 20  # consecutive rate-limited frames before the connection is closed
MAX_IN_FLIGHT = 64  # frames of one connection running at once
MAX_OPS_CLIENTS = 256  # welcomed /ops connections at once (bench/fanout.py runs 100)
# Connections not yet welcomed (handshakes, hellos, /metrics scrapes): room for a burst
# of consoles starting at once (bench/fanout.py opens 100 together) and no more.
MAX_PENDING = 128
# How many connections the kernel queues for accepting, and so how many the event loop
# accepts in one go (each one's descriptor open before the lobby sees it).
ACCEPT_BACKLOG = 64
# Sockets beside the capped ones, counted in the descriptor budget: an accepted batch
# before the lobby counts it, the listening socket, and with TLS the sockets still in
# their TLS handshake (which nothing counts; they last at most HANDSHAKE_TIMEOUT_S).
SPARE_SOCKETS = ACCEPT_BACKLOG + 16
STOP_GRACE_S = 0.5


class _Pace:
    """A connection's two budgets: commands, and queries (which page fast)."""

    def __init__(self, commands_per_s: float, queries_per_s: float) -> None:
        self.commands = RateLimit(commands_per_s, RATE_BURST)
        self.queries = RateLimit(queries_per_s, max(QUERY_BURST, queries_per_s * 2))
        # When frames were refused in the last second, whichever budget refused. Not
        # "in a row": a flood only a little faster than the budget gets a frame through
        # now and then, which would reset such a count for ever; a console at its own
        # pace is never refused at all (the budgets are ten times it).
        self._refused: collections.deque[float] = collections.deque()

    @property
    def rejected(self) -> int:
        """Frames refused in the last second."""
        return len(self._refused)

    def allow(self, query: bool) -> bool:
        ok = (self.queries if query else self.commands).allow()
        now = time.monotonic()
        if not ok:
            self._refused.append(now)
        while self._refused and self._refused[0] < now - 1.0:
            self._refused.popleft()
        return ok


def _address(conn: ServerConnection) -> tuple[str, str]:
    """(host, host:port) of the client."""
    addr = conn.remote_address
    if isinstance(addr, tuple):
        return str(addr[0]), f"{addr[0]}:{addr[1]}"
    return str(addr), str(addr)


class OpsServer:
    """The runtime's WebSocket and metrics server.

    Args:
        runtime: the runtime served (started before `start()`).
        tokens: the viewer and operator tokens of `/ops`.
        host, port: where to listen (port 0: any free one, then `self.port`).
        ssl_context: serve `wss://`; without it a non-loopback `host` is refused
            unless `insecure_no_tls`.
        tick_s: how often the feed sends deltas (and ended windows of refused commands
            are written to the audit log).
        rate_per_s: commands a second per `/ops` connection.
        query_rate_per_s: queries a second per `/ops` connection.
        allow_origins: browser origins let in (e.g. `https://ops.example.com`).
        object_sockets: caps, pace and tokens of `/objects/...` sockets.
        command_timeout_s: the deadline of each command's answer.
        max_clients: welcomed `/ops` connections at once.
        max_pending: connections not yet welcomed at once, on every route (the lobby:
            when it is full, the address holding most of it loses its oldest).

    The sockets it may hold (its caps) are reserved in the runtime's descriptor
    budget, checked when the runtime starts (or now, when it runs already).
    """

    def __init__(self, runtime: Runtime, tokens: Tokens, host: str = "127.0.0.1",
                 port: int = 8765, *, ssl_context: ssl.SSLContext | None = None,
                 tick_s: float = 0.25, rate_per_s: float = RATE_PER_S,
                 query_rate_per_s: float = QUERY_RATE_PER_S,
                 allow_origins: Iterable[str] = (),
                 object_sockets: ObjectSocketLimits | None = None,
                 insecure_no_tls: bool = False, command_timeout_s: float = DEADLINE_S,
                 max_clients: int = MAX_OPS_CLIENTS, max_pending: int = MAX_PENDING) -> None:
        check_bind(host, ssl_context is not None, insecure_no_tls)
        self.rt = runtime
        self.tokens = tokens
        self.host, self.port = host, port
        self._ssl = ssl_context
        self.ops = OpsService(runtime, command_timeout_s)
        self.admission = Admission(max_clients, max_pending)
        self.tasks = Supervisor(None, "ops frames")  # each frame's answer
        self.feed = Feed(self.ops, tick_s)
        self.metrics = Metrics(runtime)
        self.objects = ObjectSockets(runtime, object_sockets or ObjectSocketLimits())
        self.allow_origins = tuple(allow_origins)
        self._rate, self._query_rate = rate_per_s, query_rate_per_s
        self._server: Server | None = None
        self._serving = self._stopped = False
        self.viewers = 0
        self.abandoned = 0  # tasks the last stop() left behind
        limits = self.objects.limits
        runtime.reserve_descriptors(
            "the ops server's sockets",
            max_clients + max_pending + limits.max_total + SPARE_SOCKETS)

    @property
    def clients(self) -> int:
        """Welcomed `/ops` connections open now."""
        return self.admission.clients

    async def bind(self) -> None:
        """Take the port without accepting connections yet: `alarmtop serve` binds
        before it starts the runtime, so a port in use stops it before anything
        (a second runtime on the same data, a token file) is started or created."""
        if self._server is not None:
            return
        # No permessage-deflate: it would compress every delta once per viewer, on the
        # runtime's event loop, each with its own compressor (and its memory).
        self._server = await serve(self._handle, self.host, self.port,
                                   process_request=self._process_request,
                                   max_size=MAX_FRAME_BYTES, ssl=self._ssl,
                                   close_timeout=CLOSE_TIMEOUT_S, logger=log,
                                   compression=None, start_serving=False,
                                   open_timeout=HANDSHAKE_TIMEOUT_S, backlog=ACCEPT_BACKLOG,
                                   create_connection=self.admission.connection_class())
        sock = next(iter(self._server.sockets))
        self.port = sock.getsockname()[1]

    async def start(self) -> None:
        """Listen; returns once connections are accepted (`self.port` is the real one)."""
        await self.bind()
        assert self._server is not None
        await self._server.start_serving()
        if not self._serving:
            self._serving = True
            self.feed.start()
            self.tasks.spawn(self._refusal_summaries(), name="refusal summaries")

    async def stop(self, grace_s: float | None = STOP_GRACE_S) -> None:
        """Close every connection and the port, within `grace_s` (None: however long
        it takes): what has not ended by then is cut off, and `abandoned` counts the
        tasks that ignored it. A second call does nothing."""
        if self._stopped:
            return
        self._stopped = True
        loop = asyncio.get_running_loop()
        end = None if grace_s is None else loop.time() + grace_s

        def left() -> float | None:
            return None if end is None else max(0.0, end - loop.time())

        await self.feed.stop()
        self.metrics.close()
        server = self._server
        if server is not None:
            if not self._serving:  # only bound (the runtime did not start): nothing to tell
                server.logger = _UNSERVED_LOG
            server.close()
            try:
                async with asyncio.timeout(left()):
                    await server.wait_closed()
            except TimeoutError:
                self._cut_off(server)
                if server.handler_tasks:  # cancelled: most end on the next turn of the loop
                    await asyncio.wait(set(server.handler_tasks), timeout=min(0.1, left() or 0.1))
        left_behind = await self.tasks.close(grace_s=left())
        await self._last_refusal_summaries(left())
        left_behind += await self.ops.close(grace_s=left())
        if server is not None:
            left_behind += sum(not t.done() for t in server.handler_tasks)
        self.abandoned = left_behind

    async def _refusal_summaries(self) -> None:
        """Write each window of coalesced refusals soon after it ends, with or without
        more traffic (the audit log's times are the runtime's)."""
        while True:
            await asyncio.sleep(self.feed.tick_s)
            try:
                await self.ops.flush_refusals()
            except Exception:  # the database going away (a stop): said, and tried again
                log.exception("could not write the audit log's summary of refused commands")

    async def _last_refusal_summaries(self, grace_s: float | None) -> None:
        """At stop, the windows not ended yet: their counts are not lost."""
        try:
            async with asyncio.timeout(grace_s):
                await self.ops.flush_refusals(everything=True)
        except Exception:
            log.exception("could not write the audit log's summary of refused commands")

    def _cut_off(self, server: Server) -> None:
        """Drop the connections and handlers that did not end in time."""
        log.warning("stopping the server: %d connections did not close in time; cut off",
                    len(server.all_connections))
        for conn in list(server.all_connections):
            conn.transport.abort()
        for task in list(server.handler_tasks):
            task.cancel()

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
            if not self.metrics.allows(request.headers):
                return conn.respond(401, "/metrics needs its token: Authorization: Bearer "
                                         "<token>\n")
            body = await self.metrics.render(self.viewers, self.objects.relayed)
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
        host, address = _address(conn)
        # Refused before the route: a browser page from elsewhere reaches neither route.
        refusal = check_origin(conn.request.headers.get("Origin"), self.allow_origins)
        if refusal is not None:
            await refuse(conn, refusal, f"socket on {path[:40]!r}", address)
        elif path == "/ops":
            await self._ops(conn, address)
        else:
            self.admission.routed(conn)  # counted by the object sockets' caps from here
            await self.objects.serve(conn, path[len("/objects/"):], host, address)

    # -- the ops channel ------------------------------------------------------------------

    async def _hello(self, conn: ServerConnection, address: str) -> str | None:
        try:
            async with asyncio.timeout(HELLO_TIMEOUT_S):
                frame = await conn.recv()
        except TimeoutError:
            await _close(conn, CLOSE_POLICY, "send hello first")
            return None
        except ConnectionClosed:
            return None  # left before saying hello: nothing to answer
        try:
            msg = decode(frame)
        except ProtocolError as exc:
            await self._no_hello(conn, address, exc.message, "hello expected")
            return None
        if not isinstance(msg, Hello):
            await self._no_hello(conn, address, 'the first message must be {"op": "hello", '
                                 '"token": "..."}', "hello expected")
            return None
        role = self.tokens.role_of(msg.token)
        if role is None:
            await self._no_hello(conn, address, "invalid token", "invalid token")
        return role

    async def _no_hello(self, conn: ServerConnection, address: str, error: str,
                        reason: str) -> None:
        log.warning("ops client %s refused (%s): %.200s", address, reason, error)
        with contextlib.suppress(ConnectionClosed):
            await conn.send(encode(failure(None, error)))
        await _close(conn, CLOSE_POLICY, reason)

    async def _ops(self, conn: ServerConnection, address: str) -> None:
        role = await self._hello(conn, address)
        if role is None:
            return
        full = self.admission.welcome(conn)
        if full is not None:
            await refuse(conn, full, f"ops client ({role})", address)
            return
        try:
            await self._welcomed(conn, Session(role, address))
        finally:
            self.admission.farewell()

    async def _welcomed(self, conn: ServerConnection, session: Session) -> None:
        role = session.role

        async def send(frame: Frame) -> None:
            await conn.send(frame, text=True)  # bytes are UTF-8 JSON already

        try:
            await conn.send(encode(welcome(role)))
            await send(await self.feed.snapshot_frame())
        except ConnectionClosed:
            return  # left right after hello: normal, nothing to clean up
        channel = ClientChannel(send, self.feed.snapshot_frame)
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
        """Read frames in order and pace them as they come; each is answered from a task
        of its own, by id, when it ends."""
        pace = _Pace(self._rate, self._query_rate)
        running: set[asyncio.Task[None]] = set()
        async for frame in conn:
            msg, refusal = self._admit(frame, pace)
            task = self.tasks.spawn(self._reply(msg, refusal, session, channel),
                                    name="ops frame")
            running.add(task)
            task.add_done_callback(running.discard)
            if pace.rejected >= MAX_REJECTED:
                # The refusals are answered first, then the close (bounded: a flood).
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await asyncio.wait(set(running))
                await channel.flush()
                # A flooding client's unread frames would hold a polite close for the
                # whole close timeout: send the close frame, then cut the connection.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.2):
                        await _close(conn, CLOSE_POLICY, "too many requests")
                log.warning("ops client %s closed: too many requests", session.address)
                conn.transport.abort()
                return
            if pace.rejected:
                await asyncio.sleep(0)  # let the refusal be answered before reading on
            if len(running) >= MAX_IN_FLIGHT:
                await asyncio.wait(set(running), return_when=asyncio.FIRST_COMPLETED)

    def _admit(self, frame: str | bytes, pace: _Pace
               ) -> tuple[Hello | Command | ProtocolError, str | None]:
        """Decode a frame and spend its pace, in the order frames came: (the message,
        why it is refused before it runs, or None)."""
        try:
            msg: Hello | Command | ProtocolError = decode(frame)
        except ProtocolError as exc:
            msg = exc
        is_query = isinstance(msg, Command) and msg.op in QUERY_OPS
        if not pace.allow(is_query):
            limit = self._query_rate if is_query else self._rate
            return msg, (f"rate limited: at most {limit:g} "
                         f"{'queries' if is_query else 'commands'} per second")
        return msg, None

    async def _reply(self, msg: Hello | Command | ProtocolError, refusal: str | None,
                     session: Session, channel: ClientChannel) -> None:
        channel.send_result(encode(await self._answer(msg, refusal, session)))

    async def _answer(self, msg: Hello | Command | ProtocolError, refusal: str | None,
                      session: Session) -> dict[str, Any]:
        """The answer to one frame; every frame that names a command is audited, here
        (refused before it runs) or by `OpsService.run` (refused, failed or done)."""
        if refusal is not None:
            await self._audit_refusal(session, msg, refusal)
            return failure(msg.id if not isinstance(msg, Hello) else None, refusal)
        if isinstance(msg, ProtocolError):
            await self._audit_refusal(session, msg, msg.message)
            return failure(msg.id, msg.message)
        if isinstance(msg, Hello):
            return failure(None, "already said hello")
        return await self._command(msg, session)

    async def _audit_refusal(self, session: Session, msg: Hello | Command | ProtocolError,
                             error: str) -> None:
        try:
            await self.ops.refused(session, msg, error)
        except Exception:  # the database going away (a stop) must not end the connection
            log.exception("could not audit a refused frame from %s", session.address)

    async def _command(self, msg: Command, session: Session) -> dict[str, Any]:
        try:
            return result(msg.id, await self.ops.run(msg, session))
        except (AlarmtopError, ProtocolError, PermissionError, ValueError, LookupError) as exc:
            return failure(msg.id, str(exc))
        except Exception as exc:  # a bug must not take the server down: say so and log it
            log.exception("command %s failed", msg.op)
            return failure(msg.id, f"internal error: {type(exc).__name__}: {exc}")


async def _close(conn: ServerConnection, code: int, reason: str) -> None:
    with contextlib.suppress(ConnectionClosed):
        await conn.close(code, close_reason(reason))


__all__ = ["MAX_REJECTED", "ObjectSocketLimits", "OpsServer", "Refusal"]
