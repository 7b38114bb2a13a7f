"""Global cron triggers on APScheduler's `CronTrigger`, timed by the runtime clock.

Only the trigger arithmetic comes from APScheduler; the waiting is done on the
runtime's clock so a virtual clock drives cron in tests like everything else.
Missed fires while the process was down are not replayed (APScheduler's
coalescing default); durable per-object work belongs in alarms. In a fleet every
node keeps the schedule and one node runs each fire: the first to claim it in the
shared database (`gate`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from apscheduler.triggers.cron import CronTrigger

from alarmtop.core.kernel.events import EventBus
from alarmtop.core.kernel.supervisor import Supervisor, Wakeup
from alarmtop.core.model.errors import BadCronExpression
from alarmtop.core.model.log_records import RUNTIME_LOG, log_event
from alarmtop.core.ports import Clock

CronFn = Callable[[], Awaitable[Any] | Any]
# Whether this runtime runs the fire `at_ms` of a job (in a fleet, one node does).
OnceGate = Callable[[str, int], Awaitable[bool]]


def parse_cron(expression: str, tz: str = "UTC") -> CronTrigger:
    """A `CronTrigger` for a five-field crontab expression, or `BadCronExpression`."""
    if not isinstance(expression, str) or len(expression.split()) != 5:
        raise BadCronExpression(str(expression), "expected exactly five fields")
    try:
        return CronTrigger.from_crontab(expression, timezone=tz)
    except (ValueError, KeyError, TypeError) as exc:
        raise BadCronExpression(expression, str(exc)) from None


@dataclass
class CronJob:
    expression: str
    fn: CronFn
    trigger: CronTrigger
    name: str
    runs: int = 0
    failures: int = 0
    next_fire_ms: int | None = None
    task: asyncio.Task[None] | None = field(default=None, repr=False)


def next_fire_ms(trigger: CronTrigger, after_ms: int) -> int | None:
    """The first fire time strictly after `after_ms` (epoch ms), or None."""
    now = datetime.fromtimestamp((after_ms + 1) / 1000, tz=UTC)
    nxt = trigger.get_next_fire_time(None, now)
    return None if nxt is None else round(nxt.timestamp() * 1000)


class CronRunner:
    def __init__(self, clock: Clock, events: EventBus, tasks: Supervisor,
                 gate: OnceGate | None = None) -> None:
        # In a fleet: whether this node runs a fire (the fleet runs each one once).
        self.gate = gate
        self._clock = clock
        self._tasks = tasks
        self._events = events
        self.jobs: list[CronJob] = []
        self._running = False

    def add(self, expression: str, fn: CronFn, name: str | None = None,
            tz: str = "UTC") -> CronJob:
        if not callable(fn):
            raise TypeError("cron() needs a callable to run")
        job = CronJob(expression, fn, parse_cron(expression, tz),
                      name or str(getattr(fn, "__name__", "cron")))
        self.jobs.append(job)
        if self._running:
            self._start_job(job)
        return job

    def start(self) -> None:
        self._running = True
        for job in self.jobs:
            self._start_job(job)

    def _start_job(self, job: CronJob) -> None:
        job.task = self._tasks.spawn(self._run(job), name=f"cron:{job.name}")

    async def stop(self) -> None:
        self._running = False
        tasks = [j.task for j in self.jobs if j.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, job: CronJob) -> None:
        wake = Wakeup(self._clock)
        while True:
            job.next_fire_ms = next_fire_ms(job.trigger, self._clock.now_ms())
            if job.next_fire_ms is None:
                return
            await wake.wait(job.next_fire_ms)
            if not await self._ours(job, job.next_fire_ms):
                continue
            try:
                result = job.fn()
                if inspect.isawaitable(result):
                    await result
                job.runs += 1
                self._events.emit("cron.fired", {"name": job.name, "expression": job.expression})
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # SystemExit too: the job's failure, not the process's
                job.failures += 1
                error = f"{type(exc).__name__}: {exc}"
                log_event(RUNTIME_LOG, logging.ERROR, f"cron job {job.name} ({job.expression}) "
                          f"failed: {error}; it runs again at its next time", event="cron.failed",
                          name=job.name, error=error)
                self._events.emit("cron.failed", {"name": job.name, "error": str(exc)})

    async def _ours(self, job: CronJob, at_ms: int) -> bool:
        if self.gate is None:
            return True
        try:
            return await self.gate(f"cron:{job.name}:{job.expression}", at_ms)
        except Exception as exc:
            # Without the claim no node may know it ran: skipping is the safe side.
            log_event(RUNTIME_LOG, logging.WARNING, f"cron job {job.name} ({job.expression}) "
                      f"skipped its fire: the fleet could not be asked which node runs it "
                      f"({type(exc).__name__}: {exc})", event="cron.skipped", name=job.name)
            return False
