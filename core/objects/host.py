"""Where objects live: wake on an event, one event at a time, hibernate when idle.

A resident entry exists while an object has an instance in memory or events
waiting for it. Its lock serialises events; the hibernation task drops idle
instances (closing their databases) after `hibernate_after`, and the least
recently used ones when more than `max_resident` are live.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterator
from types import TracebackType
from typing import Any

from alarmtop.core.clock import Clock, Wakeup
from alarmtop.core.errors import ReentrantCall, StorageError
from alarmtop.core.events import EventBus
from alarmtop.core.objects.base import DurableObject, ObjectContext
from alarmtop.core.objects.lifecycle import ResidentView, choose_evictions, next_deadline
from alarmtop.core.objects.storage_api import AlarmAccess, Storage
from alarmtop.core.sockets import SocketRegistry
from alarmtop.core.storage.interface import ObjectStore, StorageBackend

ObjectKey = tuple[str, str]


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
        "instance",
        "key",
        "last_active_ms",
        "owner",
        "storage",
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
        self.last_active_ms = now_ms
        self.owner: asyncio.Task[Any] | None = None


class ObjectHost:
    def __init__(self, classes: dict[str, type[DurableObject]], backend: StorageBackend,
                 alarms: AlarmAccess, clock: Clock, events: EventBus, env: Any, *,
                 hibernate_after_s: float, max_resident: int,
                 delete_all_preserves_alarm: bool) -> None:
        self._classes = classes
        self._backend = backend
        self._alarms = alarms
        self._clock = clock
        self._events = events
        self._env = env
        self._hibernate_after_ms = round(hibernate_after_s * 1000)
        self._max_resident = max_resident
        self._preserve_alarm = delete_all_preserves_alarm
        self._residents: collections.OrderedDict[ObjectKey, Resident] = collections.OrderedDict()
        self._live = 0
        self._wakeup = Wakeup(clock)  # type: ignore[arg-type]
        self._reaper: asyncio.Task[None] | None = None
        self._deadline: int | None = None
        self.sockets = SocketRegistry(events)
        self._store_opener = self._open_store  # one bound method shared by every Storage

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self._reaper = self._clock.spawn(self._reap_loop(), name="hibernation")

    async def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            await asyncio.gather(self._reaper, return_exceptions=True)
            self._reaper = None
        for key in list(self._residents):
            await self.hibernate(key)

    @property
    def live_count(self) -> int:
        return self._live

    def is_resident(self, key: ObjectKey) -> bool:
        r = self._residents.get(key)
        return r is not None and r.instance is not None

    def resident_keys(self) -> list[ObjectKey]:
        return [k for k, r in self._residents.items() if r.instance is not None]

    # -- events ---------------------------------------------------------------------------

    def exclusive(self, key: ObjectKey) -> _Exclusive:
        """`async with host.exclusive(key) as r:` holds the object's event lock
        (without waking it)."""
        return _Exclusive(self, key)

    def enter(self, key: ObjectKey,
              task: asyncio.Task[Any] | None = None) -> tuple[Resident, bool]:
        """Join the object's events: `(r, True)` when the turn was free and is now ours;
        with `(r, False)`, await `turn(r)`. Either way `leave_turn(r)` ends it. `task` is
        the current task, for a caller that has it at hand.

        `exclusive()` in two halves, for the alarm path: a free turn costs no await."""
        r = self._residents.get(key)
        if r is None:
            r = self._residents[key] = Resident(key, self._clock.now_ms())
        if task is None:
            task = asyncio.current_task()
        if r.owner is task and task is not None:
            raise ReentrantCall(*key)
        r.users += 1
        if r.busy:
            return r, False
        r.busy, r.owner = True, task
        return r, True

    async def turn(self, r: Resident) -> None:
        """Wait until the events ahead of ours are done (after `enter` said so)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if r.waiters is None:
            r.waiters = collections.deque()
        r.waiters.append(fut)
        try:
            # Waiting for another event of this object is not work of our own: that
            # event may be sleeping on the clock, and time must be free to move.
            await self._clock.idle_wait(fut)
        except BaseException:
            if fut.done() and not fut.cancelled():
                self._pass_turn(r)  # handed the turn while being cancelled: pass it on
            self._leave(r)
            raise
        r.owner = asyncio.current_task()

    def leave_turn(self, r: Resident) -> None:
        """End our event: the next one waiting gets the turn."""
        try:
            self._release(r)
        finally:
            self._leave(r)

    def _pass_turn(self, r: Resident) -> None:
        waiters = r.waiters
        while waiters:
            fut = waiters.popleft()
            if not fut.done():  # a waiter cancelled meanwhile has left its future behind
                fut.set_result(None)
                return
        r.busy = False

    def _release(self, r: Resident) -> None:
        r.owner = None
        r.last_active_ms = self._clock.now_ms()
        self._pass_turn(r)
        if self._deadline is None and r.instance is not None:
            self._wakeup.poke()  # the reaper slept with nothing idle to watch

    def _leave(self, r: Resident) -> None:
        r.users -= 1
        key = r.key
        if key in self._residents:
            self._residents.move_to_end(key)
        if r.users == 0 and r.instance is None:
            self._residents.pop(key, None)

    async def wake(self, r: Resident) -> DurableObject:
        """The live instance, constructing it (and running its blockers) if needed."""
        if r.instance is not None:
            return r.instance
        cls_name, name = r.key
        cls = self._classes[cls_name]
        storage = r.storage or Storage(r.key, self._store_opener, self._alarms,
                                       self._preserve_alarm)
        ctx = ObjectContext(cls_name, name, storage, self._clock, self.sockets)
        r.storage, r.ctx = storage, ctx
        instance = cls(ctx, self._env)
        if ctx._blockers:
            await ctx._drain_blockers()
        r.instance = instance
        self._live += 1
        if self._events.active:
            self._events.emit("object.woke", {"object": f"{cls_name}/{name}"})
        if self._live > self._max_resident or self._deadline is None:
            self._wakeup.poke()
        return instance

    async def _open_store(self, key: ObjectKey) -> ObjectStore:
        """Open the object's database; a damaged or quarantined one is announced."""
        cls_name, name = key
        try:
            return await self._backend.open_object(cls_name, name)
        except StorageError as exc:
            moved = getattr(exc, "quarantined_to", None)
            self._events.emit("storage.quarantined" if moved else "storage.failed", {
                "object": f"{cls_name}/{name}", "file": exc.path, "quarantined_to": moved,
                "error": str(exc)})
            raise

    @staticmethod
    def output_pending(r: Resident) -> bool:
        """Whether `finish_event` has anything to do: blockers to wait for, a database
        whose writes to commit (objects that only use alarms have neither)."""
        return bool(r.ctx is not None and r.ctx._blockers) or (
            r.storage is not None and r.storage._is_open)

    async def finish_event(self, r: Resident) -> None:
        """The output gate: make the event's writes durable before its output leaves."""
        if r.ctx is not None and r.ctx._blockers:
            await r.ctx._drain_blockers()
        if r.storage is not None and r.storage._is_open:
            await r.storage._commit()

    # -- hibernation ----------------------------------------------------------------------

    async def hibernate(self, key: ObjectKey) -> bool:
        done = self._hibernate_now(key)
        if done is not None:
            return done
        async with self.exclusive(key) as r:
            if r.instance is None:
                return False
            if r.storage is not None:
                await r.storage._close()
            self._evict(r)
        # The entry goes when its last user leaves (see exclusive): an event that
        # queued behind us keeps it and wakes the object again.
        return True

    def _hibernate_now(self, key: ObjectKey) -> bool | None:
        """Hibernate without awaiting if possible: whether it hibernated, or None when
        its database must be closed first (which awaits)."""
        r = self._residents.get(key)
        if r is None or r.users > 0 or r.busy or r.instance is None:
            return False
        if r.storage is not None and r.storage._is_open:
            return None
        # Nothing to close: evict without awaiting. No event can slip in meanwhile,
        # so the lock is not needed (objects that only use alarms are like this).
        self._evict(r)
        self._residents.pop(key, None)
        return True

    def _evict(self, r: Resident) -> None:
        r.instance = r.ctx = r.storage = None
        self._live -= 1
        if self._events.active:
            self._events.emit("object.hibernated", {"object": f"{r.key[0]}/{r.key[1]}"})

    def _low_water(self) -> int:
        """What an over-full host evicts down to: a little below the cap, so that a stream
        of wakes costs one eviction pass per `max_resident // 8` wakes, not one per wake."""
        if self._live <= self._max_resident:
            return self._max_resident
        return self._max_resident - self._max_resident // 8

    def _views(self) -> Iterator[ResidentView]:
        # A generator: the decisions stop reading at the first recently used object.
        return (ResidentView(k, r.last_active_ms, r.users > 0)
                for k, r in self._residents.items() if r.instance is not None)

    async def _reap_loop(self) -> None:
        while True:
            views = self._views()
            for key in choose_evictions(views, self._clock.now_ms(), self._hibernate_after_ms,
                                        self._low_water(), self._live):
                if self._hibernate_now(key) is None:  # most need no await: no database
                    await self.hibernate(key)
            deadline = next_deadline(self._views(), self._hibernate_after_ms)
            if deadline is not None:  # an object that could not go now is tried again later
                deadline = max(deadline, self._clock.now_ms() + 1000)
            self._deadline = deadline
            await self._wakeup.wait(self._deadline)


class _Exclusive:
    """The context manager of `ObjectHost.exclusive`: a class rather than an
    `@asynccontextmanager` generator, because every event of every object goes
    through it and the generator machinery costs several microseconds a time."""

    __slots__ = ("_host", "_key", "_r")

    def __init__(self, host: ObjectHost, key: ObjectKey) -> None:
        self._host = host
        self._key = key
        self._r: Resident | None = None

    async def __aenter__(self) -> Resident:
        host = self._host
        r, ready = host.enter(self._key)
        if not ready:
            await host.turn(r)
        self._r = r
        return r

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        r, self._r = self._r, None
        assert r is not None
        self._host.leave_turn(r)
