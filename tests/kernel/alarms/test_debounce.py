"""The debounced click counter: many hits in a window arm one alarm and flush once."""

from __future__ import annotations

import asyncio

from alarmtop.core import VirtualClock
from alarmtop.examples.click_counter import DEBOUNCE_MS, ClickCounter
from tests.conftest import START_MS, RuntimeFactory


class FlushRecorder:
    """The `flush_sink`: records (counter, count, time relative to START_MS)."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.flushes: list[tuple[str, int, int]] = []

    async def flushed(self, counter: str, count: int) -> None:
        self.flushes.append((counter, count, self.clock.now_ms() - START_MS))


class Env:
    def __init__(self, sink: FlushRecorder) -> None:
        self.flush_sink = sink


async def test_five_hits_arm_one_alarm_and_flush_once(make_runtime: RuntimeFactory,
                                                      clock: VirtualClock) -> None:
    """Five hits spread over 400 ms: exactly one alarm.set, one flush of 5 at +1 s."""
    sink = FlushRecorder(clock)
    rt = await make_runtime(ClickCounter, env=Env(sink))
    sub = rt.events.subscribe("alarm.")
    counter = rt.get(ClickCounter, "button")

    counts = []
    for _ in range(5):
        counts.append(await counter.hit())
        await clock.advance(0.1)
    assert counts == [1, 2, 3, 4, 5]
    sets = [e for e in sub.drain() if e.type == "alarm.set"]
    assert [(e.at_ms - START_MS, e.data["scheduled_ms"]) for e in sets] == [
        (0, START_MS + DEBOUNCE_MS)]
    assert sink.flushes == []

    await clock.advance(0.5)  # now +1000
    assert sink.flushes == [("button", 5, DEBOUNCE_MS)]
    types = [e.type for e in sub.drain()]
    assert types == ["alarm.fired", "alarm.succeeded"]
    assert await counter.totals() == {"pending": 0, "flushed": 5}
    assert await rt.alarm(ClickCounter, "button") is None

    await clock.advance(10)
    assert len(sink.flushes) == 1  # nothing more without hits
    assert [e.type for e in sub.drain()].count("alarm.fired") == 0


async def test_concurrent_hits_still_arm_one_alarm(make_runtime: RuntimeFactory,
                                                   clock: VirtualClock) -> None:
    """Hits racing each other are serialised: counts 1..5, one alarm.set, one flush."""
    sink = FlushRecorder(clock)
    rt = await make_runtime(ClickCounter, env=Env(sink))
    sub = rt.events.subscribe("alarm.set")
    counter = rt.get(ClickCounter, "button")
    counts = await asyncio.gather(*(counter.hit() for _ in range(5)))
    assert sorted(counts) == [1, 2, 3, 4, 5]
    assert len(sub.drain()) == 1
    await clock.advance(1)
    assert sink.flushes == [("button", 5, DEBOUNCE_MS)]


async def test_next_window_after_a_flush(make_runtime: RuntimeFactory,
                                         clock: VirtualClock) -> None:
    """After a flush the next hit opens a new window with its own alarm and flush."""
    sink = FlushRecorder(clock)
    rt = await make_runtime(ClickCounter, env=Env(sink))
    sub = rt.events.subscribe("alarm.set")
    counter = rt.get(ClickCounter, "button")
    await counter.hit(3)
    await clock.advance(1.5)
    await counter.hit(2)
    await counter.hit()
    await clock.advance(1)
    assert sink.flushes == [("button", 3, 1000), ("button", 3, 2500)]
    assert [e.data["scheduled_ms"] - START_MS for e in sub.drain()] == [1000, 2500]
    assert await counter.totals() == {"pending": 0, "flushed": 6}
