"""The ops server: `/ops` for consoles, `/objects/<Class>/<name>` for object
WebSockets, `/metrics` for Prometheus. Binds 127.0.0.1 unless told otherwise, and
refuses to serve beyond this machine without TLS unless told that too.

The socket handlers only decode, call the runtime and encode; the protocol is in
`wire`, the commands in their one table (`commands`) and their deadline and audit
in `ops`, a console's connection in `ops_channel`, the fan-out in `feed`, object
sockets in `objects`, and who may connect or how fast in `guard`.

Every WebSocket route checks `Origin` first: browsers send it, and only origins on
the allow-list (`allow_origins`, none by default) get in; clients that send none
(the console, scripts) are not browsers and are let through to the token check.

Until it is welcomed, a connection has shown no token and holds no place a
console needs: it waits in a small lobby of its own, from accept (however far it
gets: a silent TCP socket, a handshake, a WebSocket with no hello) for at most
HANDSHAKE_TIMEOUT_S then `ops_channel.HELLO_TIMEOUT_S`; when the lobby is full, the address
holding most of it loses its oldest (`admission`, `lobby`). The welcomed clients
have their own cap, `max_clients`. Both are in the runtime's descriptor budget.

`stop(grace_s)` is bounded: connections get a close frame, and whatever has not
ended within the grace (a client that never answers the close, a handler stuck
on an object) is cut off, so `alarmtop serve` and the console quit in time.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Iterable

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from alarmtop.core import Runtime
from alarmtop.core.ops import Supervisor
from alarmtop.server.admission import Admission
from alarmtop.server.auth import Tokens
from alarmtop.server.feed import Feed
from alarmtop.server.guard import Refusal, check_bind, check_origin
from alarmtop.server.metrics import Metrics
from alarmtop.server.objects import ObjectSocketLimits, ObjectSockets, refuse
from alarmtop.server.ops import DEADLINE_S, OpsService
from alarmtop.server.ops_channel import QUERY_RATE_PER_S, RATE_PER_S, OpsChannel
from alarmtop.server.wire import MAX_FRAME_BYTES

log = logging.getLogger("alarmtop.server")
_UNSERVED_LOG = logging.getLogger("alarmtop.server.unserved")
_UNSERVED_LOG.setLevel(logging.WARNING)
# From accept to welcome, a connection has shown no token: it waits in a small lobby
# of its own (`admission`), for a short while. A console says hello as soon as its
# WebSocket is open; the handshake's deadline covers TLS on a slow link.
HANDSHAKE_TIMEOUT_S = 5.0
CLOSE_TIMEOUT_S = 5.0
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
        self.channel = OpsChannel(runtime, tokens, self.ops, self.feed, self.admission,
                                  self.tasks, rate_per_s=rate_per_s,
                                  query_rate_per_s=query_rate_per_s)
        self._server: Server | None = None
        self._serving = self._stopped = False
        self.abandoned = 0  # tasks the last stop() left behind
        limits = self.objects.limits
        runtime.reserve_descriptors(
            "the ops server's sockets",
            max_clients + max_pending + limits.max_total + SPARE_SOCKETS)

    @property
    def viewers(self) -> int:
        """`/ops` connections being served now (the metrics' viewers)."""
        return self.channel.viewers

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

        try:  # within the grace too: a feed task that ignores its cancel is left behind
            async with asyncio.timeout(left()):
                await self.feed.stop()
        except TimeoutError:
            log.warning("the live feed did not stop within the grace; left behind")
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
            await self.channel.serve(conn, address)
        else:
            self.admission.routed(conn)  # counted by the object sockets' caps from here
            await self.objects.serve(conn, path[len("/objects/"):], host, address)


__all__ = ["ObjectSocketLimits", "OpsServer", "Refusal"]
