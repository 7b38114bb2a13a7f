"""Object sockets whose client is connected to another node of the fleet.

A client may connect to any node's `/objects/<Class>/<name>`. That node (the edge)
makes every check it makes for its own sockets (Origin, token, caps, pace) and, when
another node holds the object's shard, relays the socket to it. The owner keeps the
socket in its registry like one of its own, with a transport that pushes frames
back over the node connection that opened it. So the object's handlers run on the
owner (one event at a time per object holds across the fleet), its sends and closes
reach the edge's client, `ctx.get_web_sockets()` lists it beside the owner's own,
and auto-responses are answered from the owner's registry without waking the
object. The owner trusts what the edge admitted: it checks only that the class
takes sockets and that it holds the shard.

Requests (edge to owner, node protocol 2), on the connection that opened the socket:

    socket_open     {cls, name, socket: ref, request: {path, address, headers}}
                    -> {"accepted": bool}; an error of web_socket_connect is raised
    socket_message  {socket: ref, text}
                    -> {} | {"auto": response} | {"closed": [code, reason]}
    socket_close    {socket: ref, code, reason, clean} -> null (an unknown ref: nothing)

Frames pushed (owner to edge): `{"socket": ref, "send": text}` and
`{"socket": ref, "close": [code, reason]}`.

When the owner stops running the object (its shard handed over, its lease lost, a
clean stop) it closes the object's sockets, relayed or not, with `CLOSE_MOVED`
(1012, "service restart") and `MOVED`; when a node connection ends, each side
closes what went through it (the edge with 1012 and `NODE_GONE`). Clients
reconnect, and reach the new owner through any node.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from alarmtop.core.fleet.links import NodeLink
from alarmtop.core.model.errors import (
    InvalidArgument,
    RuntimeNotRunning,
    ShardMoved,
    UnknownSocket,
)
from alarmtop.core.model.object_names import check_object_name
from alarmtop.core.model.operations import EXECUTION_CLASS

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from alarmtop.core.kernel.objects.calls import ObjectCalls
    from alarmtop.core.kernel.objects.classes import ObjectClasses
    from alarmtop.core.kernel.objects.sockets import ObjectKey, SocketRegistry, Transport
    from alarmtop.core.kernel.run_state import RunState
    from alarmtop.core.ports import Clock

log = logging.getLogger("alarmtop.fleet")

SOCKET_OPS = frozenset({"socket_open", "socket_message", "socket_close"})
SOCKETS_PROTOCOL = 2  # the node protocol that has them
CLOSE_MOVED = 1012  # RFC 6455 "service restart": come back, it is served elsewhere now
MOVED = "the object moved to another node; reconnect"
NODE_GONE = "the node running the object went away; reconnect"
LINK_GONE = "the node relaying this socket went away"
MAX_REF = 100
MAX_REASON = 1024  # a close frame holds 123 bytes: the edge cuts it to fit
CLOSE_TIMEOUT_S = 2.0


def takes_sockets(cls: type) -> bool:
    """A class takes sockets only by defining `web_socket_connect` (the base class has
    none); the execution class is never reachable, whatever it defines."""
    return cls.__name__ != EXECUTION_CLASS and callable(getattr(cls, "web_socket_connect",
                                                                None))


class RemoteTransport:
    """A relayed socket as the owner's registry sees it: its output goes back to the
    edge over the node connection that opened it."""

    def __init__(self, link: NodeLink, ref: str, address: str) -> None:
        self.link = link
        self.ref = ref
        self.address = address

    async def send(self, message: str) -> None:
        await self.link.push({"socket": self.ref, "send": message})

    async def close(self, code: int, reason: str) -> None:
        await self.link.push({"socket": self.ref, "close": [code, reason[:MAX_REASON]]})


def _text(request: dict[str, Any], name: str, *, empty: bool = False,
          limit: int | None = None) -> str:
    value = request.get(name)
    if not isinstance(value, str) or (not value and not empty):
        raise InvalidArgument(f"node request {request.get('op')!r}: {name} is a "
                              f"{'' if empty else 'non-empty '}string, not {value!r:.60}")
    if limit is not None and len(value) > limit:
        raise InvalidArgument(f"node request {request.get('op')!r}: {name} is at most "
                              f"{limit} characters")
    return value


def _socket_request(value: Any) -> dict[str, Any]:
    """What the object's web_socket_connect sees of the client's request."""
    if not isinstance(value, dict):
        raise InvalidArgument("socket_open: request is an object {path, address, headers}")
    path, address, headers = value.get("path"), value.get("address"), value.get("headers")
    if not (isinstance(path, str) and isinstance(address, str) and isinstance(headers, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())):
        raise InvalidArgument("socket_open: request is {path: str, address: str, headers: "
                              "{str: str}}")
    return {"path": path, "address": address, "headers": dict(headers)}


class OwnedSockets:
    """The owner's side: the sockets other nodes relay to this one's objects."""

    def __init__(self, classes: ObjectClasses, calls: ObjectCalls, sockets: SocketRegistry,
                 state: RunState, clock: Clock, node_id: str,
                 held: Callable[[ObjectKey], Awaitable[None]]) -> None:
        self._classes = classes
        self._calls = calls
        self._sockets = sockets
        self._state = state
        self._clock = clock
        self._node_id = node_id
        self._held = held  # refuses unless this node holds the object's shard
        # Per node connection: the edge's ref -> the registry's socket id.
        self._refs: dict[NodeLink, dict[str, str]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def relayed(self) -> int:
        return sum(len(refs) for refs in self._refs.values())

    async def serve(self, op: str, request: dict[str, Any], link: NodeLink) -> Any:
        if link.protocol < SOCKETS_PROTOCOL:
            raise InvalidArgument(f"{op}: object sockets need node protocol "
                                  f"{SOCKETS_PROTOCOL}; the calling node said {link.protocol}")
        ref = _text(request, "socket", limit=MAX_REF)
        if op == "socket_open":
            return await self._open(request, link, ref)
        if op == "socket_message":
            return await self._message(request, link, ref)
        if op == "socket_close":
            return await self._close(request, link, ref)
        raise InvalidArgument(f"unknown node operation {op!r}")

    async def _open(self, request: dict[str, Any], link: NodeLink, ref: str) -> dict[str, Any]:
        cls, name = _text(request, "cls"), check_object_name(request.get("name"))
        req = _socket_request(request.get("request"))
        klass = self._classes.registered(cls)
        if klass is None or not takes_sockets(klass):
            raise InvalidArgument(f"{cls} takes no WebSockets on node {self._node_id}")
        if not self._state.running:
            raise ShardMoved(f"{cls}/{name}: this node is stopping; nothing ran here")
        await self._held((cls, name))
        if not link.open:
            raise InvalidArgument("socket_open: the connection that asked is gone")
        refs = self._refs.setdefault(link, {})
        if ref in refs:
            raise InvalidArgument(f"socket_open: socket {ref!r} is open already")
        registry = self._sockets
        ws = registry.connect((cls, name), RemoteTransport(link, ref, req["address"]))
        refs[ref] = ws.id
        try:
            await self._calls.socket_event(cls, name, "web_socket_connect", ws, req)
        except BaseException:
            self._forget(link, ref)
            registry.remove(ws.id)
            raise
        if not link.open or not registry.is_accepted(ws):
            self._forget(link, ref)
            registry.remove(ws.id)
            return {"accepted": False}
        return {"accepted": True}

    async def _message(self, request: dict[str, Any], link: NodeLink,
                       ref: str) -> dict[str, Any]:
        text = _text(request, "text", empty=True)
        sid = self._refs.get(link, {}).get(ref)
        key = None if sid is None else self._sockets.key_of(sid)
        if sid is None or key is None:
            raise UnknownSocket(f"no socket {ref!r} relayed here (it closed, or its object "
                                "moved)")
        auto = self._sockets.auto_response(key, text, sid, self._clock.now_ms())
        if auto is not None:
            return {"auto": auto}  # answered without waking the object
        ws = self._sockets.handle(sid)
        try:
            await self._calls.socket_event(key[0], key[1], "web_socket_message", ws, text)
        except (ShardMoved, RuntimeNotRunning):
            # Not run here: the object is another node's now, which does not know this
            # socket. The client reconnects and reaches it there.
            self._forget(link, ref)
            self._sockets.remove(sid, CLOSE_MOVED, MOVED)
            return {"closed": [CLOSE_MOVED, MOVED]}
        except Exception as exc:
            # As for a socket of this node's own: the handler's error ends the socket.
            reason = str(exc)
            with contextlib.suppress(Exception):
                await self._calls.socket_event(key[0], key[1], "web_socket_error", ws, reason)
            self._forget(link, ref)
            self._sockets.remove(sid, 1011, reason)
            with contextlib.suppress(Exception):
                await self._calls.socket_event(key[0], key[1], "web_socket_close", ws, 1011, reason,
                                      False)
            return {"closed": [1011, reason[:MAX_REASON]]}
        return {}

    async def _close(self, request: dict[str, Any], link: NodeLink, ref: str) -> None:
        code, reason, clean = request.get("code"), request.get("reason"), request.get("clean")
        if not (isinstance(code, int) and 1000 <= code <= 4999 and isinstance(reason, str)
                and isinstance(clean, bool)):
            raise InvalidArgument("socket_close: code is 1000-4999, reason a string, clean "
                                  "a boolean")
        sid = self._forget(link, ref)
        key = None if sid is None else self._sockets.key_of(sid)
        if sid is None or key is None:
            return  # closed here first (by the object, or as the object moved)
        self._sockets.remove(sid, code, reason)
        if self._state.running:
            with contextlib.suppress(Exception):
                await self._calls.socket_event(key[0], key[1], "web_socket_close",
                                      self._sockets.handle(sid), code, reason, clean)

    def _forget(self, link: NodeLink, ref: str) -> str | None:
        refs = self._refs.get(link)
        if refs is None:
            return None
        sid = refs.pop(ref, None)
        if not refs:
            del self._refs[link]
        return sid

    def link_lost(self, link: NodeLink) -> None:
        """A node connection ended: the sockets relayed through it are gone (their
        clients are closed on the edge); the objects hear of it as an unclean close."""
        for sid in self._refs.pop(link, {}).values():
            key = self._sockets.key_of(sid)
            if key is None:
                continue
            self._sockets.remove(sid, 1006, LINK_GONE)
            if self._state.running:
                task = asyncio.get_running_loop().create_task(self._closed_event(key, sid))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _closed_event(self, key: ObjectKey, sid: str) -> None:
        with contextlib.suppress(Exception):
            await self._calls.socket_event(key[0], key[1], "web_socket_close",
                                        self._sockets.handle(sid), 1006, LINK_GONE, False)

    async def close_moved(self, which: Callable[[ObjectKey], bool]) -> None:
        """This node no longer runs the objects `which` picks: close their sockets,
        relayed or its own, with `CLOSE_MOVED`, so their clients reconnect to the new
        owner (whose registry does not know them). Their objects see no close event:
        they run elsewhere now."""
        transports = self._sockets.evict(which, CLOSE_MOVED, MOVED)
        for link, refs in list(self._refs.items()):
            for ref, sid in list(refs.items()):
                if self._sockets.key_of(sid) is None:
                    self._forget(link, ref)
        await close_all(transports, CLOSE_MOVED, MOVED)

    async def stop(self) -> None:
        tasks, self._tasks = set(self._tasks), set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def close_all(transports: list[Transport], code: int, reason: str) -> None:
    """Close the transports at once, each waited for a bounded time (a client that does
    not answer the close handshake is not waited for)."""
    async def one(transport: Transport) -> None:
        try:
            await asyncio.wait_for(transport.close(code, reason), CLOSE_TIMEOUT_S)
        except Exception:
            log.debug("closing a socket of a moved object failed", exc_info=True)
    if transports:
        await asyncio.gather(*(one(t) for t in transports))
