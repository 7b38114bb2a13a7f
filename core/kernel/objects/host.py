"""Where objects live: wake on an event, one event at a time, hibernate when idle.

A resident entry exists while an object has an instance in memory or events
waiting for it. Its lock serialises events; the hibernation task drops idle
instances (closing their databases) after `hibernate_after`, and the least
recently used ones when more than `max_resident` are live.

The entry also says what holds the turn (`doing`, since when), so that a caller
that cannot wait long (an operator command under `tasks.patience`) is told
"ClickCounter/home is busy running its alarm (started 12 s ago)" instead of
queueing behind it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from types import TracebackType
from typing import Any

from alarmtop.core.kernel import outbox
from alarmtop.core.kernel.descriptors import out_of_descriptors
from alarmtop.core.kernel.events import EventBus
from alarmtop.core.kernel.hooks import INCOMING, NO_HOOKS, Hooks
from alarmtop.core.kernel.objects.durable_object import DurableObject, ObjectContext
from alarmtop.core.kernel.objects.resident import EventKind, Resident
from alarmtop.core.kernel.objects.sockets import SocketRegistry
from alarmtop.core.kernel.objects.storage import AlarmAccess, Storage
from alarmtop.core.kernel.outbox import Outbox
from alarmtop.core.kernel.supervisor import Supervisor, Wakeup, patience_left
from alarmtop.core.model import hook_info
from alarmtop.core.model.alarm_intent import Intent
from alarmtop.core.model.errors import (
    ObjectBusy,
    OutOfDescriptors,
    ReentrantCall,
    ShardMoved,
    StorageError,
)
from alarmtop.core.model.hibernation import ResidentView, choose_evictions, next_deadline
from alarmtop.core.ports import EVENT_LEASE, Clock, ObjectStore, StorageBackend

ObjectKey = tuple[str, str]
Body = Callable[[DurableObject], Awaitable[Any]]


# What one event did: (its value, the error it raised, the index write after its
# commit that failed). A plain tuple: one is made for every event.
EventOutcome = tuple[Any, BaseException | None, BaseException | None]
log = logging.getLogger("alarmtop.runtime")
EMFILE_LOG_EVERY_S = 5.0  # one log line per this many seconds while descriptors run out


def cut_off(exc: BaseException) -> bool:
    """Whether `exc` is this task being cancelled (not a handler raising one itself)."""
    task = asyncio.current_task()
    return isinstance(exc, asyncio.CancelledError) and (task is None or task.cancelling() > 0)


class Call(EventKind):
    """An event kind that says what it is doing: a call to a named method, a socket
    event (one per method, made once: events share them). One that `interrupts` ends
    an alarm attempt holding the object (a hung step of an execution an operator
    aborts or pauses) instead of waiting for it."""

    __slots__ = ("doing", "event", "interrupts", "method")

    def __init__(self, doing: str, method: str | None = None, event: str = "call",
                 interrupts: bool = False) -> None:
        self.doing = doing
        self.method = method
        self.event = event
        self.interrupts = interrupts


CALL = EventKind()


class ObjectHost:
    """Every resident object of this runtime, and the one way events reach them."""

    def __init__(self, classes: dict[str, type[DurableObject]], backend: StorageBackend,
                 alarms: AlarmAccess, clock: Clock, events: EventBus, env: Any,
                 tasks: Supervisor, *,
                 hibernate_after_s: float, max_resident: int,
                 delete_all_preserves_alarm: bool, hooks: Hooks = NO_HOOKS,
                 alarm_started: Callable[[ObjectKey], int | None] = lambda key: None,
                 may_run: Callable[[ObjectKey], bool] | None = None,
                 tenure: Callable[[ObjectKey], int | None] | None = None) -> None:
        self._classes = classes
        self._backend = backend
        self._alarms = alarms
        self._clock = clock
        self._tasks = tasks
        self._events = events
        self._env = env
        self._hibernate_after_ms = round(hibernate_after_s * 1000)
        self._max_resident = max_resident
        self._preserve_alarm = delete_all_preserves_alarm
        self._residents: collections.OrderedDict[ObjectKey, Resident] = collections.OrderedDict()
        self._live = 0
        self._wakeup = Wakeup(clock, tasks.tracker)
        self._reaper: asyncio.Task[None] | None = None
        self._deadline: int | None = None
        self.sockets = SocketRegistry(events)
        self._store_opener = self._open_store  # one bound method shared by every Storage
        # When the alarm attempt of an object in flight started (the scheduler knows:
        # it marks the attempt before its row says 'running').
        self.alarm_started = alarm_started
        # On a fleet: whether this node may run an event of the object now (it holds a
        # lease on its shard that has not run out); None alone.
        self.may_run = may_run
        # On a fleet: the epoch of this node's lease on the object's shard (see
        # `fresh_storage`); None alone.
        self.tenure = tenure
        self._emfile_logged = 0.0
        self._emfile_unlogged = 0
        self.hooks = hooks  # the runtime's plugins

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self._reaper = self._tasks.spawn(self._reap_loop(), name="hibernation")

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

    def busy_keys(self) -> list[ObjectKey]:
        """Objects an event holds (or is about to hold) right now."""
        return [k for k, r in self._residents.items() if r.busy]

    def resident_keys(self) -> list[ObjectKey]:
        return [k for k, r in self._residents.items() if r.instance is not None]

    # -- events ---------------------------------------------------------------------------

    def exclusive(self, key: ObjectKey, doing: str = "with the runtime's own work"
                  ) -> _Exclusive:
        """`async with host.exclusive(key) as r:` holds the object's event lock
        (without waking it); `doing` is what a caller kept waiting is told."""
        return _Exclusive(self, key, doing)

    def busy_error(self, key: ObjectKey, waited_s: float) -> ObjectBusy:
        """Why the object's turn is taken, as the error of a caller that gave up."""
        r = self._residents.get(key)
        doing = r.doing if r is not None else None
        started = self.alarm_started(key)
        since: int | None
        if started is not None and (doing is None or (isinstance(doing, EventKind)
                                    and doing.alarm)):
            what, since = "running its alarm", started
        elif doing is None or r is None:
            what, since = "starting an event", None
        else:
            what = doing.describe() if isinstance(doing, EventKind) else doing
            since = r.since_ms
        age = None if since is None else max(0.0, (self._clock.now_ms() - since) / 1000)
        return ObjectBusy(key[0], key[1], what, age, waited_s)

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
        hurry = patience_left()
        try:
            # Waiting for another event of this object is not work of our own: that
            # event may be sleeping on the clock, and time must be free to move.
            if hurry is None:
                await self._tasks.idle_wait(fut)
            else:
                async with asyncio.timeout(hurry[0]):
                    await self._tasks.idle_wait(fut)
        except BaseException as exc:
            busy = self.busy_error(r.key, hurry[1]) if hurry is not None and isinstance(
                exc, TimeoutError) else None
            if fut.done() and not fut.cancelled():
                self._pass_turn(r)  # handed the turn while being cancelled: pass it on
            self._leave(r)
            if busy is not None:
                raise busy from None
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
        r.owner = r.doing = None
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

    def storage_of(self, r: Resident) -> Storage:
        """The object's storage (made without I/O; its database opens on first use)."""
        if r.storage is None:
            r.storage = Storage(r.key, self._store_opener, self._alarms, self._preserve_alarm)
            r.tenure = None if self.tenure is None else self.tenure(r.key)
        return r.storage

    def _stale(self, r: Resident) -> bool:
        """Whether the object was woken under an earlier lease of its shard: another node
        (or an earlier run of this one) may have run its events since."""
        return self.tenure is not None and r.storage is not None and \
            r.tenure != self.tenure(r.key)

    async def fresh_storage(self, r: Resident) -> Storage:
        """`storage_of` for an event (its turn held): an object woken under an earlier
        lease of its shard is dropped first, and built again from the disk. Its
        instance and its cached alarm intent may predate another node's commits: an
        intent read from them would tell its code a wrong alarm, and the dispatcher
        would take that other node's alarm row for one never committed and delete it."""
        if self._stale(r):
            storage, r.storage = r.storage, None
            if r.instance is not None:
                self._evict(r)
            assert storage is not None
            await storage.close()
        return self.storage_of(r)

    async def wake(self, r: Resident) -> DurableObject:
        """The live instance, constructing it (and running its blockers) if needed."""
        if r.instance is not None:
            return r.instance
        cls_name, name = r.key
        cls = self._classes[cls_name]
        storage = self.storage_of(r)
        ctx = ObjectContext(cls_name, name, storage, self._clock, self.sockets, self._tasks)
        r.ctx = ctx
        instance = cls(ctx, self._env)
        if ctx.blocked:
            await ctx.drain_blockers()
        r.instance = instance
        self._live += 1
        if self._events.active:
            # The runtime's own doing, not the event's output: it need not wait for the
            # event's commit.
            self._events.deliver("object.woke", {"object": f"{cls_name}/{name}"})
        if self._live > self._max_resident or self._deadline is None:
            self._wakeup.poke()
        return instance

    async def run_event(self, key: ObjectKey, body: Body,
                        kind: EventKind | None = None) -> EventOutcome:
        """Run one event of the object: take its turn, wake it, run `body`, make the
        event durable (the output gate), then let its output out. The one way any
        event (a call, an alarm attempt, a socket event) reaches an object.

        Returns what happened; raises only when nothing of the event was kept (its
        commit failed) or it was cancelled (then nothing was kept either, as after a
        crash)."""
        r, ready = self.enter(key)
        if not ready:
            if getattr(kind, "interrupts", False) and isinstance(r.doing, EventKind):
                assert kind is not None
                r.doing.interrupt(f"interrupted by a call to {kind.method}() that does not "
                                  "wait for it")
            await self.turn(r)
        try:
            return await self.run_in_turn(r, body, kind or CALL)
        finally:
            self.leave_turn(r)

    async def run_in_turn(self, r: Resident, body: Body, kind: EventKind) -> EventOutcome:
        """`run_event` for a caller that holds the object's turn already."""
        if self.may_run is not None and not self.may_run(r.key):
            raise ShardMoved(f"{r.key[0]}/{r.key[1]}: this node no longer runs the object's "
                             "shard (handed over, or its lease ran out before it could be "
                             "renewed: PostgreSQL unreachable, or the node paused); the event "
                             "did not run here")
        storage = await self.fresh_storage(r)
        lease = EVENT_LEASE.set(None if r.tenure is None else (r.key, r.tenure))
        r.doing, r.since_ms = kind, self._clock.now_ms()
        hooks = self.hooks
        started = self._event_started(r, kind) if hooks.on_object_event_start or \
            hooks.on_object_event_end else None
        try:
            box = Outbox()
            token = outbox.CURRENT.set(box)
            value: Any = None
            error: BaseException | None = None
            try:
                # Wake and run; the blockers it started end before it counts as done. A
                # raise is the event's outcome (its writes are kept).
                try:
                    with kind.limit():
                        instance = r.instance if r.instance is not None else \
                            await self.wake(r)
                        storage.begin_event(self._clock.now_ms(), kind.alarm)
                        value = await body(instance)
                except Exception as exc:
                    error = exc
                except BaseException as exc:
                    # SystemExit, KeyboardInterrupt, a CancelledError of its own: its
                    # failure, like any raise. A cancel of this task cuts the event off.
                    if cut_off(exc):
                        raise
                    error = exc
                finally:
                    if r.ctx is not None and r.ctx.blocked:
                        await r.ctx.drain_blockers()
                index_failed = await storage.commit_event(kind.end(error))
            except BaseException as exc:
                # Nothing of the event was kept (its commit failed), or it was cut off
                # (cancelled: as after a crash, and a commit cut off midway may or may
                # not have landed). Its output is dropped, and what the instance and the
                # storage hold in memory may disagree with the disk: the object is reset
                # and the next event builds it again from what is on disk.
                box.drop()
                if started is not None:
                    self._event_ended(started, hook_info.Outcome.ABANDONED, exc)
                if isinstance(exc, asyncio.CancelledError):
                    await storage.abandon()
                if r.instance is not None:
                    self._evict(r)
                raise
            finally:
                outbox.CURRENT.reset(token)
            if box.sends:
                await box.release(self._events.deliver)
            elif box.events:
                box.announce(self._events.deliver)
            else:
                box.closed = True
            if box.after is not None:
                box.run_after(True)
            if started is not None:
                self._event_ended(started, hook_info.Outcome.OK if error is None
                                  else hook_info.Outcome.ERROR, error)
            return value, error, index_failed
        finally:
            EVENT_LEASE.reset(lease)
            if r.instance is None and storage.is_open:
                await storage.close()  # its wake failed: no instance will close it

    def _event_started(self, r: Resident, kind: EventKind) -> hook_info.ObjectEventInfo:
        carried = INCOMING.get()
        if carried is not None:
            INCOMING.set(None)  # this event's, not that of the calls it makes in turn
        info = hook_info.ObjectEventInfo(r.key[0], r.key[1], kind.event, kind.method,
                                         r.since_ms, carried)
        self.hooks.fire(self.hooks.on_object_event_start, info)
        return info

    def _event_ended(self, start: hook_info.ObjectEventInfo, outcome: hook_info.Outcome,
                     error: BaseException | None) -> None:
        self.hooks.fire(self.hooks.on_object_event_end, hook_info.ObjectEventEndInfo(
            start, outcome, self._clock.now_ms(), error))

    async def close_if_idle(self, r: Resident) -> None:
        """Close the database of an object that was looked at but not woken (the
        dispatcher read its intent and ran nothing): no instance will close it."""
        if r.instance is None and r.storage is not None and r.storage.is_open:
            await r.storage.close()

    async def _open_store(self, key: ObjectKey, create: bool,
                          intent: tuple[int, int | None]) -> ObjectStore | None:
        """Open the object's database; a damaged or quarantined one is announced."""
        cls_name, name = key
        r = self._residents.get(key)
        try:
            return await self._backend.open_object(cls_name, name, create, intent,
                                                   None if r is None else r.tenure)
        except StorageError as exc:
            if not isinstance(exc, OutOfDescriptors) and out_of_descriptors(exc):
                raise self._out_of_descriptors(key, exc) from exc
            moved = getattr(exc, "quarantined_to", None)
            self._events.emit("storage.quarantined" if moved else "storage.failed", {
                "object": f"{cls_name}/{name}", "file": exc.path, "quarantined_to": moved,
                "error": str(exc)})
            raise

    def _out_of_descriptors(self, key: ObjectKey, exc: StorageError) -> OutOfDescriptors:
        """The error of an event whose database could not open for want of descriptors,
        logged (at most one line per few seconds, with how many were not logged): this
        is the process's limit, not the object's fault, and must not pass unseen."""
        obj = f"{key[0]}/{key[1]}"
        error = OutOfDescriptors(
            f"cannot open the database of {obj}: this process has no file descriptor left "
            f"(too many open files); the event failed and kept nothing. Lower max_resident "
            f"(now {self._max_resident}) or raise ulimit -n", exc.path)
        self._events.emit("storage.failed", {"object": obj, "file": exc.path,
                                             "quarantined_to": None, "error": str(error)})
        now = time.monotonic()
        if now - self._emfile_logged >= EMFILE_LOG_EVERY_S:
            more = self._emfile_unlogged
            self._emfile_logged, self._emfile_unlogged = now, 0
            log.error("%s%s", error, f" ({more} more events failed the same way since the "
                      "last line)" if more else "")
        else:
            self._emfile_unlogged += 1
        return error

    async def read_intent(self, key: ObjectKey, row_intent: Intent) -> Intent:
        """The committed intent of an object, without waking it: from its open storage
        (the cache equals the disk), else from its database, else `row_intent`."""
        r = self._residents.get(key)
        if r is not None and r.storage is not None and r.storage.is_open and not self._stale(r):
            return await r.storage.load_intent()
        store = await self._open_store(key, False, row_intent)
        if store is None:
            return row_intent
        try:
            return Intent(*await store.read_intent())
        finally:
            await store.close()

    async def release(self, which: Callable[[ObjectKey], bool]) -> None:
        """Hibernate the objects `which` picks (their shard moved to another node): their
        next event runs there. One busy with an event ends it; its commit is fenced out."""
        for key in [k for k in self._residents if which(k)]:
            await self.hibernate(key)

    # -- hibernation ----------------------------------------------------------------------

    async def hibernate(self, key: ObjectKey) -> bool:
        done = self._hibernate_now(key)
        if done is not None:
            return done
        async with self.exclusive(key, "hibernating") as r:
            if r.instance is None:
                return False
            if r.storage is not None:
                await r.storage.close()
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
        if r.storage is not None and r.storage.is_open:
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

    __slots__ = ("_doing", "_host", "_key", "_r")

    def __init__(self, host: ObjectHost, key: ObjectKey, doing: str) -> None:
        self._host = host
        self._key = key
        self._doing = doing
        self._r: Resident | None = None

    async def __aenter__(self) -> Resident:
        host = self._host
        r, ready = host.enter(self._key)
        if not ready:
            await host.turn(r)
        r.doing, r.since_ms = self._doing, host._clock.now_ms()
        self._r = r
        return r

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        r, self._r = self._r, None
        assert r is not None
        self._host.leave_turn(r)
