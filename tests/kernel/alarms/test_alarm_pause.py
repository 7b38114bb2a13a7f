"""An operator pausing, resuming and snoozing an object's alarm (runtime.pause_alarm,
resume_alarm, snooze_alarm), on a real backend and a VirtualClock."""

from __future__ import annotations

from typing import Any

import pytest

from alarmtop.core import AlarmInfo, DurableObject, VirtualClock
from alarmtop.core.model.errors import InvalidArgument, NoAlarm
from tests.conftest import START_MS, RuntimeFactory


class Ticker(DurableObject):
    """Records each alarm run (relative ms, retry count); fails while told to."""

    async def arm(self, at_ms: int) -> None:
        await self.ctx.storage.set_alarm(at_ms)

    async def disarm(self) -> None:
        await self.ctx.storage.delete_alarm()

    async def fail(self, n: int) -> None:
        await self.ctx.storage.put("fail", n)

    async def alarm(self, info: AlarmInfo) -> None:
        self.env.append((self.ctx.now_ms() - START_MS, info.retry_count))
        left = await self.ctx.storage.get("fail") or 0
        if left:
            await self.ctx.storage.put("fail", left - 1)
            raise RuntimeError("not yet")


async def test_pause_across_a_due_alarm_fires_on_resume(make_runtime: RuntimeFactory,
                                                        clock: VirtualClock) -> None:
    """Paused before it is due, the alarm does not fire when its time passes; resumed
    later, it fires at once, with the retry count it had."""
    runs: list[tuple[int, int]] = []
    rt = await make_runtime(Ticker, env=runs)
    obj = rt.get(Ticker, "t")
    await obj.fail(1)
    await obj.arm(START_MS + 1000)
    await clock.advance(1.5)  # the first attempt fails: a retry is due 2 s later
    assert runs == [(1000, 0)]
    sub = rt.events.subscribe("alarm.paused", "alarm.resumed")
    status = await rt.pause_alarm(Ticker, "t", reason="maintenance")
    assert status.paused and status.state == "retrying" and status.retry_count == 1
    await clock.advance(60)  # well past the retry's time
    assert runs == [(1000, 0)]
    assert (await rt.alarm(Ticker, "t")).paused  # type: ignore[union-attr]
    status = await rt.resume_alarm(Ticker, "t")
    assert not status.paused and status.retry_count == 1
    await clock.advance(0.01)
    assert runs == [(1000, 0), (61_500, 1)]
    assert await rt.alarm(Ticker, "t") is None  # it succeeded: cleared
    assert [e.type for e in sub.drain()] == ["alarm.paused", "alarm.resumed"]


async def test_a_paused_alarm_survives_a_restart(make_runtime: RuntimeFactory,
                                                 clock: VirtualClock) -> None:
    runs: list[tuple[int, int]] = []
    rt = await make_runtime(Ticker, env=runs)
    await rt.get(Ticker, "t").arm(START_MS + 1000)
    await rt.pause_alarm(Ticker, "t")
    await rt.stop()
    rt = await make_runtime(Ticker, env=runs)
    await clock.advance(5)
    assert runs == []
    await rt.resume_alarm(Ticker, "t")
    await clock.advance(0.01)
    assert runs == [(5000, 0)]


async def test_a_new_alarm_set_while_paused_stays_paused(make_runtime: RuntimeFactory,
                                                         clock: VirtualClock) -> None:
    """The pause belongs to the object's alarm: a new time replaces the old one and is
    held too; deleting the alarm takes the pause away with it."""
    runs: list[tuple[int, int]] = []
    rt = await make_runtime(Ticker, env=runs)
    obj = rt.get(Ticker, "t")
    await obj.arm(START_MS + 1000)
    await rt.pause_alarm(Ticker, "t")
    await obj.arm(START_MS + 2000)
    status = await rt.alarm(Ticker, "t")
    assert status is not None and status.paused and status.next_attempt_ms == START_MS + 2000
    await clock.advance(3)
    assert runs == []
    await obj.disarm()
    assert await rt.alarm(Ticker, "t") is None
    await obj.arm(START_MS + 4000)
    await clock.advance(2)
    assert runs == [(4000, 0)]


async def test_snooze_moves_the_next_attempt(make_runtime: RuntimeFactory,
                                             clock: VirtualClock) -> None:
    runs: list[tuple[int, int]] = []
    rt = await make_runtime(Ticker, env=runs)
    await rt.get(Ticker, "t").arm(START_MS + 1000)
    status = await rt.snooze_alarm(Ticker, "t", by_ms=5000)
    assert status.next_attempt_ms == START_MS + 6000
    await clock.advance(5.9)
    assert runs == []
    await clock.advance(0.2)
    assert runs == [(6000, 0)]


@pytest.mark.parametrize("by_ms", [0, -5, 1.5, True, "10", 10**15])
async def test_bad_snooze_is_refused_and_changes_nothing(make_runtime: RuntimeFactory,
                                                         by_ms: Any) -> None:
    rt = await make_runtime(Ticker, env=[])
    await rt.get(Ticker, "t").arm(START_MS + 1000)
    before = await rt.alarm(Ticker, "t")
    with pytest.raises(InvalidArgument, match="snooze is a whole number of milliseconds"):
        await rt.snooze_alarm(Ticker, "t", by_ms=by_ms)
    assert await rt.alarm(Ticker, "t") == before


async def test_pause_of_no_alarm_and_fire_now_of_a_paused_one(make_runtime: RuntimeFactory,
                                                              clock: VirtualClock) -> None:
    runs: list[tuple[int, int]] = []
    rt = await make_runtime(Ticker, env=runs)
    with pytest.raises(NoAlarm, match="no alarm to pause"):
        await rt.pause_alarm(Ticker, "nobody")
    await rt.get(Ticker, "t").arm(START_MS + 60_000)
    await rt.pause_alarm(Ticker, "t")
    with pytest.raises(InvalidArgument, match="paused; resume it first"):
        await rt.fire_now(Ticker, "t")
    await clock.advance(1)
    assert runs == []


async def test_the_objects_listing_shows_a_paused_alarm(make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime(Ticker, env=[])
    await rt.get(Ticker, "p").arm(START_MS + 60_000)
    await rt.get(Ticker, "q").arm(START_MS + 60_000)
    await rt.pause_alarm(Ticker, "p", reason="maintenance")
    rows = {e.object_name: e for e in await rt.objects(limit=10)}
    assert rows["p"].alarm_paused and not rows["q"].alarm_paused
    await rt.resume_alarm(Ticker, "p")
    assert not {e.object_name: e for e in await rt.objects(limit=10)}["p"].alarm_paused
