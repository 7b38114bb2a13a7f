"""`/objects/<Class>/<name>`: hibernatable WebSockets owned by durable objects.

A socket is admitted only when every check passes, in this order, and all of
them before any object wakes (so a refused socket opens no database, runs no
constructor and leaves no file): the class is registered and opts in by
defining `web_socket_connect` (the execution class never does), the object name
is valid, the token matches when the class needs one, and the caps (in total,
per client address) have room. The `Origin` check comes earlier, for every
route, in `app`. Each refusal is a close code, a reason and one log line.

An admitted socket's messages are paced by a per-socket rate limit; past it the
socket is closed (1008).

On a fleet, a socket for an object another node holds is admitted here all the
same, then relayed to that node, where the object's handlers run
(`fleet_sockets.py`); when that node goes away or the object moves, the socket is
closed with 1012 so the client reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from alarmtop.core import Runtime
from alarmtop.core.model.errors import AlarmtopError, NodeUnreachable
from alarmtop.core.ops import HibernatableWebSocket, takes_sockets
from alarmtop.server.fleet_sockets import RelayedSocket
from alarmtop.server.guard import (
    CLOSE_INTERNAL,
    CLOSE_POLICY,
    CLOSE_TRY_AGAIN,
    ConnectionCaps,
    RateLimit,
    Refusal,
    bearer_token,
    check_object_token,
    expected_object_token,
)
from alarmtop.server.wire import close_reason

log = logging.getLogger("alarmtop.server")


@dataclass(frozen=True)
class ObjectSocketLimits:
    """Caps and pace of object sockets, and the tokens some classes need.

    Attributes:
        max_total: object sockets open at once, over every client.
        max_per_address: object sockets open at once from one client address.
        rate_per_s: messages a second one socket may send (sustained)...
        burst: ...and at once.
        tokens: class name -> the token its sockets must present; a class not in
            here may name an environment variable in `web_socket_token_env`.
    """

    max_total: int = 512
    max_per_address: int = 64
    rate_per_s: float = 50.0
    burst: float = 100.0
    tokens: Mapping[str, str] = field(default_factory=dict)


class SocketTransport:
    """An object WebSocket as the runtime's socket registry sees it."""

    def __init__(self, conn: ServerConnection, address: str) -> None:
        self._conn = conn
        self.address = address

    async def send(self, message: str) -> None:
        with contextlib.suppress(ConnectionClosed):
            await self._conn.send(message)

    async def close(self, code: int, reason: str) -> None:
        # The object's own reason may be any length: a close frame holds 123 bytes.
        await self._conn.close(code, close_reason(reason))


def registered_class(rt: Runtime, class_name: str) -> type | None:
    """The class registered under `class_name`, read without waking anything."""
    return rt.registered_class(class_name)


def opts_in(cls: type) -> bool:
    """A class takes sockets only by defining `web_socket_connect` (the base class has
    none); the execution class is never reachable, whatever it defines."""
    return takes_sockets(cls)


class ObjectSockets:
    """The `/objects/...` route of one server."""

    def __init__(self, runtime: Runtime, limits: ObjectSocketLimits) -> None:
        self.rt = runtime
        self.limits = limits
        self.caps = ConnectionCaps(limits.max_total, limits.max_per_address)
        # Sockets whose client is here and whose object runs on another node: the owner
        # counts them among its own, this node only relays them.
        self.relayed = 0

    async def serve(self, conn: ServerConnection, rest: str, host: str, address: str) -> None:
        """Admit or refuse the socket, then relay its messages until it closes."""
        cls_name, _, name = rest.partition("/")
        cls_name, name = unquote(cls_name), unquote(name)
        what = f"object socket {shown(cls_name + '/' + name)}"
        refusal = self._admit(cls_name, name, conn) or self.caps.admit(host)
        if refusal is not None:
            await refuse(conn, refusal, what, address)
            return
        try:
            await self._run(conn, cls_name, name, address, what)
        finally:
            self.caps.release(host)

    def _admit(self, cls_name: str, name: str, conn: ServerConnection) -> Refusal | None:
        cls = registered_class(self.rt, cls_name)
        if cls is None:
            # Not the runtime's UnknownClass message: it lists every registered class.
            return Refusal(CLOSE_POLICY, f"no class {shown(cls_name)} here")
        if not opts_in(cls):
            return Refusal(CLOSE_POLICY, f"{cls_name} takes no WebSockets (the class defines "
                                         "no web_socket_connect)")
        try:
            self.rt.get(cls_name, name)  # validates the name; wakes nothing
        except AlarmtopError as exc:
            return Refusal(CLOSE_POLICY, str(exc))
        expected = expected_object_token(cls_name, cls, self.limits.tokens, os.environ)
        if isinstance(expected, Refusal):
            return expected
        assert conn.request is not None
        headers = {k.lower(): v for k, v in conn.request.headers.raw_items()}
        query = parse_qs(conn.request.path.partition("?")[2])
        return check_object_token(cls_name, bearer_token(headers, query), expected)

    async def _run(self, conn: ServerConnection, cls: str, name: str, address: str,
                   what: str) -> None:
        request = _request(conn, address)
        relayed = RelayedSocket(conn, cls, name, request)
        try:
            opened = await self.rt.socket_route(cls, name, relayed.open)
        except NodeUnreachable as exc:
            await refuse(conn, Refusal(CLOSE_TRY_AGAIN, str(exc)), what, address)
            return
        except Exception as exc:
            await refuse(conn, Refusal(CLOSE_INTERNAL, f"object refused the connection: {exc}"),
                         what, address)
            return
        if opened is not None:  # the object runs on another node
            await self._run_relayed(conn, relayed, opened, address, what)
            return
        registry = self.rt.sockets
        ws = registry.connect((cls, name), SocketTransport(conn, address))
        if not await self._connect(conn, cls, name, ws, request, what):
            return

        async def deliver(text: str) -> None:
            auto = registry.auto_response((cls, name), text, ws.id, self.rt.clock.now_ms())
            if auto is not None:
                await conn.send(auto)  # answered without waking the object
                return
            await self.rt.socket_event(cls, name, "web_socket_message", ws, text)

        async def fail(exc: Exception) -> tuple[int, str]:
            with contextlib.suppress(Exception):
                await self.rt.socket_event(cls, name, "web_socket_error", ws, str(exc))
            return 1011, str(exc)

        code, reason, clean = await self._relay(conn, deliver, fail, address, what)
        registry.remove(ws.id, code, reason)
        if self.rt.running:
            with contextlib.suppress(Exception):
                await self.rt.socket_event(cls, name, "web_socket_close", ws, code, reason,
                                           clean)

    async def _connect(self, conn: ServerConnection, cls: str, name: str,
                       ws: HibernatableWebSocket, request: dict[str, Any], what: str) -> bool:
        registry = self.rt.sockets
        try:
            await self.rt.socket_event(cls, name, "web_socket_connect", ws, request)
        except Exception as exc:
            registry.remove(ws.id)
            await refuse(conn, Refusal(CLOSE_INTERNAL, f"object refused the connection: {exc}"),
                         what, request["address"])
            return False
        if not registry.is_accepted(ws):
            registry.remove(ws.id)
            await refuse(conn, Refusal(CLOSE_POLICY, "the object did not accept the connection"),
                         what, request["address"])
            return False
        return True

    async def _run_relayed(self, conn: ServerConnection, relayed: RelayedSocket,
                           opened: dict[str, Any], address: str, what: str) -> None:
        if not opened.get("accepted"):
            await refuse(conn, Refusal(CLOSE_POLICY, "the object did not accept the connection"),
                         what, address)
            return
        code, reason, clean = 1006, "", False  # if the relay is cut off (the server stops)
        self.relayed += 1
        try:
            code, reason, clean = await self._relay(conn, relayed.message, relayed.fail,
                                                    address, what)
        finally:
            self.relayed -= 1
            await relayed.end(code, reason, clean)

    async def _relay(self, conn: ServerConnection, deliver: Callable[[str], Awaitable[None]],
                     fail: Callable[[Exception], Awaitable[tuple[int, str]]], address: str,
                     what: str) -> tuple[int, str, bool]:
        """Messages to `deliver` until the socket ends: (code, reason, clean); `fail`
        says how a failed delivery ends it."""
        limit = RateLimit(self.limits.rate_per_s, self.limits.burst)
        try:
            async for message in conn:
                if not limit.allow():
                    refusal = Refusal(CLOSE_POLICY,
                                      f"more than {self.limits.rate_per_s:g} messages a second")
                    # A flooding client's unread frames fill the receive queue, and a
                    # full queue stops reading: its answer to a polite close would never
                    # be read. Send the close frame, then cut the connection.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(0.2):
                            await refuse(conn, refusal, what, address)
                    conn.transport.abort()
                    return refusal.code, refusal.reason, True
                text = message if isinstance(message, str) else message.decode("utf-8",
                                                                               "replace")
                await deliver(text)
        except ConnectionClosed as exc:
            rcvd = exc.rcvd
            return (rcvd.code, rcvd.reason, True) if rcvd else (1006, "", False)
        except Exception as exc:
            code, reason = await fail(exc)
            return code, reason, False
        return conn.close_code or 1005, conn.close_reason or "", True


def shown(text: str, limit: int = 80) -> str:
    """Client-given text as it may appear in a log line or a close reason: quoted, with
    control characters escaped (no forged log lines), and cut."""
    quoted = repr(text)
    return quoted if len(quoted) <= limit else quoted[:limit - 4] + "...'"


def _request(conn: ServerConnection, address: str) -> dict[str, Any]:
    """What the object sees of the request. The token it was admitted with is left
    out, so an object that logs its requests does not log the secret."""
    assert conn.request is not None
    path, sep, query = conn.request.path.partition("?")
    kept = [part for part in query.split("&") if not part.startswith("token=")]
    headers = {k: v for k, v in conn.request.headers.raw_items()
               if k.lower() != "authorization"}
    return {"path": path + (sep + "&".join(kept) if kept else ""), "address": address,
            "headers": headers}


async def refuse(conn: ServerConnection, refusal: Refusal, what: str, address: str) -> None:
    """Close with the refusal's code and reason, and say so in one log line."""
    reason = close_reason(refusal.reason)
    log.warning("%s from %s refused (%d): %s", what, address, refusal.code, reason)
    with contextlib.suppress(ConnectionClosed):
        await conn.close(refusal.code, reason)
