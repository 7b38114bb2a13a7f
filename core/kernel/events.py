"""The event bus: every state change in the runtime is an `Event`.

Emitting never blocks the runtime. Each subscriber has a bounded queue; when a
subscriber falls behind, its oldest events are dropped and counted, so a stuck
consumer costs bounded memory and is visible (`Subscription.dropped`).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple, Protocol

from alarmtop.core.kernel import outbox

_current_outbox = outbox.CURRENT.get


class _Now(Protocol):
    def now_ms(self) -> int: ...


class Event(NamedTuple):
    """One state change: a dotted `type` (`alarm.dead`), when, and JSON-ready data.

    A named tuple: several are made at every alarm firing, and a frozen dataclass
    costs three times as much to build."""

    type: str
    at_ms: int
    data: dict[str, Any] = {}

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "at_ms": self.at_ms, "data": self.data}


class Subscription:
    """An async iterator over events, from the moment of subscribing."""

    def __init__(self, bus: EventBus, prefixes: tuple[str, ...], maxsize: int) -> None:
        self._bus = bus
        self._prefixes = prefixes
        self._queue: collections.deque[Event] = collections.deque(maxlen=maxsize)
        self._ready = asyncio.Event()
        self.dropped = 0
        self.closed = False

    def _offer(self, event: Event) -> None:
        if self._prefixes and not event.type.startswith(self._prefixes):
            return
        if len(self._queue) == self._queue.maxlen:
            self.dropped += 1
        self._queue.append(event)
        self._ready.set()

    def drain(self) -> list[Event]:
        """Everything received so far, without waiting."""
        out = list(self._queue)
        self._queue.clear()
        self._ready.clear()
        return out

    async def get(self) -> Event:
        while not self._queue:
            if self.closed:
                raise StopAsyncIteration
            self._ready.clear()
            await self._ready.wait()
        return self._queue.popleft()

    def close(self) -> None:
        self.closed = True
        self._bus._unsubscribe(self)
        self._ready.set()

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        return await self.get()


class EventBus:
    def __init__(self, clock: _Now) -> None:
        self._clock = clock
        self._subs: set[Subscription] = set()
        self._listeners: list[Callable[[Event], None]] = []
        # What `emit` walks, rebuilt on (un)subscribing rather than copied on every
        # emit: the alarm path emits several events per firing.
        self._sub_snapshot: tuple[Subscription, ...] = ()
        self._listener_snapshot: tuple[Callable[[Event], None], ...] = ()

    @property
    def active(self) -> bool:
        """Whether anyone listens; emitters may skip building data when not."""
        return bool(self._sub_snapshot or self._listener_snapshot)

    def emit(self, type_: str, data: dict[str, Any] | None = None) -> None:
        """Announce a state change. Inside an object's event it waits in the event's
        outbox and goes out once the event's commit has landed (or never, if it fails)."""
        subs, listeners = self._sub_snapshot, self._listener_snapshot
        if not (subs or listeners):
            return
        box = _current_outbox()
        if box is not None and not box.closed:
            box.events.append((type_, data or {}))
            return
        event = Event(type_, self._clock.now_ms(), data or {})
        for sub in subs:
            sub._offer(event)
        for listener in listeners:
            try:
                listener(event)
            except Exception:  # a broken listener must not break the emitter
                logging.getLogger("alarmtop.runtime").exception(
                    "event listener failed on %s", event.type)

    def deliver(self, type_: str, data: dict[str, Any] | None = None) -> None:
        """Announce now (what an outbox calls once its event is durable)."""
        subs, listeners = self._sub_snapshot, self._listener_snapshot
        if not (subs or listeners):
            return
        event = Event(type_, self._clock.now_ms(), data or {})
        for sub in subs:
            sub._offer(event)
        for listener in listeners:
            try:
                listener(event)
            except Exception:  # a broken listener must not break the emitter
                logging.getLogger("alarmtop.runtime").exception(
                    "event listener failed on %s", event.type)

    def subscribe(self, *prefixes: str, maxsize: int = 100_000) -> Subscription:
        """Events whose type starts with one of `prefixes` (all when none are given)."""
        sub = Subscription(self, prefixes, maxsize)
        self._subs.add(sub)
        self._sub_snapshot = tuple(self._subs)
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        self._subs.discard(sub)
        self._sub_snapshot = tuple(self._subs)

    def listen(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        """Call `callback` synchronously for every event; returns the unsubscribe function."""
        self._listeners.append(callback)
        self._listener_snapshot = tuple(self._listeners)

        def unlisten() -> None:
            self._listeners.remove(callback)
            self._listener_snapshot = tuple(self._listeners)

        return unlisten
