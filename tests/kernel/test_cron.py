"""Global cron triggers on the runtime clock (START_MS is 2027-01-15 08:00:00 UTC)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

from alarmtop.core import Runtime, VirtualClock
from tests.conftest import START_MS, RuntimeFactory

MINUTE_MS = 60_000


def test_start_ms_is_the_documented_instant() -> None:
    """The cron expectations below rely on START_MS being 08:00:00 UTC."""
    assert datetime.fromtimestamp(START_MS / 1000, UTC) == datetime(2027, 1, 15, 8, 0, tzinfo=UTC)


async def test_every_five_minutes(make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    """'*/5 * * * *' over 16 minutes runs at 08:05, 08:10 and 08:15, not at the start."""
    rt = await make_runtime()
    sub = rt.events.subscribe("cron.")
    runs: list[int] = []
    job = rt.cron("*/5 * * * *", lambda: runs.append(clock.now_ms() - START_MS), name="tick")
    await clock.advance(0)
    assert job.next_fire_ms == START_MS + 5 * MINUTE_MS

    await clock.advance(16 * 60)
    assert runs == [5 * MINUTE_MS, 10 * MINUTE_MS, 15 * MINUTE_MS]
    assert (job.runs, job.failures, job.next_fire_ms) == (3, 0, START_MS + 20 * MINUTE_MS)
    events = sub.drain()
    assert [(e.type, e.at_ms - START_MS, e.data["name"]) for e in events] == [
        ("cron.fired", 5 * MINUTE_MS, "tick"), ("cron.fired", 10 * MINUTE_MS, "tick"),
        ("cron.fired", 15 * MINUTE_MS, "tick")]


async def test_async_cron_function(make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    """An async function is awaited (its body, including a clock sleep, completes)."""
    rt = await make_runtime()
    done: list[int] = []

    async def job() -> None:
        await clock.sleep(30)
        done.append(clock.now_ms() - START_MS)

    cron_job = rt.cron("0 * * * *", job)  # hourly, on the hour
    assert cron_job.name == "job"
    await clock.advance(2 * 3600 + 60)
    assert done == [3600_000 + 30_000, 7200_000 + 30_000]
    assert cron_job.runs == 2


async def test_failing_cron_is_announced_and_continues(make_runtime: RuntimeFactory,
                                                       clock: VirtualClock,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """A raising function: cron.failed event and an ERROR log each time; the schedule goes on."""
    rt = await make_runtime()
    sub = rt.events.subscribe("cron.")
    calls: list[int] = []

    def flaky() -> None:
        calls.append(clock.now_ms() - START_MS)
        if len(calls) <= 2:
            raise RuntimeError(f"boom {len(calls)}")

    job = rt.cron("* * * * *", flaky)
    with caplog.at_level(logging.ERROR, logger="alarmtop"):
        await clock.advance(3 * 60)
    assert calls == [MINUTE_MS, 2 * MINUTE_MS, 3 * MINUTE_MS]
    assert (job.runs, job.failures) == (1, 2)
    assert [(e.type, e.data.get("error")) for e in sub.drain()] == [
        ("cron.failed", "boom 1"), ("cron.failed", "boom 2"), ("cron.fired", None)]
    failures = [r for r in caplog.records
                if getattr(r, "alarmtop", {}).get("event") == "cron.failed"]
    assert [r.getMessage() for r in failures] == [
        f"cron job {job.name} (* * * * *) failed: RuntimeError: boom {n}; it runs again at "
        "its next time" for n in (1, 2)]
    assert failures[0].alarmtop["error"] == "RuntimeError: boom 1"  # type: ignore[attr-defined]


async def test_cron_registered_before_start(tmp_path: Path, clock: VirtualClock) -> None:
    """Jobs added before start() begin with the runtime and stop with it."""
    rt = Runtime(tmp_path / "data", clock=clock)
    runs: list[int] = []
    rt.cron("*/10 * * * *", lambda: runs.append(clock.now_ms() - START_MS))
    await clock.advance(15 * 60)
    assert runs == []  # not started yet
    await rt.start()
    try:
        await clock.advance(10 * 60)  # now 08:25
        assert runs == [20 * MINUTE_MS]
    finally:
        await rt.stop()
    await clock.advance(30 * 60)
    assert runs == [20 * MINUTE_MS]


async def test_cron_in_another_timezone(make_runtime: RuntimeFactory,
                                        clock: VirtualClock) -> None:
    """timezone= shifts the schedule: 10:00 in Paris (UTC+1 in January) is START + 1 h."""
    rt = await make_runtime()
    runs: list[int] = []
    rt.cron("0 10 * * *", lambda: runs.append(clock.now_ms() - START_MS), timezone="Europe/Paris")
    await clock.advance(3 * 3600)
    assert runs == [3600_000]
