"""An object's entry in the host (its live instance, the turn of its events) and the
kind of event that holds the turn."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import Any

from alarmtop.core.kernel.objects.durable_object import DurableObject, ObjectContext
from alarmtop.core.kernel.objects.storage import CALL_END, EventEnd, Storage

ObjectKey = tuple[str, str]
_NO_LIMIT = contextlib.nullcontext()


class EventKind:
    """What differs between kinds of events; a call, a socket event: this class.

    The alarm dispatcher subclasses it: its attempt runs under a time limit, and its
    end of event records the attempt in the index."""

    __slots__ = ()
    alarm = False
    doing = "handling a call"  # what holds the turn, as "X is busy ..." says it
    event = "call"  # what the lifecycle hooks call it: "call", "alarm" or "socket"
    method: str | None = None

    def describe(self) -> str:
        return "running its alarm" if self.alarm else self.doing

    def limit(self) -> contextlib.AbstractContextManager[Any]:
        """What bounds the wake and the body (an alarm attempt's timeout)."""
        return _NO_LIMIT

    def end(self, error: BaseException | None) -> EventEnd:
        return CALL_END

    def interrupt(self, why: str) -> bool:
        """End this event now, as a failure (an alarm attempt can be); whether it will."""
        return False


class Resident:
    """An object's entry: its live instance (if any) and the turn of its events.

    The lock is hand-made rather than an `asyncio.Lock`: nearly every event finds it
    free, and taking a free one here is two assignments with no coroutine (the alarm
    hot path takes it once per firing). A busy one queues futures, handed the turn in
    order.
    """

    __slots__ = (
        "busy",
        "ctx",
        "doing",
        "instance",
        "key",
        "last_active_ms",
        "owner",
        "since_ms",
        "storage",
        "tenure",
        "users",
        "waiters",
    )

    def __init__(self, key: ObjectKey, now_ms: int) -> None:
        self.key = key
        self.busy = False  # an event holds the turn (or was handed it and will run)
        self.waiters: collections.deque[asyncio.Future[None]] | None = None
        self.users = 0
        self.instance: DurableObject | None = None
        self.ctx: ObjectContext | None = None
        self.storage: Storage | None = None
        # On a fleet: the epoch of this node's lease on the object's shard when its
        # storage was made (see `ObjectHost.fresh_storage`).
        self.tenure: int | None = None
        self.last_active_ms = now_ms
        self.owner: asyncio.Task[Any] | None = None
        # What the event holding the turn is doing (None: not said yet), and since when.
        self.doing: EventKind | str | None = None
        self.since_ms = 0
