"""The embedded demo: lease ledgers, debounced counters and a flaky object, live.

`build_demo_runtime` registers the demo classes (the flaky one with a retry
policy fast enough to watch it reach a dead letter in under a minute), and
`drive_demo` keeps them busy: leases granted and expiring, clicks flushed, and
now and then a flaky alarm armed. Four festival days run beside them; the fourth
(`hsf-day4`) fails for good on `notify_partners` while the partner API is down
(an injected `step_raise` fault), and once the outage is over (the fault
cleared) the driver redrives it, as an operator would from the console or with
the `redrive` ops command.

The driver outlives what goes wrong around it: a tick that fails (an object's
node died, PostgreSQL restarting, a stuck object) is logged and the next tick
goes on; what was not set up yet is tried again at the next tick.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from pathlib import Path
from typing import Any

from alarmtop.core import Clock, RetryPolicy, Runtime
from alarmtop.core.ports import StorageBackend
from alarmtop.examples.click_counter import ClickCounter
from alarmtop.examples.dashboard import LiveDashboard
from alarmtop.examples.festival import FestivalServices, build_festival
from alarmtop.examples.flaky import Flaky
from alarmtop.examples.lease_ledger import LeaseLedger

# 7 attempts over about 32 s instead of 126 s.
DEMO_RETRY = RetryPolicy(max_retries=6, initial_delay_s=0.5, backoff_rate=2.0)
TENANTS = [f"tenant-{i}" for i in range(1, 9)]
COUNTERS = ["home", "pricing", "docs", "signup"]
FAILURE_LOG_EVERY_S = 30.0  # a tick's failure is logged at once, then once in this long
log = logging.getLogger("alarmtop.demo")


def build_demo_runtime(data_dir: Path, clock: Clock | None = None,
                       backend: StorageBackend | None = None) -> Runtime:
    rt = Runtime(data_dir, clock=clock, hibernate_after=5.0, backend=backend)
    rt.register(LeaseLedger)
    rt.register(ClickCounter)
    rt.register(Flaky, retry_policy=DEMO_RETRY)
    rt.register(LiveDashboard)
    rt.register_execution(build_festival(FestivalServices(rt.ledger)))
    return rt


async def _verdict(rt: Runtime, execution_id: str, verdict: str) -> None:
    for _ in range(100):
        d = await rt.executions.describe(execution_id)
        pending = [c for c in d["callbacks"] if c["name"] == "verdict" and
                   c["status"] == "started"]
        if pending:
            await rt.executions.send_callback_success(pending[0]["callback_id"], verdict)
            return
        await rt.clock.sleep(0.1)


class RedriveStory:
    """`hsf-day4`: failed for good while the partners were down; redriven once they are
    back (`hold_s` after it failed, so the failure can be seen first)."""

    EXECUTION = "hsf-day4"

    def __init__(self, rt: Runtime, outage_fault: str, hold_s: float = 15.0) -> None:
        self.rt = rt
        self.outage_fault = outage_fault
        self.hold_s = hold_s
        self.failed_ms: int | None = None
        self.redriven = False

    async def tick(self) -> None:
        """Look at the execution once; clear the outage and redrive when it is time."""
        if self.redriven:
            return
        status = (await self.rt.executions.describe(self.EXECUTION))["status"]
        now = self.rt.clock.now_ms()
        if status != "failed":
            return
        if self.failed_ms is None:
            self.failed_ms = now
        if now - self.failed_ms < self.hold_s * 1000:
            return
        self.rt.faults.clear(self.outage_fault)  # the partners are back
        await self.rt.executions.redrive(self.EXECUTION, reason="partner API back",
                                         actor="demo")
        self.redriven = True


def _fault_once(rt: Runtime, target: str, kind: str, step: str) -> str:
    """Inject an always-on fault unless it is there already (a set-up tried again, or
    another node of a fleet running the demo too): its id."""
    for fault in rt.faults.list():
        if (fault["target"], fault["kind"], fault["step"], fault["times"]) == \
                (target, kind, step, None):
            return str(fault["id"])
    return rt.faults.inject(target, kind, None, step=step)


async def start_outage_day(rt: Runtime, hold_s: float = 15.0) -> RedriveStory:
    """Start `hsf-day4` with the partner API down (a fault that always raises)."""
    fault = _fault_once(rt, RedriveStory.EXECUTION, "step_raise", "notify_partners")
    await rt.executions.start("festival-stream", {"eventId": RedriveStory.EXECUTION,
                                                  "startsInSeconds": 3600},
                              execution_id=RedriveStory.EXECUTION)
    return RedriveStory(rt, fault, hold_s)


async def start_festivals(rt: Runtime) -> None:
    """Three festival days: one waits for its verdict, one streams, one was cancelled and
    its rollback is stuck on a compensation that keeps failing (it needs a human)."""
    ex = rt.executions
    await ex.start("festival-stream", {"eventId": "hsf-day1", "startsInSeconds": 3600},
                   execution_id="hsf-day1")
    await ex.start("festival-stream", {"eventId": "hsf-day3", "startsInSeconds": 3600},
                   execution_id="hsf-day3")
    _fault_once(rt, "hsf-day2", "compensation_fail", "compensate_open_viewing_page")
    await ex.start("festival-stream", {"eventId": "hsf-day2", "startsInSeconds": 3600},
                   execution_id="hsf-day2")
    await _verdict(rt, "hsf-day3", "go")
    await _verdict(rt, "hsf-day2", "cancel")


class _Failures:
    """A failed tick is logged, always: the first at once, then one line every
    `FAILURE_LOG_EVERY_S` saying how many failed since."""

    def __init__(self) -> None:
        self.count = 0  # ticks that failed, since the start
        self._unlogged = 0
        self._logged_at = -FAILURE_LOG_EVERY_S

    def note(self, exc: Exception) -> None:
        self.count += 1
        self._unlogged += 1
        now = time.monotonic()
        if now - self._logged_at >= FAILURE_LOG_EVERY_S:
            more = f" ({self._unlogged - 1} more since the last line)" if \
                self._unlogged > 1 else ""
            log.warning("demo traffic: a tick failed and the next one goes on: %s: %s%s",
                        type(exc).__name__, exc, more)
            self._unlogged, self._logged_at = 0, now


async def drive_demo(rt: Runtime, rng: random.Random | None = None,
                     tick_s: float = 0.5) -> None:
    """Generate activity forever (cancel to stop). A tick that fails is logged and the
    next one goes on."""
    rng = rng or random.Random(7)
    failures = _Failures()
    festivals = False
    story: RedriveStory | None = None
    tick = 0
    while True:
        try:
            if not festivals:
                await start_festivals(rt)
                festivals = True
            if story is None:
                story = await start_outage_day(rt)
            await _tick(rt, rng, tick, story)
        except Exception as exc:  # the demo goes on: its traffic is what the console shows
            failures.note(exc)
        tick += 1
        await rt.clock.sleep(tick_s)


async def _tick(rt: Runtime, rng: random.Random, tick: int, story: RedriveStory) -> None:
    if tick % 4 == 0:
        await story.tick()
    tenant = rng.choice(TENANTS)
    await rt.get(LeaseLedger, tenant).grant(f"lease-{tick}", rng.randint(500, 8000))
    for _ in range(rng.randint(1, 5)):
        await rt.get(ClickCounter, rng.choice(COUNTERS)).hit()
    if tick % 40 == 0:
        await rt.get(Flaky, f"payments-{tick // 40 % 3}").arm(rng.randint(0, 2000))


def start_demo_driver(rt: Runtime, **options: Any) -> asyncio.Task[None]:
    """`drive_demo(rt)` as a task; should it ever end with an error, that is logged
    (a background task's end is never silent)."""
    task = asyncio.get_running_loop().create_task(drive_demo(rt, **options),
                                                  name="demo-driver")
    task.add_done_callback(_driver_ended)
    return task


def _driver_ended(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("the demo's traffic stopped", exc_info=task.exception())


async def run_demo_forever(data_dir: Path) -> None:
    rt = build_demo_runtime(data_dir)
    async with rt:
        await drive_demo(rt)


if __name__ == "__main__":  # pragma: no cover
    asyncio.run(run_demo_forever(Path("./demo-data")))
