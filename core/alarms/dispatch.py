"""Running one alarm attempt: lock the object, record the start, run, record the end.

The start of an attempt is durable before the handler runs, so a crash during the
handler is found at the next start and counted as an attempt.
"""

from __future__ import annotations

import asyncio
import traceback
from typing import Any

from alarmtop.core.alarms import policy as P
from alarmtop.core.alarms.policy import AlarmRecord
from alarmtop.core.alarms.scheduler import AlarmScheduler
from alarmtop.core.clock import Clock, Deadlines
from alarmtop.core.errors import AlarmHandlerTimeout
from alarmtop.core.faults import FaultRegistry, InjectedFault
from alarmtop.core.objects.base import AlarmInfo
from alarmtop.core.objects.host import ObjectHost, Resident


def describe_error(exc: BaseException) -> str:
    """`Type: message`, plus where it was raised, kept short for the attempt record."""
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    at = f" (at {where[0].name}:{where[0].lineno})" if where else ""
    return f"{type(exc).__name__}: {exc}{at}"[:2000]


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
        try:
            if not sched.still_current(rec):
                return  # overwritten or deleted while waiting for the object
            started = await sched.commit(rec.key, P.start_attempt(rec, self._clock.now_ms()))
            assert started is not None
            error = await self._attempt(r, started, task)
            storage = r.storage
            dirty, new_alarm = storage._take_alarm_change() if storage else (False, None)
            now = self._clock.now_ms()
            if error is None:
                await sched.commit(rec.key, P.succeed(started, now, new_alarm if dirty else None))
            else:
                policy = sched.policy_for(rec.object_class)
                sched.log_failure(started, error)
                await sched.commit(rec.key, P.fail(started, now, error, policy,
                                                   new_alarm if dirty else None, sched.rng))
            if r.storage is not None:
                r.storage._forget_alarm()
        finally:
            host.leave_turn(r)

    async def _attempt(self, r: Resident, rec: AlarmRecord,
                       task: asyncio.Task[Any]) -> str | None:
        """Run the handler; None on success, else a description of what went wrong."""
        host = self._host
        limit = self._deadlines.limit(task)
        try:
            try:
                with limit:
                    instance = r.instance if r.instance is not None else await host.wake(r)
                    assert r.storage is not None
                    r.storage._begin_alarm_event(self._clock.now_ms())
                    if self._faults.pending:
                        await self._run_faults(rec)
                    await instance.alarm(AlarmInfo(rec.retry_count, rec.scheduled_ms))
            finally:
                if host.output_pending(r):
                    await host.finish_event(r)  # writes are kept even when it raised
        except asyncio.CancelledError:
            raise  # the runtime is stopping: the row stays 'running', like a crash
        except TimeoutError as exc:
            if limit.expired:
                return describe_error(AlarmHandlerTimeout(*rec.key, self._timeout_s))
            return describe_error(exc)
        except Exception as exc:
            return describe_error(exc)
        return None

    async def _run_faults(self, rec: AlarmRecord) -> None:
        """Injected faults on this object: a delay before the handler, or a raise instead."""
        target = f"{rec.object_class}/{rec.object_name}"
        delay = self._faults.take(target, "alarm_delay")
        if delay is not None and delay.seconds:
            await self._clock.sleep(delay.seconds)
        raise_fault = self._faults.take(target, "alarm_raise")
        if raise_fault is not None:
            raise InjectedFault(raise_fault.id, raise_fault.kind, target)
