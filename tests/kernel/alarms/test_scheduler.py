"""AlarmScheduler: workers pull due alarms up to max_concurrent_alarms; the loop wakes for
what falls due sooner than it sleeps."""

from __future__ import annotations

from dataclasses import dataclass, field

from alarmtop.core import AlarmInfo, DurableObject, VirtualClock
from tests.conftest import START_MS, RuntimeFactory


@dataclass
class Env:
    running: int = 0
    most: int = 0
    starts: list[tuple[str, int]] = field(default_factory=list)  # (object, ms after START)
    seconds: float = 10.0  # how long each handler sleeps on the clock


class Slow(DurableObject):
    async def arm(self, at_ms: int) -> None:
        await self.ctx.storage.set_alarm(at_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        env = self.env
        env.starts.append((self.ctx.id, self.ctx.now_ms() - START_MS))
        env.running += 1
        env.most = max(env.most, env.running)
        try:
            await self.ctx.sleep(env.seconds)
        finally:
            env.running -= 1


async def test_no_more_than_max_concurrent_handlers_run(make_runtime: RuntimeFactory,
                                                        clock: VirtualClock) -> None:
    env = Env()
    rt = await make_runtime(Slow, env=env, max_concurrent_alarms=3)
    sub = rt.events.subscribe("alarm.succeeded")
    for i in range(10):
        await rt.get(Slow, f"s{i}").arm(START_MS)
    await clock.advance(35)
    assert env.most == 3
    assert sorted(at for _, at in env.starts) == [0, 0, 0, 10_000, 10_000, 10_000,
                                                   20_000, 20_000, 20_000, 30_000]
    await clock.advance(10)
    assert sorted(e.data["object"] for e in sub.drain()) == sorted(
        f"Slow/s{i}" for i in range(10))
    assert (await rt.alarm_counts())["pending"] == 0


async def test_a_busy_worker_takes_what_fell_due_meanwhile(make_runtime: RuntimeFactory,
                                                           clock: VirtualClock) -> None:
    """With one worker, an alarm that fell due during another's handler runs right after it."""
    env = Env(seconds=5)
    rt = await make_runtime(Slow, env=env, max_concurrent_alarms=1)
    await rt.get(Slow, "a").arm(START_MS)
    await rt.get(Slow, "b").arm(START_MS + 1000)
    await rt.get(Slow, "c").arm(START_MS + 9000)
    await clock.advance(20)
    assert env.starts == [("a", 0), ("b", 5000), ("c", 10_000)]


async def test_an_alarm_set_sooner_wakes_the_sleeping_loop(make_runtime: RuntimeFactory,
                                                           clock: VirtualClock) -> None:
    env = Env(seconds=0)
    rt = await make_runtime(Slow, env=env)
    await rt.get(Slow, "later").arm(START_MS + 3_600_000)
    await clock.advance(1)  # the loop now sleeps until the hour is up
    await rt.get(Slow, "sooner").arm(START_MS + 2000)
    await clock.advance(5)
    assert env.starts == [("sooner", 2000)]


async def test_each_alarm_of_a_burst_fires_once(make_runtime: RuntimeFactory,
                                                clock: VirtualClock) -> None:
    """More objects than workers and than resident objects: each wakes, fires, is evicted."""
    env = Env(seconds=0)
    rt = await make_runtime(Slow, env=env, max_concurrent_alarms=8, max_resident=20)
    for i in range(200):
        await rt.get(Slow, f"s{i:03}").arm(START_MS + 1000)
    await clock.advance(2)
    assert sorted(name for name, _ in env.starts) == [f"s{i:03}" for i in range(200)]
    assert {at for _, at in env.starts} == {1000}
    assert rt.host.live_count <= 20
    assert (await rt.alarm_counts())["pending"] == 0


async def test_workers_drain_a_window_smaller_than_the_burst(make_runtime: RuntimeFactory,
                                                             clock: VirtualClock) -> None:
    """Only `window_size` alarms are in memory: the rest come from the index in refills
    while the workers drain the window, and none is fired twice or left behind."""
    env = Env(seconds=0)
    rt = await make_runtime(Slow, env=env, max_concurrent_alarms=4, window_size=8)
    for i in range(60):
        await rt.get(Slow, f"s{i:02}").arm(START_MS + 1000 + i * 10)
    await rt.stop()  # a fresh start reads only the soonest 8 into memory
    rt2 = await make_runtime(Slow, env=env, max_concurrent_alarms=4, window_size=8)
    assert len(rt2.scheduler.window) == 8
    await clock.advance(5)
    assert env.starts == [(f"s{i:02}", 1000 + i * 10) for i in range(60)]
    assert (await rt2.alarm_counts())["pending"] == 0
