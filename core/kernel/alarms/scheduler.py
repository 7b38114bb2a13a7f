"""The async driver of alarms: keeps the due window, fires, records outcomes.

Decisions come from `policy` (pure); this module applies them: each transition
is written to the alarm index (durable, group-committed) before its effect is
visible, then the window and the event bus learn of it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import random
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from alarmtop.core.kernel.events import EventBus
from alarmtop.core.kernel.supervisor import Supervisor, Wakeup
from alarmtop.core.model import alarm_intent, alarm_pause, alarm_policy
from alarmtop.core.model.alarm_policy import AlarmKey, AlarmRecord, AlarmState, RetryPolicy
from alarmtop.core.model.due_window import DueWindow
from alarmtop.core.model.errors import LeaseLost
from alarmtop.core.model.log_records import (
    ALARM_LOG,
    NAMED_DEAD_LETTERS,
    alarm_failed_message,
    dead_letters_message,
    log_event,
)
from alarmtop.core.model.object_names import object_file_name
from alarmtop.core.ports import AlarmRows, Clock, ExtraWrite, RuntimeDatabase

_PENDING = object()


class Firing(Protocol):
    """What runs a due alarm's attempt (`attempt.AlarmDispatcher`)."""

    async def fire(self, rec: AlarmRecord) -> None:
        """Run the attempt of a due record, as an event of its object."""
        ...

    async def intent_of(self, rec: AlarmRecord) -> alarm_intent.Intent:
        """The object's committed alarm intent (its database, or its row)."""
        ...

    def in_turn(self, key: AlarmKey) -> AbstractAsyncContextManager[Any]:
        """Hold the object's turn, without waking it."""
        ...

# The paused alarms this node runs, with since when: (key, paused_ms).
PausedOf = Callable[[], Awaitable[list[tuple[AlarmKey, int]]]]


class AlarmScheduler:
    def __init__(self, database: RuntimeDatabase, rows: AlarmRows, clock: Clock,
                 events: EventBus,
                 policy_for: Callable[[str], RetryPolicy], tasks: Supervisor, *,
                 max_concurrent: int,
                 window_size: int, sweep_interval_s: float,
                 rng: random.Random | None = None, keep_attempts: int = alarm_policy.DEFAULT_KEEP,
                 paused_of: PausedOf | None = None,
                 once: Callable[[str, int], Awaitable[bool]] | None = None) -> None:
        self.rows = rows
        # In a fleet: whether this node does a thing the whole fleet does once.
        self.once = once
        self._submit = database.submit
        self._object_write = rows.object_write
        self._clock = clock
        self._supervisor = tasks
        self._events = events
        self.policy_for = policy_for
        self.rng = rng or random.Random()
        self._max_concurrent = max_concurrent
        self._sweep_interval_ms = round(sweep_interval_s * 1000)
        self.window = DueWindow(window_size)
        self._wakeup = Wakeup(clock, tasks.tracker)
        self._inflight: set[asyncio.Task[None]] = set()  # the workers
        # Commits of alarms due before this wake the loop (see _due_changed): the time it
        # sleeps until, +inf when it sleeps with nothing due, -inf while it needs no poke.
        self._poke_before: float = -math.inf
        self._loading = False
        self._changed: dict[AlarmKey, Any] = {}
        self._firing: Firing | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.draining = False  # stopping: no attempt starts any more
        self.keep_attempts = keep_attempts
        # Attempts in flight (their rows are 'running'), and rows whose attempt's end is
        # being recorded again after a failed write.
        self.running: dict[AlarmKey, int] = {}  # key: when its attempt started
        self._ends: dict[AlarmKey, int] = {}  # key: how many of its attempts ended here
        self._repairs: set[AlarmKey] = set()
        # Classes with at least one object that has a database: objects of the others
        # certainly have none, so their intent is their row and no file is looked for.
        self._file_classes: set[str] = set()
        # Paused alarms (since when), as of the writes submitted so far: a write made
        # from a record that did not know of the pause (an object's new alarm, built
        # without reading its row) keeps it (`pause.carry`). Paused rows are never due,
        # so the window never holds them: this is where they are known.
        self._paused_of = paused_of
        self.paused: dict[AlarmKey, int] = {}

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self, firing: Firing) -> None:
        """Recover attempts cut short by a crash, load the window, start firing: each due
        alarm goes to `firing.fire`. `firing.intent_of(record)` reads the object's
        committed intent (its database, or the row itself): an attempt cut short may
        have committed a new one; `firing.in_turn(key)` holds the object's turn."""
        self._firing = firing
        self.draining = False
        self._file_classes = set(await self.rows.object_classes())
        await self._load_paused()
        await self._recover_crashed()
        await self._refill()
        self._tasks = [self._supervisor.spawn(self._loop(), name="alarm-scheduler"),
                       self._supervisor.spawn(self._sweep_loop(), name="alarm-sweeper")]

    async def _end_loops(self) -> None:
        """No attempt starts any more: the loop and the sweeper end, workers stop pulling."""
        self.draining = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def drain(self, within_s: float) -> None:
        """Start no new attempt, and wait (at most `within_s`) for those in flight to
        end: what `stop` then cancels is only what outlived that."""
        await self._end_loops()
        if self._inflight and within_s > 0:
            await asyncio.wait(set(self._inflight), timeout=within_s)

    async def stop(self) -> None:
        await self._end_loops()
        # In-flight handlers are cut short; their 'running' rows make the next start
        # count them as crashed attempts, exactly as after a real crash.
        for task in list(self._inflight):
            task.cancel()
        await asyncio.gather(*self._inflight, return_exceptions=True)

    async def _load_paused(self) -> None:
        if self._paused_of is not None:
            self.paused = dict(await self._paused_of())

    async def _recover_crashed(self) -> None:
        while True:
            # Not the attempts of this runtime: on a fleet this runs again whenever the
            # node gains shards, while its own handlers run on the shards it kept. One
            # that ended after the read left a stale 'running' row in `running`.
            ends = dict(self._ends)
            running = [rec for rec in await self.rows.in_state(AlarmState.RUNNING.value,
                                                                1000, mine=True)
                       if not self._ran_here(rec.key, ends)]
            if not running:
                return
            lost = 0
            for rec in running:
                if self._ran_here(rec.key, ends):
                    continue
                try:
                    await self.recover(rec, "the runtime stopped while the handler ran "
                                            "(crash or shutdown)")
                except LeaseLost:
                    # On a fleet: its shard went to another node meanwhile (start-up
                    # and gains race the other nodes' claims), which recovers it.
                    lost += 1
            if lost == len(running):
                return  # nothing recovered: reading again would find the same rows

    def _ran_here(self, key: AlarmKey, ends: dict[AlarmKey, int]) -> bool:
        """An attempt of this runtime for `key` runs, has its end being recorded, or
        ended since `ends` was taken."""
        return key in self.running or key in self._repairs or \
            self._ends.get(key) != ends.get(key)

    async def recover(self, rec: AlarmRecord, error: str) -> AlarmRecord | None:
        """An attempt left `running` with nobody running it: a failed attempt, retried.

        In the object's turn (`Firing.in_turn`), from its row read again there: an event of
        the object (on a fleet, one on the node that just gained its shard) may have
        set a new alarm since `rec` was read. Written from `rec`, the retry would put
        the row back over that alarm, later than the object's own, which then never
        fired."""
        firing = self._firing
        assert firing is not None, "the scheduler is started with its attempt runner"
        async with firing.in_turn(rec.key):
            current = await self.rows.get(rec.key)
            if current is None or current.state is not AlarmState.RUNNING or \
                    current.started_ms != rec.started_ms or rec.key in self.running:
                return current  # moved on meanwhile: nothing of it is left to recover
            return await self._recover(current, error)

    async def _recover(self, rec: AlarmRecord, error: str) -> AlarmRecord | None:
        assert self._firing is not None
        intent = await self._firing.intent_of(rec)
        tr = alarm_intent.recover(rec, intent, self._clock.now_ms(), error,
                       self.policy_for(rec.object_class), self.keep_attempts)
        out = await self.commit(rec.key, tr)
        self.log_failure(rec, error, crashed=True)
        return out

    # -- shards held (a fleet) ------------------------------------------------------------

    def forget(self, lost: Callable[[AlarmKey], bool]) -> None:
        """Stop running the alarms of objects this node no longer holds (an attempt in
        flight ends as it will: its writes are fenced out)."""
        self.window.drop(lost)
        for key in [k for k in self.paused if lost(k)]:
            del self.paused[key]

    async def reload(self) -> None:
        """This node holds more shards: their attempts cut short count as crashed, and the
        window is loaded again to take in their alarms."""
        await self._load_paused()
        await self._recover_crashed()
        self.window.unload()
        self._wakeup.poke()

    # -- attempts in flight ---------------------------------------------------------------

    def attempt_started(self, key: AlarmKey) -> None:
        """An attempt is in flight (set before its row says 'running')."""
        self.running[key] = self._clock.now_ms()

    def attempt_ended(self, key: AlarmKey) -> None:
        self.running.pop(key, None)
        self._ends[key] = self._ends.get(key, 0) + 1

    def put_back(self, rec: AlarmRecord) -> None:
        """A popped record that was not due after all goes back in the window."""
        if self.still_current(rec) or rec.key not in self.window.records:
            self.window.put(rec)
            self._due_changed(rec)

    def repair_later(self, started: AlarmRecord, error: str) -> None:
        """The end of an attempt could not be recorded: retry recording it as a crashed
        attempt (retried, counted), with backoff, until it lands or the row moved on."""
        if started.key in self._repairs:
            return
        self._repairs.add(started.key)
        self._supervisor.spawn(self._repair(started, error), name="alarm-repair")

    async def _repair(self, started: AlarmRecord, error: str) -> None:
        wait_s = 0.0
        try:
            while True:
                if wait_s:
                    await self._clock.sleep(wait_s)
                current = await self.lookup(started.key)
                if current is None or current.state is not AlarmState.RUNNING or \
                        current.started_ms != started.started_ms or started.key in self.running:
                    return  # something else moved the row on
                try:
                    await self.recover(current, error)
                    return
                except Exception as exc:
                    logging.getLogger("alarmtop.runtime").warning(
                        "cannot record the end of %s/%s's attempt yet (%s); trying again",
                        started.key[0], started.key[1], exc)
                wait_s = min(60.0, max(1.0, wait_s * 2))
        finally:
            self._repairs.discard(started.key)

    # -- state changes --------------------------------------------------------------------

    def may_have_file(self, key: AlarmKey) -> bool:
        return key[0] in self._file_classes

    def peek(self, key: AlarmKey) -> AlarmRecord | None:
        """The record if the window holds it (None: not known without a read)."""
        return self.window.records.get(key)

    async def lookup(self, key: AlarmKey) -> AlarmRecord | None:
        rec = self.window.records.get(key)
        if rec is not None:
            return rec
        return await self.rows.get(key)

    async def commit(self, key: AlarmKey, tr: alarm_policy.Transition | None,
                     extra: ExtraWrite | None = None, final: bool = False, *,
                     resume: bool = False) -> AlarmRecord | None:
        """Make a transition durable, then visible (window, events, wake the loop).

        `extra` (other tables of the runtime database) commits in the same transaction;
        with no transition, `extra` alone is written and the row is left as it is.
        `final`: this write is an object event's commit or follows it, so what it
        announces leaves at once (an earlier write's announcements wait in the event's
        outbox until the object has committed). `resume`: this write lifts a pause (it
        is the one write a pause is not carried over).
        """
        if tr is None:
            if extra is not None:
                await self._submit((), (), extra)
            return await self.lookup(key)
        tr, was = self._held(key, tr, resume)
        if self._loading:
            self._changed[key] = _PENDING
        rec = tr.record
        try:
            fut = self._submit((), (key,), extra) if rec is None else \
                self._submit((rec,), (), extra)
        except BaseException:
            self._unheld(key, was)
            raise
        try:
            await fut
        except asyncio.CancelledError:
            # The writer is cut off, the write goes on: when it lands the window must
            # learn of it all the same, or it would be behind the disk.
            if not fut.done():
                fut.add_done_callback(functools.partial(self._landed, [(key, tr, was)],
                                                        final))
            elif not fut.cancelled() and fut.exception() is None:
                self._apply(key, tr, final)
            else:
                self._unheld(key, was)
            raise
        except BaseException:
            self._unheld(key, was)
            raise
        self._apply(key, tr, final)
        return rec

    def _held(self, key: AlarmKey, tr: alarm_policy.Transition,
              resume: bool = False) -> tuple[alarm_policy.Transition, int | None]:
        """The write as it goes out (a paused alarm stays paused, unless this is its
        resume), and the pause known before it. The pause is noted when the write is
        queued, not when it lands: any write queued after it keeps it."""
        paused = self.paused
        if not paused and (tr.record is None or tr.record.paused_ms is None):
            return tr, None  # nothing is paused: the path of every firing
        was = paused.get(key)
        if not resume:
            tr = alarm_pause.carry(tr, was)
        rec = tr.record
        if rec is None or rec.paused_ms is None:
            paused.pop(key, None)
        else:
            paused[key] = rec.paused_ms
        return tr, was

    def _unheld(self, key: AlarmKey, was: int | None) -> None:
        """A write that did not land: the pause is as it was before it."""
        if was is None:
            self.paused.pop(key, None)
        else:
            self.paused[key] = was

    async def commit_many(self, changes: Sequence[tuple[AlarmKey, alarm_policy.Transition]],
                          extra: ExtraWrite | None = None,
                          resumes: frozenset[AlarmKey] = frozenset()) -> None:
        """Make several transitions durable in one write, with `extra` (the bulk
        actions' item rows and audit), then visible; as `commit` does for one (the keys
        in `resumes` lift their pause)."""
        held: list[tuple[AlarmKey, alarm_policy.Transition, int | None]] = []
        for key, tr in changes:
            out, was = self._held(key, tr, key in resumes)
            held.append((key, out, was))
        puts = [tr.record for _, tr, _ in held if tr.record is not None]
        deletes = [key for key, tr, _ in held if tr.record is None]
        if self._loading:
            for key, _, _ in held:
                self._changed[key] = _PENDING
        fut = self._submit(puts, deletes, extra)
        try:
            await fut
        except asyncio.CancelledError:
            if not fut.done():  # the write goes on: the window learns of it when it lands
                fut.add_done_callback(functools.partial(self._landed, held, True))
            else:
                self._landed(held, True, fut)
            raise
        except BaseException:
            for key, _, was in reversed(held):
                self._unheld(key, was)
            raise
        for key, tr, _ in held:
            self._apply(key, tr, True)

    def _landed(self, held: list[tuple[AlarmKey, alarm_policy.Transition, int | None]], final: bool,
                fut: asyncio.Future[None]) -> None:
        ok = not fut.cancelled() and fut.exception() is None
        for key, tr, was in held:
            if ok:
                self._apply(key, tr, final)
            else:
                self._unheld(key, was)

    def _apply(self, key: AlarmKey, tr: alarm_policy.Transition, final: bool = False) -> None:
        """A transition is durable: the window, the bus and the loop learn of it."""
        rec = tr.record
        if rec is None:
            self.window.remove(key)
        else:
            self.window.put(rec)
        if self._loading:
            self._changed[key] = rec
        events = self._events
        if events.active:
            announce = events.deliver if final else events.emit
            for ann in tr.events:
                announce(ann.type, ann.data)
        if rec is not None:
            self._due_changed(rec)

    def _due_changed(self, rec: AlarmRecord) -> None:
        """Wake the loop if `rec` falls due before the time it sleeps until.

        Most commits (an attempt starting, or ending with its alarm gone) change nothing
        the loop waits for; waking it for each would cost a loop pass per commit."""
        if rec.state is not AlarmState.RUNNING:
            due = rec.due_ms
            if due is not None and due < self._poke_before:
                self._wakeup.poke()

    async def note_file(self, key: AlarmKey) -> None:
        """Before an object's database is created: its row (if any) says its intent may
        live there, and the object is listed, in one commit."""
        self._file_classes.add(key[0])  # before the write: from now on, files are looked for
        rec = await self.lookup(key)
        write = self._object_write(key, object_file_name(key[1]), self._clock.now_ms())
        if rec is None or rec.in_file:
            await self._submit((), (), write)
        else:
            await self.commit(key, alarm_policy.Transition(rec._replace(in_file=True)), write)

    async def undo(self, key: AlarmKey, written: AlarmRecord | None,
                   previous: AlarmRecord | None) -> None:
        """Take back a write made for an event whose commit then failed, if nothing
        changed the row since; never raises (the row left is early, reconciled later)."""
        current = await self.lookup(key)
        if written is None or current != written:
            return
        restore = alarm_policy.Transition(previous)
        try:
            await self.commit(key, restore)
        except Exception as exc:
            logging.getLogger("alarmtop.runtime").warning(
                "could not take back the wake hint of %s/%s after its event failed (%s); it "
                "is reconciled when it falls due", key[0], key[1], exc)

    # -- the firing loop ------------------------------------------------------------------

    async def _refill(self) -> None:
        self._loading, self._changed = True, {}
        try:
            want = max(self.window.capacity - len(self.window), self.window.capacity // 4)
            rows, complete = await self.rows.due_after(self.window.horizon_ms, want)
            changed = self._changed
            self.window.load(rows, complete, skip=set(changed))
            for key, rec in changed.items():
                if rec is None:
                    self.window.remove(key)
                elif rec is not _PENDING:
                    self.window.put(rec)
        finally:
            self._loading, self._changed = False, {}

    async def _loop(self) -> None:
        window, clock, inflight, spawn = (self.window, self._clock, self._inflight,
                                          self._supervisor.spawn)
        while True:
            if window.horizon_ms != math.inf and (
                    window.needs_refill() or window.next_due_ms() is None):
                await self._refill()
            window.shrink()
            now = clock.now_ms()
            while len(inflight) < self._max_concurrent:
                rec = window.pop_one(now)
                if rec is None:
                    break
                inflight.add(spawn(self._work(rec), name="alarm"))
            if len(inflight) >= self._max_concurrent:
                # The workers take whatever falls due meanwhile; one that runs out of
                # due alarms ends and pokes.
                self._poke_before = -math.inf
                await self._wakeup.wait(None)
            else:
                nxt = window.next_due_ms()
                if nxt is not None and nxt <= clock.now_ms():
                    continue
                self._poke_before = math.inf if nxt is None else nxt
                await self._wakeup.wait(nxt)
            self._poke_before = -math.inf  # awake: the next pass reads the window anyway

    async def _work(self, rec: AlarmRecord) -> None:
        """A worker: fire `rec`, then whatever else is due, until nothing is.

        Workers pull due alarms themselves, so a burst costs no task and no loop pass
        per alarm; the loop only starts workers (up to `max_concurrent`), sleeps until
        the next due time and refills the window."""
        assert self._firing is not None
        fire, window, clock = self._firing.fire, self.window, self._clock
        try:
            while True:
                try:
                    await fire(rec)
                except Exception as exc:
                    self._dispatch_failed(rec, exc)
                if window.needs_refill() and not self._loading:
                    self._wakeup.poke()
                if self.draining:
                    return
                nxt = window.pop_one(clock.now_ms())
                if nxt is None:
                    return
                rec = nxt
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._inflight.discard(task)
            self._wakeup.poke()

    def _dispatch_failed(self, rec: AlarmRecord, exc: Exception) -> None:
        # The attempt could not even be recorded (e.g. the disk is full): the alarm is
        # still due; try again a second later rather than drop it until restart.
        log = logging.getLogger("alarmtop.runtime")
        if isinstance(exc, LeaseLost):
            # A fleet's shard moved between the pop and the attempt's write: nothing
            # was kept, the row is the new owner's, and this node lets go of the
            # shard's alarms when its lease round sees it. No fault of the code here.
            log.warning("alarm of %s/%s not run here: %s", rec.object_class,
                        rec.object_name, exc)
        else:
            log.exception("alarm of %s/%s not run: its attempt could not be recorded "
                          "(%s: %s); trying again in 1 s", rec.object_class,
                          rec.object_name, type(exc).__name__, exc)
        self.later(rec, 1000)

    def later(self, rec: AlarmRecord, ms: int) -> None:
        """A popped alarm that cannot run now is looked at again in `ms` (its row is
        unchanged: only this node's window holds the later time)."""
        due = self._clock.now_ms() + ms
        if self.window.defer(rec, due) and due < self._poke_before:
            self._wakeup.poke()

    def still_current(self, rec: AlarmRecord) -> bool:
        """Whether a popped alarm was left alone while it waited for its object."""
        return self.window.records.get(rec.key) is rec

    # -- the sweeper ----------------------------------------------------------------------

    async def _sweep_loop(self) -> None:
        wake = Wakeup(self._clock, self._supervisor.tracker)
        while True:
            await wake.wait(self._clock.now_ms() + self._sweep_interval_ms)
            await self.sweep()

    async def sweep(self) -> int:
        """Catch overdue alarms the window missed; remind about dead letters."""
        now = self._clock.now_ms()
        found = 0
        for rec in await self.rows.in_state(AlarmState.RUNNING.value, 1000, mine=True):
            # 'running' with nobody running it: its end was never recorded.
            if rec.key not in self.running and rec.key not in self._repairs:
                self.repair_later(rec, "the end of the attempt was never recorded")
        for rec in await self.rows.overdue(now - 1000, 1000):
            if (rec.state is AlarmState.RUNNING or rec.key in self.window.records
                    or not self.window.covers(rec.due_ms)):
                continue  # in flight, already known, or the next refill brings it
            self.window.put(rec)
            found += 1
        if found:
            self._events.emit("alarm.swept", {"requeued": found})
            self._wakeup.poke()
        dead = (await self.rows.counts()).get(AlarmState.DEAD.value, 0)
        if dead and await self._remind_here(now):
            named = [f"{r.object_class}/{r.object_name}" for r in
                     await self.rows.in_state(AlarmState.DEAD.value, NAMED_DEAD_LETTERS)]
            log_event(ALARM_LOG, logging.WARNING, dead_letters_message(dead, named),
                      event="alarm.dead_letters", count=dead, objects=named)
            self._events.emit("alarm.dead_letters", {"count": dead})
        return found

    async def _remind_here(self, now: int) -> bool:
        """The dead-letter count is the fleet's: one node a sweep period says it."""
        if self.once is None:
            return True
        period = max(1, self._sweep_interval_ms)
        try:
            return await self.once("alarm.dead_letters", now // period * period)
        except Exception:
            return False  # the reminder comes again next sweep

    def log_failure(self, rec: AlarmRecord, error: str, crashed: bool = False) -> None:
        pol = self.policy_for(rec.object_class)
        last = rec.retry_count + 1 > pol.max_retries
        obj = f"{rec.object_class}/{rec.object_name}"
        message = alarm_failed_message(obj, rec.retry_count + 1, pol.max_retries + 1, error, last)
        log_event(ALARM_LOG, logging.ERROR if last else logging.WARNING, message,
                  event="alarm.failed", object=obj,
                  object_class=rec.object_class, object_name=rec.object_name,
                  retry_count=rec.retry_count, max_retries=pol.max_retries,
                  last_attempt=last, error=error, crashed=crashed)
