"""Running one alarm attempt as an event of its object.

Before the handler: the record is checked against the object's intent (a record
the intent has moved on from is corrected and runs nothing), then the attempt's
start is made durable, so a crash during the handler is found at the next start
and counted as an attempt. After it: the object's commit, then the attempt's end
in the index. An end that cannot be recorded is treated like a crash of the
attempt: retried, counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import traceback
from collections.abc import Iterator
from typing import Any

from alarmtop.core.alarms import intent as I
from alarmtop.core.alarms import policy as P
from alarmtop.core.alarms.policy import AlarmKey, AlarmRecord
from alarmtop.core.alarms.scheduler import AlarmScheduler
from alarmtop.core.clock import Clock, Deadlines, Limit
from alarmtop.core.errors import AlarmHandlerTimeout, StorageError
from alarmtop.core.faults import FaultRegistry, InjectedFault
from alarmtop.core.objects.base import AlarmInfo, DurableObject
from alarmtop.core.objects.host import Body, EventKind, ObjectHost, Resident
from alarmtop.core.objects.storage_api import EventEnd, Storage


def describe_error(exc: BaseException) -> str:
    """`Type: message`, plus where it was raised, kept short for the attempt record."""
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    at = f" (at {where[0].name}:{where[0].lineno})" if where else ""
    return f"{type(exc).__name__}: {exc}{at}"[:2000]


async def _alarm(instance: DurableObject) -> Any:
    raise AssertionError("an attempt runs the handler through AlarmAttempt.run")


class AlarmDispatcher:
    def __init__(self, host: ObjectHost, scheduler: AlarmScheduler, faults: FaultRegistry,
                 clock: Clock, alarm_timeout_s: float) -> None:
        self._host = host
        self._sched = scheduler
        self._faults = faults
        self._clock = clock
        self._timeout_s = alarm_timeout_s
        # Every attempt has the same timeout and nearly all finish long before it: one
        # clock timer for all of them instead of one per attempt.
        self._deadlines = Deadlines(clock, alarm_timeout_s)

    async def fire(self, rec: AlarmRecord) -> None:
        sched, host = self._sched, self._host
        if not sched.still_current(rec):
            return
        task = asyncio.current_task()
        assert task is not None
        r, ready = host.enter(rec.key, task)
        if not ready:
            await host.turn(r)
        attempt = AlarmAttempt(self, rec, task)
        try:
            if not sched.still_current(rec):
                return  # overwritten or deleted while waiting for the object
            try:
                out = await host.run_in_turn(r, _alarm, attempt)
            except asyncio.CancelledError:
                raise  # the runtime is stopping: the row stays 'running', like a crash
            except Exception as exc:
                if attempt.started is None:
                    raise  # the start could not be recorded: the scheduler tries again
                # Nothing of the attempt was kept, its end included: as after a crash.
                sched.repair_later(attempt.started, f"the attempt's commit failed: {exc}")
                return
            if out.committed is not None and out.committed.index_failed is not None \
                    and attempt.started is not None:
                sched.repair_later(attempt.started, "the end of the attempt could not be "
                                   f"recorded: {out.committed.index_failed}")
        finally:
            if attempt.registered:
                sched.attempt_ended(rec.key)
            host.leave_turn(r)

    async def intent_of(self, rec: AlarmRecord, storage: Storage | None = None) -> I.Intent:
        """The object's committed intent for a record (its own row, or its database)."""
        if not rec.in_file:
            return I.intent_of_row(rec)
        if storage is not None:
            return await storage.load_intent()
        return await self._host.read_intent(rec.key, I.intent_of_row(rec))

    async def _run_faults(self, rec: AlarmRecord) -> None:
        """Injected faults on this object: a delay before the handler, or a raise instead."""
        target = f"{rec.object_class}/{rec.object_name}"
        delay = self._faults.take(target, "alarm_delay")
        if delay is not None and delay.seconds:
            await self._clock.sleep(delay.seconds)
        raise_fault = self._faults.take(target, "alarm_raise")
        if raise_fault is not None:
            raise InjectedFault(raise_fault.id, raise_fault.kind, target)


class AlarmAttempt(EventKind):
    """One firing of a record, as the kind of an object event."""

    alarm = True
    __slots__ = ("_d", "_limit", "_task", "rec", "registered", "started")

    def __init__(self, dispatcher: AlarmDispatcher, rec: AlarmRecord,
                 task: asyncio.Task[Any]) -> None:
        self._d = dispatcher
        self._task = task
        self.rec = rec
        self.started: AlarmRecord | None = None
        self.registered = False
        self._limit: Limit | None = None

    async def before(self, r: Resident, storage: Storage) -> bool:
        d, rec = self._d, self.rec
        sched, now = d._sched, d._clock.now_ms()
        try:
            intent = await d.intent_of(rec, storage)
        except StorageError:
            # The database is damaged, quarantined or unreadable: the attempt goes ahead
            # on the row and fails on that same error, counted, to a dead letter that
            # names the file (rather than being retried unseen forever).
            intent = I.intent_of_row(rec)
        if not sched.still_current(rec):
            return False  # changed while the intent was read
        verdict, fixed = I.reconcile(rec, intent, now)
        if verdict is I.Verdict.WAIT:
            sched.put_back(rec)
            return False
        if verdict is I.Verdict.FIX:
            await sched.commit(rec.key, fixed)
            return False
        if fixed is not None and fixed.record is not None:
            rec = self.rec = fixed.record
        # In flight from before its row says 'running': the sweeper never takes it for
        # an attempt whose end was lost.
        sched.attempt_started(rec.key, None)
        self.registered = True
        self.started = await sched.commit(rec.key, P.start_attempt(rec, now))
        sched.attempt_started(rec.key, self.started)
        return True

    @contextlib.contextmanager
    def limit(self) -> Iterator[None]:
        lim = self._limit = self._d._deadlines.limit(self._task)
        with lim:
            yield

    async def run(self, body: Body, instance: DurableObject) -> Any:
        d, started = self._d, self.started
        assert started is not None
        if d._faults.pending:
            await d._run_faults(started)
        return await instance.alarm(AlarmInfo(started.retry_count, started.scheduled_ms))

    def end(self, error: BaseException | None) -> EventEnd:
        assert self.started is not None
        text = None
        if error is not None:
            if isinstance(error, TimeoutError) and self._limit is not None \
                    and self._limit.expired:
                error = AlarmHandlerTimeout(*self.started.key, self._d._timeout_s)
            text = describe_error(error)
        return AttemptEnd(self._d, self.started, text)


class AttemptEnd:
    """The attempt's end in the index: succeeded, or failed (a retry, a dead letter),
    carrying the intent the handler committed (a new alarm, or none)."""

    __slots__ = ("_d", "_error", "_started")

    def __init__(self, dispatcher: AlarmDispatcher, started: AlarmRecord,
                 error: str | None) -> None:
        self._d = dispatcher
        self._started = started
        self._error = error

    def plan(self, key: AlarmKey, current: AlarmRecord | None, change: I.Intent | None,
             in_file: bool) -> I.CommitPlan:
        # Nothing goes first: the 'running' row makes a death here an attempt to retry.
        return I.CommitPlan(None, self._end(change, in_file))

    def _end(self, change: I.Intent | None, in_file: bool) -> P.Transition:
        d, started = self._d, self._started
        now = d._clock.now_ms()
        new_at = change.at_ms if change is not None else None
        gen = change.gen if change is not None else None
        if self._error is None:
            return P.succeed(started, now, new_at, gen, in_file)
        sched = d._sched
        sched.log_failure(started, self._error)
        return P.fail(started, now, self._error, sched.policy_for(started.object_class),
                      new_at, sched.rng, gen=gen, keep=sched.keep_attempts, in_file=in_file)
