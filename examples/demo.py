"""The embedded demo: lease ledgers, debounced counters and a flaky object, live.

`build_demo_runtime` registers the demo classes (the flaky one with a retry
policy fast enough to watch it reach a dead letter in under a minute), and
`drive_demo` keeps them busy: leases granted and expiring, clicks flushed, and
now and then a flaky alarm armed.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from alarmtop.core import Clock, RetryPolicy, Runtime
from alarmtop.examples.click_counter import ClickCounter
from alarmtop.examples.dashboard import LiveDashboard
from alarmtop.examples.festival import FestivalServices, build_festival
from alarmtop.examples.flaky import Flaky
from alarmtop.examples.lease_ledger import LeaseLedger

# 7 attempts over about 32 s instead of 126 s.
DEMO_RETRY = RetryPolicy(max_retries=6, initial_delay_s=0.5, backoff_rate=2.0)
TENANTS = [f"tenant-{i}" for i in range(1, 9)]
COUNTERS = ["home", "pricing", "docs", "signup"]


def build_demo_runtime(data_dir: Path, clock: Clock | None = None) -> Runtime:
    rt = Runtime(data_dir, clock=clock, hibernate_after=5.0)
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


async def start_festivals(rt: Runtime) -> None:
    """Three festival days: one waits for its verdict, one streams, one was cancelled and
    its rollback is stuck on a compensation that keeps failing (it needs a human)."""
    ex = rt.executions
    await ex.start("festival-stream", {"eventId": "hsf-day1", "startsInSeconds": 3600},
                   execution_id="hsf-day1")
    await ex.start("festival-stream", {"eventId": "hsf-day3", "startsInSeconds": 3600},
                   execution_id="hsf-day3")
    rt.faults.inject("hsf-day2", "compensation_fail", None,
                     step="compensate_open_viewing_page")
    await ex.start("festival-stream", {"eventId": "hsf-day2", "startsInSeconds": 3600},
                   execution_id="hsf-day2")
    await _verdict(rt, "hsf-day3", "go")
    await _verdict(rt, "hsf-day2", "cancel")


async def drive_demo(rt: Runtime, rng: random.Random | None = None,
                     tick_s: float = 0.5) -> None:
    """Generate activity forever (cancel to stop)."""
    rng = rng or random.Random(7)
    await start_festivals(rt)
    tick = 0
    while True:
        tenant = rng.choice(TENANTS)
        await rt.get(LeaseLedger, tenant).grant(f"lease-{tick}", rng.randint(500, 8000))
        for _ in range(rng.randint(1, 5)):
            await rt.get(ClickCounter, rng.choice(COUNTERS)).hit()
        if tick % 40 == 0:
            await rt.get(Flaky, f"payments-{tick // 40 % 3}").arm(rng.randint(0, 2000))
        tick += 1
        await rt.clock.sleep(tick_s)


async def run_demo_forever(data_dir: Path) -> None:
    rt = build_demo_runtime(data_dir)
    async with rt:
        await drive_demo(rt)


if __name__ == "__main__":  # pragma: no cover
    asyncio.run(run_demo_forever(Path("./demo-data")))
