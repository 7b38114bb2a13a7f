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
    __slots__ = (
        "ctx",
        "instance",
        "key",
        "last_active_ms",
        "lock",
        "owner",
        "storage",
        "users",
    )

    def __init__(self, key: ObjectKey, now_ms: int) -> None:
        self.key = key
        self.lock = asyncio.Lock()
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

    def _enter(self, key: ObjectKey) -> Resident:
        r = self._residents.get(key)
        if r is None:
            r = self._residents[key] = Resident(key, self._clock.now_ms())
        task = asyncio.current_task()
        if r.owner is task and task is not None:
            raise ReentrantCall(*key)
        r.users += 1
        return r

    def _release(self, r: Resident) -> None:
        r.owner = None
        r.last_active_ms = self._clock.now_ms()
        r.lock.release()
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
        storage = r.storage or Storage(r.key, lambda: self._open_store(cls_name, name),
                                       self._alarms, self._preserve_alarm)
        ctx = ObjectContext(cls_name, name, storage, self._clock, self.sockets)
        r.storage, r.ctx = storage, ctx
        instance = cls(ctx, self._env)
        await ctx._drain_blockers()
        r.instance = instance
        self._live += 1
        self._events.emit("object.woke", {"object": f"{cls_name}/{name}"})
        if self._live > self._max_resident or self._deadline is None:
            self._wakeup.poke()
        return instance

    async def _open_store(self, cls_name: str, name: str) -> ObjectStore:
        """Open the object's database; a damaged or quarantined one is announced."""
        try:
            return await self._backend.open_object(cls_name, name)
        except StorageError as exc:
            moved = getattr(exc, "quarantined_to", None)
            self._events.emit("storage.quarantined" if moved else "storage.failed", {
                "object": f"{cls_name}/{name}", "file": exc.path, "quarantined_to": moved,
                "error": str(exc)})
            raise

    async def finish_event(self, r: Resident) -> None:
        """The output gate: make the event's writes durable before its output leaves."""
        if r.ctx is not None:
            await r.ctx._drain_blockers()
        if r.storage is not None:
            await r.storage._commit()

    # -- hibernation ----------------------------------------------------------------------

    async def hibernate(self, key: ObjectKey) -> bool:
        r = self._residents.get(key)
        if r is None or r.users > 0 or r.lock.locked() or r.instance is None:
            return False
        if r.storage is None or not r.storage._is_open:
            # Nothing to close: evict without awaiting. No event can slip in meanwhile,
            # so the lock is not needed (objects that only use alarms are like this).
            self._evict(r)
            self._residents.pop(key, None)
            return True
        async with self.exclusive(key) as r:
            if r.instance is None:
                return False
            if r.storage is not None:
                await r.storage._close()
            self._evict(r)
        # The entry goes when its last user leaves (see exclusive): an event that
        # queued behind us keeps it and wakes the object again.
        return True

    def _evict(self, r: Resident) -> None:
        r.instance = r.ctx = r.storage = None
        self._live -= 1
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
        r = host._enter(self._key)
        try:
            # Waiting for another event of this object is not work of our own: that
            # event may be sleeping on the clock, and time must be free to move.
            await host._clock.idle_wait(r.lock.acquire())
        except BaseException:
            host._leave(r)
            raise
        r.owner = asyncio.current_task()
        self._r = r
        return r

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        r, self._r = self._r, None
        assert r is not None
        try:
            self._host._release(r)
        finally:
            self._host._leave(r)
