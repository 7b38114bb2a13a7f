"""The retry ladder of a handler that always raises, on a virtual clock."""

from __future__ import annotations

from alarmtop.core import AlarmInfo, DurableObject, VirtualClock
from tests.conftest import START_MS, RuntimeFactory


class AlwaysFails(DurableObject):
    async def arm(self, at_ms: int) -> None:
        await self.ctx.storage.set_alarm(at_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        seen = await self.ctx.storage.get("seen") or []
        seen.append([self.ctx.now_ms() - START_MS, info.retry_count, info.is_retry])
        await self.ctx.storage.put("seen", seen)
        raise RuntimeError("always")

    async def seen(self) -> list[list[int]]:
        return list(await self.ctx.storage.get("seen") or [])


class Recovers(AlwaysFails):
    async def alarm(self, info: AlarmInfo) -> None:
        await self.ctx.storage.put("ok", self.ctx.now_ms())

    async def ok(self) -> int | None:
        value = await self.ctx.storage.get("ok")
        return None if value is None else int(value)


async def test_ladder_walks_to_dead_letter_then_rearm(make_runtime: RuntimeFactory,
                                                      clock: VirtualClock) -> None:
    rt = await make_runtime(AlwaysFails)
    sub = rt.events.subscribe("alarm.")
    obj = rt.get(AlwaysFails, "x")
    await obj.arm(START_MS)
    await clock.advance(200)

    seen = await obj.seen()
    assert [s[0] for s in seen] == [0, 2000, 6000, 14000, 30000, 62000, 126000]
    assert [s[1] for s in seen] == [0, 1, 2, 3, 4, 5, 6]
    assert [s[2] for s in seen] == [False] + [True] * 6

    dead = await rt.dead_letters()
    assert [(d.object, d.state, d.retry_count) for d in dead] == [("AlwaysFails/x", "dead", 6)]
    assert len(dead[0].attempts) == 7
    assert all(a.error and "RuntimeError: always" in a.error for a in dead[0].attempts)
    assert [a.start_ms - START_MS for a in dead[0].attempts] == [0, 2000, 6000, 14000, 30000,
                                                                 62000, 126000]

    types = [e.type for e in sub.drain()]
    assert types.count("alarm.failed") == 7
    assert types.count("alarm.near_exhaustion") == 1
    assert types.index("alarm.near_exhaustion") < types.index("alarm.dead")
    assert types.index("alarm.dead") > types.index("alarm.near_exhaustion")

    # The handler's own view: no alarm; the operator's view: a dead letter.
    status = await rt.alarm(AlwaysFails, "x")
    assert status is not None and status.state == "dead"

    # Re-arming resets the ladder; the next attempt runs as a first attempt.
    rt.register(Recovers)
    fresh = await rt.rearm(AlwaysFails, "x", at_ms=clock.now_ms() + 1000)
    assert (fresh.state, fresh.retry_count, fresh.attempts) == ("pending", 0, [])
    await clock.advance(1)
    seen = await obj.seen()
    assert seen[-1][1:] == [0, False]
    assert (await rt.alarm(AlwaysFails, "x")).retry_count == 1  # type: ignore[union-attr]


async def test_success_after_retry_clears_the_alarm(make_runtime: RuntimeFactory,
                                                   clock: VirtualClock) -> None:
    rt = await make_runtime(Recovers)
    rt.faults.inject("Recovers/r", "alarm_raise", times=2)
    obj = rt.get(Recovers, "r")
    await obj.arm(START_MS + 500)
    await clock.advance(0.5)
    assert await obj.ok() is None
    await clock.advance(2)
    assert await obj.ok() is None
    await clock.advance(4)
    assert await obj.ok() == START_MS + 6500
    assert await rt.alarm(Recovers, "r") is None
    assert rt.faults.list() == []

