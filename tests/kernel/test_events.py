"""The event bus: prefixed subscriptions, bounded queues, listeners."""

from __future__ import annotations

import asyncio

import pytest

from alarmtop.core.kernel.clock import VirtualClock
from alarmtop.core.kernel.events import Event, EventBus
from tests.conftest import START_MS


class CountingClock:
    """A clock that counts how often the bus asks it the time."""

    def __init__(self) -> None:
        self.calls = 0

    def now_ms(self) -> int:
        self.calls += 1
        return 42


@pytest.fixture
def bus(clock: VirtualClock) -> EventBus:
    return EventBus(clock)


def test_subscriber_gets_events_stamped_with_the_clock(bus: EventBus,
                                                      clock: VirtualClock) -> None:
    sub = bus.subscribe()
    bus.emit("alarm.set", {"object": "C/a"})
    bus.emit("object.woke")
    assert sub.drain() == [Event("alarm.set", START_MS, {"object": "C/a"}),
                           Event("object.woke", START_MS, {})]
    assert sub.drain() == []


def test_event_to_dict() -> None:
    assert Event("a.b", 5, {"x": 1}).to_dict() == {"type": "a.b", "at_ms": 5, "data": {"x": 1}}


def test_prefixes_filter_events(bus: EventBus) -> None:
    alarms = bus.subscribe("alarm.")
    mixed = bus.subscribe("alarm.dead", "fault.")
    everything = bus.subscribe()
    for type_ in ("alarm.set", "alarm.dead", "fault.injected", "object.woke", "alarmist"):
        bus.emit(type_)
    assert [e.type for e in alarms.drain()] == ["alarm.set", "alarm.dead"]
    assert [e.type for e in mixed.drain()] == ["alarm.dead", "fault.injected"]
    assert len(everything.drain()) == 5


def test_subscription_sees_only_events_after_subscribing(bus: EventBus) -> None:
    bus.emit("before")  # nobody listens: dropped on the floor
    sub = bus.subscribe()
    bus.emit("after")
    assert [e.type for e in sub.drain()] == ["after"]


def test_full_queue_drops_the_oldest_and_counts_them(bus: EventBus) -> None:
    sub = bus.subscribe(maxsize=3)
    for i in range(5):
        bus.emit("tick", {"i": i})
    assert [e.data["i"] for e in sub.drain()] == [2, 3, 4]
    assert sub.dropped == 2
    bus.emit("tick", {"i": 5})
    assert [e.data["i"] for e in sub.drain()] == [5]
    assert sub.dropped == 2


def test_a_slow_subscriber_does_not_affect_another(bus: EventBus) -> None:
    slow = bus.subscribe(maxsize=1)
    fast = bus.subscribe(maxsize=10)
    for i in range(4):
        bus.emit("tick", {"i": i})
    assert slow.dropped == 3 and fast.dropped == 0
    assert len(fast.drain()) == 4


async def test_iteration_waits_for_events_and_close_ends_it(bus: EventBus) -> None:
    sub = bus.subscribe()
    got: list[str] = []

    async def consume() -> None:
        async for event in sub:
            got.append(event.type)

    task = asyncio.get_running_loop().create_task(consume())
    await asyncio.sleep(0)
    bus.emit("one")
    bus.emit("two")
    for _ in range(5):
        await asyncio.sleep(0)
    assert got == ["one", "two"] and not task.done()
    bus.emit("three")
    sub.close()
    await task  # the queued event is still delivered, then iteration stops
    assert got == ["one", "two", "three"]


async def test_closed_subscription_gets_nothing_more(bus: EventBus) -> None:
    sub = bus.subscribe()
    sub.close()
    assert not bus.active
    bus.emit("late")
    assert sub.drain() == []
    with pytest.raises(StopAsyncIteration):
        await sub.get()


def test_listener_is_called_synchronously_until_unsubscribed(bus: EventBus) -> None:
    seen: list[str] = []
    unsubscribe = bus.listen(lambda e: seen.append(e.type))
    assert bus.active
    bus.emit("a")
    assert seen == ["a"]
    unsubscribe()
    bus.emit("b")
    assert seen == ["a"] and not bus.active


def test_emit_without_subscribers_is_a_no_op() -> None:
    clock = CountingClock()
    bus = EventBus(clock)
    assert not bus.active
    bus.emit("alarm.set", {"x": 1})
    assert clock.calls == 0  # not even the time is read
    sub = bus.subscribe()
    bus.emit("alarm.set")
    assert clock.calls == 1 and sub.drain()[0].at_ms == 42
