"""alarm_timeout cancels a handler that runs too long; alarm_delay faults delay it."""

from __future__ import annotations

from dataclasses import dataclass, field

from alarmtop.core import AlarmInfo, DurableObject, VirtualClock
from tests.conftest import START_MS, RuntimeFactory


@dataclass
class Env:
    # (event, time relative to START_MS, retry_count)
    log: list[tuple[str, int, int]] = field(default_factory=list)


class Sleeper(DurableObject):
    """The first attempt sleeps an hour on the clock; later attempts return at once."""

    async def arm(self, at_ms: int) -> None:
        await self.ctx.storage.set_alarm(at_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        now = self.ctx.now_ms() - START_MS
        self.env.log.append(("start", now, info.retry_count))
        if info.retry_count == 0:
            await self.ctx.sleep(3600)
        self.env.log.append(("end", self.ctx.now_ms() - START_MS, info.retry_count))


async def test_handler_past_alarm_timeout_is_cancelled_and_retried(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    """alarm_timeout=60: cancelled at +60 s, recorded as a timeout failure, retried at +62 s."""
    env = Env()
    rt = await make_runtime(Sleeper, env=env, alarm_timeout=60)
    sub = rt.events.subscribe("alarm.")
    await rt.get(Sleeper, "s").arm(START_MS)

    await clock.advance(59.999)
    status = await rt.alarm(Sleeper, "s")
    assert status is not None and status.state == "running"
    assert env.log == [("start", 0, 0)]

    await clock.advance(0.001)
    status = await rt.alarm(Sleeper, "s")
    assert status is not None
    assert (status.state, status.retry_count, status.next_attempt_ms) == (
        "retrying", 1, START_MS + 62_000)
    assert len(status.attempts) == 1
    attempt = status.attempts[0]
    assert (attempt.start_ms, attempt.end_ms) == (START_MS, START_MS + 60_000)
    assert attempt.error is not None
    assert "AlarmHandlerTimeout" in attempt.error and "alarm_timeout=60s" in attempt.error
    assert env.log == [("start", 0, 0)]  # the sleep never finished
    failed = [e for e in sub.drain() if e.type == "alarm.failed"]
    assert len(failed) == 1 and "alarm_timeout" in failed[0].data["error"]

    await clock.advance(2)
    assert env.log == [("start", 0, 0), ("start", 62_000, 1), ("end", 62_000, 1)]
    assert await rt.alarm(Sleeper, "s") is None


async def test_handler_within_timeout_is_not_cancelled(make_runtime: RuntimeFactory,
                                                       clock: VirtualClock) -> None:
    """A handler that finishes before the timeout succeeds (the timer does not misfire)."""
    env = Env()
    rt = await make_runtime(Sleeper, env=env, alarm_timeout=7200)
    await rt.get(Sleeper, "s").arm(START_MS)
    await clock.advance(3600)
    assert env.log == [("start", 0, 0), ("end", 3_600_000, 0)]
    assert await rt.alarm(Sleeper, "s") is None


class Quick(DurableObject):
    async def arm(self, at_ms: int) -> None:
        await self.ctx.storage.set_alarm(at_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        self.env.log.append(("start", self.ctx.now_ms() - START_MS, info.retry_count))


async def test_alarm_delay_fault_delays_the_handler(make_runtime: RuntimeFactory,
                                                    clock: VirtualClock) -> None:
    """alarm_delay seconds=5: the handler body starts 5 s (virtual) after the alarm fired."""
    env = Env()
    rt = await make_runtime(Quick, env=env)
    sub = rt.events.subscribe("alarm.fired", "fault.")
    fid = rt.faults.inject("Quick/q", "alarm_delay", seconds=5)
    assert [f["id"] for f in rt.faults.list()] == [fid]
    await rt.get(Quick, "q").arm(START_MS + 1000)

    await clock.advance(5.999)
    assert env.log == []
    await clock.advance(0.001)
    assert env.log == [("start", 6000, 0)]
    assert await rt.alarm(Quick, "q") is None
    assert rt.faults.list() == []  # times=1: used up
    fired = [e.at_ms - START_MS for e in sub.drain() if e.type == "alarm.fired"]
    assert fired == [1000]

    # Used up: the next alarm runs on time.
    await rt.get(Quick, "q").arm(START_MS + 10_000)
    await clock.advance(5)
    assert env.log[-1] == ("start", 10_000, 0)


async def test_alarm_delay_counts_toward_the_timeout(make_runtime: RuntimeFactory,
                                                     clock: VirtualClock) -> None:
    """A delay longer than alarm_timeout makes the attempt a timeout failure."""
    env = Env()
    rt = await make_runtime(Quick, env=env, alarm_timeout=3)
    rt.faults.inject("Quick/q", "alarm_delay", seconds=5)
    await rt.get(Quick, "q").arm(START_MS)
    await clock.advance(3)
    assert env.log == []
    status = await rt.alarm(Quick, "q")
    assert status is not None and status.state == "retrying"
    assert status.last_error is not None and "alarm_timeout=3s" in status.last_error
    await clock.advance(2)
    assert env.log == [("start", 5000, 1)]
