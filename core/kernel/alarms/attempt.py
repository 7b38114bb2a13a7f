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
import traceback
from collections.abc import Awaitable
from contextlib import AbstractAsyncContextManager
from typing import Any

from alarmtop.core.kernel.alarms.scheduler import AlarmScheduler
from alarmtop.core.kernel.clock import Deadlines, Limit
from alarmtop.core.kernel.faults import FaultRegistry, InjectedFault
from alarmtop.core.kernel.hooks import NO_HOOKS, Hooks
from alarmtop.core.kernel.objects.durable_object import AlarmInfo, DurableObject
from alarmtop.core.kernel.objects.host import ObjectHost
from alarmtop.core.kernel.objects.resident import EventKind
from alarmtop.core.kernel.objects.storage import EventEnd, IndexRestoreFailed, Plan, Storage
from alarmtop.core.model import alarm_intent, alarm_policy, hook_info
from alarmtop.core.model.alarm_policy import AlarmKey, AlarmRecord
from alarmtop.core.model.errors import AlarmHandlerTimeout, GiveUp, ShardMoved, StorageError
from alarmtop.core.ports import Clock


def describe_error(exc: BaseException) -> str:
    """`Type: message`, plus where it was raised, kept short for the attempt record."""
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    at = f" (at {where[0].name}:{where[0].lineno})" if where else ""
    return f"{type(exc).__name__}: {exc}{at}"[:2000]


LEASE_RECHECK_MS = 250


class AlarmDispatcher:
    def __init__(self, host: ObjectHost, scheduler: AlarmScheduler, faults: FaultRegistry,
                 clock: Clock, alarm_timeout_s: float, hooks: Hooks = NO_HOOKS) -> None:
        self._host = host
        self._sched = scheduler
        self._faults = faults
        self._clock = clock
        self._timeout_s = alarm_timeout_s
        # Every attempt has the same timeout and nearly all finish long before it: one
        # clock timer for all of them instead of one per attempt.
        self._deadlines = Deadlines(clock, alarm_timeout_s)
        self.hooks = hooks  # the runtime's plugins

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
            if not sched.still_current(rec) or sched.draining:
                # Overwritten or deleted while waiting for the object, or the node is
                # stopping: the row stays as it is, for the next owner or start.
                return
            if host.may_run is not None and not host.may_run(rec.key):
                # This node's lease on the shard may have run out: no handler runs here.
                # Looked at again shortly: by then the lease was renewed, or the shard
                # was lost and the window dropped it.
                sched.later(rec, LEASE_RECHECK_MS)
                return
            now = self._clock.now_ms()
            if rec.in_file or rec.hint_ms is not None or not rec.attempt_due or \
                    (rec.next_attempt_ms or 0) > now:
                # Its intent may say otherwise than the record: read it and reconcile.
                # (An object without a database and without a hint is its own row:
                # nothing to compare, and the attempt is due.)
                checked = await attempt.reconciled(await host.fresh_storage(r), now)
                if checked is None:
                    await host.close_if_idle(r)
                    return
                rec = attempt.rec = checked
            # In flight from before its row says 'running': the sweeper never takes it
            # for an attempt whose end was lost.
            sched.attempt_started(rec.key)
            attempt.registered = True
            started = attempt.started = attempt.row = await sched.commit(
                rec.key, alarm_policy.start_attempt(rec, now))
            assert started is not None
            hooks = self.hooks
            if hooks.on_alarm_attempt_start or hooks.on_alarm_attempt_end:
                attempt.hooked = self._attempt_started(started)
            try:
                _, _, index_failed = await host.run_in_turn(r, attempt.call, attempt)
            except asyncio.CancelledError:
                attempt.report("the runtime stopped during the attempt")
                raise  # the runtime is stopping: the row stays 'running', like a crash
            except ShardMoved as exc:
                await self._withdraw(attempt, started, rec, str(exc))
                return
            except Exception as exc:
                # Nothing of the attempt was kept, its end included: as after a crash.
                sched.repair_later(started, f"the attempt's commit failed: {exc}")
                attempt.report(f"the attempt's commit failed: {exc}")
                return
            if index_failed is not None:
                sched.repair_later(started, "the end of the attempt could not be recorded: "
                                   f"{index_failed}")
                attempt.report(f"the end of the attempt could not be recorded: {index_failed}")
            elif attempt.hooked is not None:
                attempt.report(None)
        finally:
            if attempt.registered:
                sched.attempt_ended(rec.key)
            host.leave_turn(r)

    async def _withdraw(self, attempt: AlarmAttempt, started: AlarmRecord,
                        before: AlarmRecord, why: str) -> None:
        """The shard went between the attempt's start and its handler (a clean hand-over
        began): nothing ran, so the row goes back to how it was. The hand-over waits for
        this write (the attempt is still in flight). A lease that ran out refuses it:
        then the attempt ends as after a crash, as any attempt cut off does."""
        try:
            await self._sched.commit(started.key,
                                     alarm_policy.withdraw_attempt(started, before, why))
        except Exception as exc:
            self._sched.repair_later(started, f"the attempt was cut off before its handler "
                                     f"ran: {why} ({exc})")
        attempt.report(f"handed over before its handler ran: {why}")

    def _attempt_started(self, rec: AlarmRecord) -> hook_info.AlarmAttemptInfo:
        info = hook_info.AlarmAttemptInfo(
            rec.object_class, rec.object_name, rec.scheduled_ms, rec.retry_count,
            self._sched.policy_for(rec.object_class).max_retries,
            rec.started_ms if rec.started_ms is not None else self._clock.now_ms())
        self.hooks.fire(self.hooks.on_alarm_attempt_start, info)
        return info

    async def intent_of(self, rec: AlarmRecord,
                        storage: Storage | None = None) -> alarm_intent.Intent:
        """The object's committed intent for a record (its own row, or its database)."""
        if not rec.in_file:
            return alarm_intent.intent_of_row(rec)
        if storage is not None:
            return await storage.load_intent()
        return await self._host.read_intent(rec.key, alarm_intent.intent_of_row(rec))

    def in_turn(self, key: AlarmKey) -> AbstractAsyncContextManager[Any]:
        """Hold the object's turn without waking it (the scheduler's recovery of an
        attempt cut short must not interleave with the object's events)."""
        return self._host.exclusive(key, "recovering an alarm attempt cut short")

    async def _run_faults(self, rec: AlarmRecord) -> None:
        """Injected faults on this object: a delay before the handler, or a raise instead."""
        target = f"{rec.object_class}/{rec.object_name}"
        delay = self._faults.take(target, "alarm_delay")
        if delay is not None:
            await self._faults.delay(delay, self._clock)  # clearing the fault ends it
        raise_fault = self._faults.take(target, "alarm_raise")
        if raise_fault is not None:
            raise InjectedFault(raise_fault.id, raise_fault.kind, target)


class AlarmAttempt(EventKind):
    """One firing of a record, as the kind of an object event."""

    alarm = True
    event = "alarm"
    method = "alarm"
    __slots__ = ("_d", "_error", "_final", "_limit", "_task", "ended", "hooked", "rec",
                 "registered", "row", "started")

    def __init__(self, dispatcher: AlarmDispatcher, rec: AlarmRecord,
                 task: asyncio.Task[Any]) -> None:
        self._d = dispatcher
        self._task = task
        self.rec = rec
        self.started: AlarmRecord | None = None
        self.row: AlarmRecord | None = None  # the index row during the attempt: `started`
        self.registered = False
        self._limit: Limit | None = None
        self._error: str | None = None
        self._final = False  # the handler gave up (GiveUp): no retry
        self.hooked: hook_info.AlarmAttemptInfo | None = None  # told to the start hook
        self.ended: alarm_policy.Transition | None = None  # the end the commit recorded

    async def reconciled(self, storage: Storage, now: int) -> AlarmRecord | None:
        """The record to run after comparing it with the object's intent; None when
        no handler runs (the record was corrected, or put back)."""
        d, rec, sched = self._d, self.rec, self._d._sched
        try:
            intent = await d.intent_of(rec, storage)
        except IndexRestoreFailed:
            # The runtime database's fault, not the object's: its intent is sound but
            # could not be compared here. Nothing runs; the record is looked at again.
            raise
        except StorageError:
            # The database is damaged, quarantined or unreadable: the attempt goes ahead
            # on the row and fails on that same error, counted, to a dead letter that
            # names the file (rather than being retried unseen forever).
            intent = alarm_intent.intent_of_row(rec)
        if not sched.still_current(rec):
            return None  # changed while the intent was read
        verdict, fixed = alarm_intent.reconcile(rec, intent, now)
        if verdict is alarm_intent.Verdict.WAIT:
            sched.put_back(rec)
            return None
        if verdict is alarm_intent.Verdict.FIX:
            await sched.commit(rec.key, fixed)
            return None
        if fixed is not None and fixed.record is not None:
            return fixed.record
        return rec

    def limit(self) -> Limit:
        lim = self._limit = self._d._deadlines.limit(self._task)
        return lim

    def call(self, instance: DurableObject) -> Awaitable[Any]:
        """The event's body: the handler (a plain call: no coroutine of our own around
        it, on the path of every firing)."""
        started = self.started
        assert started is not None
        if self._d._faults.pending:
            return self._with_faults(instance, started)
        return instance.alarm(AlarmInfo(started.retry_count, started.scheduled_ms))

    async def _with_faults(self, instance: DurableObject, started: AlarmRecord) -> Any:
        await self._d._run_faults(started)
        return await instance.alarm(AlarmInfo(started.retry_count, started.scheduled_ms))

    def end(self, error: BaseException | None) -> EventEnd:
        """The attempt is its own end of event: it knows its record and, now, its error."""
        assert self.started is not None
        if error is not None:
            lim = self._limit
            if isinstance(error, TimeoutError) and lim is not None and lim.expired:
                if lim.interrupted is not None:
                    self._error = f"AlarmHandlerInterrupted: {lim.interrupted}"
                    return self
                error = AlarmHandlerTimeout(*self.started.key, self._d._timeout_s)
            self._error = describe_error(error)
            self._final = isinstance(error, GiveUp)
        return self

    def interrupt(self, why: str) -> bool:
        """End the handler now, as a failed attempt (retried by its policy)."""
        lim = self._limit
        return lim is not None and lim.interrupt(why)

    def plan(self, key: AlarmKey, current: AlarmRecord | None, change: alarm_intent.Intent | None,
             in_file: bool) -> Plan:
        # Nothing goes first: the 'running' row makes a death here an attempt to retry.
        return (None, self._end(change, in_file))

    def _end(self, change: alarm_intent.Intent | None, in_file: bool) -> alarm_policy.Transition:
        """The attempt's end in the index: succeeded, or failed (a retry, a dead letter),
        carrying the intent the handler committed (a new alarm, or none)."""
        d, started = self._d, self.started
        assert started is not None
        now = d._clock.now_ms()
        new_at = change.at_ms if change is not None else None
        gen = change.gen if change is not None else None
        if self._error is None:
            self.ended = alarm_policy.succeed(started, now, new_at, gen, in_file)
            return self.ended
        sched = d._sched
        sched.log_failure(started, self._error)
        self.ended = alarm_policy.fail(started, now, self._error,
                                       sched.policy_for(started.object_class),
                            new_at, sched.rng, gen=gen, keep=sched.keep_attempts,
                            in_file=in_file, final=self._final)
        return self.ended

    def report(self, abandoned: str | None) -> None:
        """Tell the end hook what became of the alarm (`abandoned`: why it is retried
        as after a crash instead)."""
        start, d = self.hooked, self._d
        if start is None or not d.hooks.on_alarm_attempt_end:
            return
        now = d._clock.now_ms()
        if abandoned is not None or self.ended is None:
            info = hook_info.AlarmAttemptEndInfo(start, hook_info.AlarmOutcome.ABANDONED, now,
                                                 abandoned or self._error)
        else:
            rec = self.ended.record
            info = hook_info.AlarmAttemptEndInfo(start, _outcome(rec), now, self._error,
                                                 _next_ms(rec))
        d.hooks.fire(d.hooks.on_alarm_attempt_end, info)


def _outcome(rec: AlarmRecord | None) -> hook_info.AlarmOutcome:
    if rec is None or rec.state is alarm_policy.AlarmState.PENDING:
        return hook_info.AlarmOutcome.OK  # done, or the handler set its next alarm
    if rec.state is alarm_policy.AlarmState.DEAD:
        return hook_info.AlarmOutcome.DEAD
    return hook_info.AlarmOutcome.RETRY_SCHEDULED


def _next_ms(rec: AlarmRecord | None) -> int | None:
    if rec is None or rec.state is alarm_policy.AlarmState.DEAD:
        return None
    return rec.next_attempt_ms
