"""Hibernatable WebSockets owned by objects (Cloudflare's hibernation API).

The runtime keeps each accepted connection, its tags and its attachment here,
outside the object, so the object can hibernate while clients stay connected;
the next message wakes it. An object's auto-response pair is answered from here
without waking it at all. The transport (a real socket) is supplied by the server.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from alarmtop.core.kernel import outbox
from alarmtop.core.kernel.events import EventBus
from alarmtop.core.model.errors import InvalidArgument
from alarmtop.core.model.serialization import to_json

ObjectKey = tuple[str, str]
MAX_ATTACHMENT_BYTES = 16 * 1024
MAX_TAGS = 10


class Transport(Protocol):
    """What the server gives for one client connection."""

    address: str

    async def send(self, message: str) -> None: ...

    async def close(self, code: int, reason: str) -> None: ...


@dataclass
class _Entry:
    key: ObjectKey
    transport: Transport
    tags: tuple[str, ...] = ()
    attachment: str | None = None
    accepted: bool = False
    auto_response_ms: int | None = None


class HibernatableWebSocket:
    """An object's handle on one client connection; valid across hibernation."""

    def __init__(self, registry: SocketRegistry, socket_id: str) -> None:
        self._registry = registry
        self.id = socket_id

    @property
    def tags(self) -> tuple[str, ...]:
        entry = self._registry._entries.get(self.id)
        return entry.tags if entry else ()

    @property
    def open(self) -> bool:
        return self.id in self._registry._entries

    async def send(self, message: str) -> None:
        """Send `message`; inside an object's event it leaves once the event's commit
        has landed (and not at all if the event fails)."""
        entry = self._registry._entries.get(self.id)
        if entry is None:
            return
        box = outbox.current()
        if box is not None:
            transport = entry.transport
            box.sends.append(lambda: transport.send(message))
            return
        await entry.transport.send(message)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Close the connection (after the event's commit, inside an event)."""
        entry = self._registry._entries.get(self.id)
        if entry is None:
            return
        box = outbox.current()
        if box is not None:
            transport = entry.transport
            box.sends.append(lambda: transport.close(code, reason))
            return
        await entry.transport.close(code, reason)

    def serialize_attachment(self, value: Any) -> None:
        """Keep a small JSON value with the connection; it survives hibernation."""
        text = to_json(value, "a WebSocket attachment")
        if len(text.encode()) > MAX_ATTACHMENT_BYTES:
            raise InvalidArgument(f"attachments are at most {MAX_ATTACHMENT_BYTES} bytes "
                                  "of JSON; keep larger state in storage")
        entry = self._registry._entries.get(self.id)
        if entry is not None:
            entry.attachment = text

    def deserialize_attachment(self) -> Any:
        entry = self._registry._entries.get(self.id)
        return None if entry is None or entry.attachment is None else json.loads(
            entry.attachment)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HibernatableWebSocket) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"<HibernatableWebSocket {self.id} tags={list(self.tags)}>"


@dataclass
class SocketRegistry:
    events: EventBus
    _entries: dict[str, _Entry] = field(default_factory=dict)
    _by_object: dict[ObjectKey, set[str]] = field(default_factory=lambda: defaultdict(set))
    _auto: dict[ObjectKey, tuple[str, str]] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def connect(self, key: ObjectKey, transport: Transport) -> HibernatableWebSocket:
        """A new connection for `key`, not yet accepted by the object."""
        sid = f"ws{next(self._ids)}"
        self._entries[sid] = _Entry(key, transport)
        return HibernatableWebSocket(self, sid)

    def accept(self, key: ObjectKey, ws: HibernatableWebSocket, tags: list[str]) -> None:
        entry = self._entries.get(ws.id)
        if entry is None or entry.key != key:
            raise InvalidArgument("accept_web_socket() takes the socket handed to this object")
        if len(tags) > MAX_TAGS or not all(isinstance(t, str) and t for t in tags):
            raise InvalidArgument(f"tags are up to {MAX_TAGS} non-empty strings")
        entry.tags, entry.accepted = tuple(tags), True
        self._by_object[key].add(ws.id)
        self.events.emit("socket.opened", {"object": f"{key[0]}/{key[1]}", "socket": ws.id,
                                           "tags": list(tags),
                                           "address": entry.transport.address})

    def is_accepted(self, ws: HibernatableWebSocket) -> bool:
        entry = self._entries.get(ws.id)
        return entry is not None and entry.accepted

    def key_of(self, socket_id: str) -> ObjectKey | None:
        entry = self._entries.get(socket_id)
        return None if entry is None else entry.key

    def handle(self, socket_id: str) -> HibernatableWebSocket:
        return HibernatableWebSocket(self, socket_id)

    def get(self, key: ObjectKey, tag: str | None = None) -> list[HibernatableWebSocket]:
        ids = sorted(self._by_object.get(key, ()), key=lambda s: int(s[2:]))
        return [HibernatableWebSocket(self, s) for s in ids
                if tag is None or tag in self._entries[s].tags]

    def count(self, key: ObjectKey) -> int:
        return len(self._by_object.get(key, ()))

    def total(self) -> int:
        return sum(len(v) for v in self._by_object.values())

    def remove(self, socket_id: str, code: int = 1006, reason: str = "") -> None:
        entry = self._entries.pop(socket_id, None)
        if entry is None:
            return
        ids = self._by_object.get(entry.key)
        if ids is not None:
            ids.discard(socket_id)
            if not ids:
                del self._by_object[entry.key]
        if entry.accepted:
            self.events.emit("socket.closed", {"object": f"{entry.key[0]}/{entry.key[1]}",
                                               "socket": socket_id, "code": code,
                                               "reason": reason})

    def evict(self, which: Callable[[ObjectKey], bool], code: int,
              reason: str) -> list[Transport]:
        """Forget every socket (and auto-response) of the objects `which` picks, as
        closed with `code`; their transports, for the caller to close. On a fleet: the
        objects moved to another node, whose registry does not know these sockets."""
        transports = []
        for sid, entry in list(self._entries.items()):
            if which(entry.key):
                transports.append(entry.transport)
                self.remove(sid, code, reason)
        for key in [k for k in self._auto if which(k)]:
            del self._auto[key]
        return transports

    def set_auto_response(self, key: ObjectKey, pair: tuple[str, str] | None) -> None:
        if pair is None:
            self._auto.pop(key, None)
            return
        request, response = pair
        if not isinstance(request, str) or not isinstance(response, str) or not request:
            raise InvalidArgument("an auto-response is a (request text, response text) pair")
        self._auto[key] = (request, response)

    def auto_response(self, key: ObjectKey, message: str, socket_id: str | None = None,
                      now_ms: int | None = None) -> str | None:
        """The response to send without waking the object, if `message` is its request."""
        pair = self._auto.get(key)
        if pair is None or pair[0] != message:
            return None
        entry = self._entries.get(socket_id or "")
        if entry is not None:
            entry.auto_response_ms = now_ms
        return pair[1]

    def auto_response_timestamp(self, socket_id: str) -> int | None:
        """When the last auto-response was sent on a socket (proof it is alive)."""
        entry = self._entries.get(socket_id)
        return None if entry is None else entry.auto_response_ms
