"""VirtualClock, SystemClock, Wakeup, ClockTimeout and Deadlines, driven without wall-clock
waits."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from alarmtop.core.kernel.clock import ClockTimeout, Deadlines, SystemClock, VirtualClock
from alarmtop.core.kernel.supervisor import Wakeup
from tests.conftest import START_MS
from tests.kernel.tracked import spawn


async def spin(rounds: int = 10) -> None:
    """Let the event loop run what is ready, without any timer."""
    for _ in range(rounds):
        await asyncio.sleep(0)


def elapsed(clock: VirtualClock) -> int:
    return clock.now_ms() - START_MS


# -- VirtualClock.advance --------------------------------------------------------------------


async def test_advance_fires_timers_in_time_order(clock: VirtualClock) -> None:
    fired: list[tuple[str, int]] = []

    def record(name: str) -> Callable[[], None]:
        return lambda: fired.append((name, elapsed(clock)))

    for name, at in (("c", 3000), ("a", 1000), ("b", 2000), ("late", 9000)):
        clock.call_at_ms(START_MS + at, record(name))
    await clock.advance(4)
    assert fired == [("a", 1000), ("b", 2000), ("c", 3000)]
    assert elapsed(clock) == 4000
    assert clock.next_timer_ms() == START_MS + 9000


async def test_advance_fires_timers_set_by_fired_work(clock: VirtualClock) -> None:
    fired: list[tuple[str, int]] = []

    def first() -> None:
        fired.append(("first", elapsed(clock)))
        clock.call_at_ms(clock.now_ms() + 500, lambda: fired.append(("chained", elapsed(clock))))
        clock.call_at_ms(clock.now_ms() + 5000, lambda: fired.append(("after", elapsed(clock))))

    clock.call_at_ms(START_MS + 1000, first)
    clock.call_at_ms(START_MS + 2000, lambda: fired.append(("second", elapsed(clock))))
    await clock.advance(3)
    assert fired == [("first", 1000), ("chained", 1500), ("second", 2000)]
    await clock.advance(3)
    assert fired[-1] == ("after", 6000)


async def test_cancelled_timer_does_not_fire(clock: VirtualClock) -> None:
    fired: list[int] = []
    handle = clock.call_at_ms(START_MS + 10, lambda: fired.append(1))
    handle.cancel()
    assert clock.next_timer_ms() is None
    await clock.advance(1)
    assert fired == []


async def test_timer_in_the_past_fires_at_the_next_advance(clock: VirtualClock) -> None:
    fired: list[int] = []
    clock.call_at_ms(START_MS - 5000, lambda: fired.append(elapsed(clock)))
    await clock.advance(0)
    assert fired == [0]


async def test_advance_to_ms_never_goes_back(clock: VirtualClock) -> None:
    await clock.advance_to_ms(START_MS + 1234)
    assert elapsed(clock) == 1234
    await clock.advance_to_ms(START_MS)
    assert elapsed(clock) == 1234


async def test_advance_refuses_negative_time(clock: VirtualClock) -> None:
    with pytest.raises(ValueError):
        await clock.advance(-0.001)
    assert elapsed(clock) == 0


# -- busy tracking ---------------------------------------------------------------------------


async def test_spawned_task_sleeping_on_the_clock_lets_advance_proceed(
        clock: VirtualClock) -> None:
    woke: list[int] = []

    async def ticker() -> str:
        for _ in range(3):
            await clock.sleep(10)
            woke.append(elapsed(clock))
        return "done"

    task = spawn(clock, ticker(), name="ticker")
    await clock.advance(30)
    assert woke == [10_000, 20_000, 30_000]
    assert task.done() and task.result() == "done"


async def test_advance_waits_for_spawned_work_before_moving_on(clock: VirtualClock) -> None:
    """A woken tracked task that works off the clock (a thread here) is waited for."""
    woke: list[int] = []

    async def worker() -> None:
        await clock.sleep(1)
        woke.append(await asyncio.to_thread(lambda: elapsed(clock)))
        await spin(20)  # more loop turns than settle() grants untracked work
        await clock.sleep(1)
        woke.append(elapsed(clock))

    spawn(clock, worker())
    await clock.advance(2)
    assert woke == [1000, 2000]


async def test_untracked_work_is_not_waited_for(clock: VirtualClock) -> None:
    """The counterpart of the test above: without spawn, advance runs ahead."""
    woke: list[int] = []

    async def worker() -> None:
        await clock.sleep(1)
        await spin(20)
        await clock.sleep(1)
        woke.append(elapsed(clock))

    task = asyncio.get_running_loop().create_task(worker())
    await clock.advance(2)
    assert woke == []  # its second sleep started only after time had reached 2 s
    await spin(30)
    await clock.advance(5)
    assert woke == [3000]
    await task


async def test_idle_wait_does_not_count_as_busy(clock: VirtualClock) -> None:
    queue: asyncio.Queue[str] = asyncio.Queue()
    got: list[tuple[str, int]] = []

    async def consumer() -> None:
        item = await clock.idle_wait(queue.get())
        got.append((item, elapsed(clock)))

    async def producer() -> None:
        await clock.sleep(3)
        queue.put_nowait("x")

    spawn(clock, consumer())
    spawn(clock, producer())
    await clock.advance(5)
    assert got == [("x", 3000)]


async def test_idle_wait_outside_a_tracked_task_just_awaits(clock: VirtualClock) -> None:
    fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    fut.set_result(7)
    assert await clock.idle_wait(fut) == 7


async def test_idle_wait_passes_errors_through_and_stays_balanced(clock: VirtualClock) -> None:
    async def failing() -> None:
        raise KeyError("k")

    async def worker() -> None:
        with pytest.raises(KeyError):
            await clock.idle_wait(failing())
        await clock.sleep(1)

    task = spawn(clock, worker())
    await clock.advance(1)
    assert task.done()
    await task


# -- Wakeup ----------------------------------------------------------------------------------


async def test_poke_before_wait_counts_once(clock: VirtualClock) -> None:
    wake = Wakeup(clock)
    wake.poke()
    await wake.wait(None)  # returns at once
    second = asyncio.get_running_loop().create_task(wake.wait(None))
    await spin()
    assert not second.done()
    wake.poke()
    await spin()
    assert second.done()


async def test_poke_during_wait_wakes_and_drops_the_timer(clock: VirtualClock) -> None:
    wake = Wakeup(clock)
    waiter = asyncio.get_running_loop().create_task(wake.wait(START_MS + 60_000))
    await spin()
    assert not waiter.done() and clock.next_timer_ms() == START_MS + 60_000
    wake.poke()
    await waiter
    assert clock.next_timer_ms() is None
    assert elapsed(clock) == 0


async def test_wakeup_returns_at_its_time(clock: VirtualClock) -> None:
    wake = Wakeup(clock)
    woke: list[int] = []

    async def waiter() -> None:
        await wake.wait(START_MS + 2500)
        woke.append(elapsed(clock))

    spawn(clock, waiter())
    await clock.advance(2)
    assert woke == []
    await clock.advance(1)
    assert woke == [2500]


async def test_tracked_waiter_poked_by_a_timer_runs_before_advance_moves_on(
        clock: VirtualClock) -> None:
    wake = Wakeup(clock)
    log: list[int] = []

    async def loop_() -> None:
        while True:
            await wake.wait(None)
            await spin(20)
            log.append(elapsed(clock))
            clock.call_at_ms(clock.now_ms() + 100, lambda: log.append(-elapsed(clock)))

    task = spawn(clock, loop_())
    clock.call_at_ms(START_MS + 1000, wake.poke)
    await clock.advance(1.5)
    assert log == [1000, -1100]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_cancelled_wait_drops_its_timer_and_leaves_the_clock_usable(
        clock: VirtualClock) -> None:
    wake = Wakeup(clock)
    task = spawn(clock, wake.wait(START_MS + 5000))
    await clock.advance(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert clock.next_timer_ms() is None
    await clock.advance(10)  # not stuck on a busy token the waiter kept
    assert elapsed(clock) == 11_000


# -- ClockTimeout ----------------------------------------------------------------------------


async def test_clock_timeout_expires_on_the_virtual_clock(clock: VirtualClock) -> None:
    seen: list[int] = []
    timeout = ClockTimeout(clock, 5)

    async def body() -> None:
        try:
            async with timeout:
                await clock.sleep(60)
        except TimeoutError:
            seen.append(elapsed(clock))
            raise

    task = spawn(clock, body())
    await clock.advance(10)
    with pytest.raises(TimeoutError):
        await task
    assert seen == [5000] and timeout.expired


async def test_clock_timeout_that_does_not_expire_does_nothing(clock: VirtualClock) -> None:
    timeout = ClockTimeout(clock, 5)

    async def body() -> str:
        async with timeout:
            await clock.sleep(1)
        return "ok"

    task = spawn(clock, body())
    await clock.advance(10)
    assert task.result() == "ok"
    assert not timeout.expired
    assert clock.next_timer_ms() is None  # its timer went with the block


async def test_clock_timeout_lets_other_errors_through(clock: VirtualClock) -> None:
    with pytest.raises(KeyError):
        async with ClockTimeout(clock, 5):
            raise KeyError("k")
    assert clock.next_timer_ms() is None


async def test_clock_timeout_none_never_expires(clock: VirtualClock) -> None:
    async with ClockTimeout(clock, None) as timeout:
        assert clock.next_timer_ms() is None
    assert not timeout.expired


async def test_outer_cancellation_is_not_turned_into_a_timeout(clock: VirtualClock) -> None:
    async def body() -> None:
        async with ClockTimeout(clock, 5):
            await clock.sleep(60)

    task = spawn(clock, body())
    await clock.advance(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# -- Deadlines -------------------------------------------------------------------------------


def limited(clock: VirtualClock, deadlines: Deadlines, seconds: float,
            seen: list[tuple[str, int]], name: str) -> asyncio.Task[None]:
    """A task that sleeps `seconds` under a limit and notes how it ended, and when."""

    async def body() -> None:
        try:
            with deadlines.limit():
                await clock.sleep(seconds)
        except TimeoutError:
            seen.append((f"{name} timed out", elapsed(clock)))
        else:
            seen.append((f"{name} done", elapsed(clock)))

    return spawn(clock, body())


async def test_deadlines_cancel_only_the_tasks_past_their_limit(clock: VirtualClock) -> None:
    deadlines = Deadlines(clock, 5)
    seen: list[tuple[str, int]] = []
    limited(clock, deadlines, 60, seen, "a")
    await clock.advance(1)
    limited(clock, deadlines, 2, seen, "b")
    limited(clock, deadlines, 60, seen, "c")
    await clock.advance(10)
    assert seen == [("b done", 3000), ("a timed out", 5000), ("c timed out", 6000)]
    assert clock.next_timer_ms() is None  # nothing live: no timer re-armed


async def test_deadlines_use_one_clock_timer_for_many_limits(clock: VirtualClock) -> None:
    deadlines = Deadlines(clock, 5)
    seen: list[tuple[str, int]] = []
    for i in range(50):
        limited(clock, deadlines, 1, seen, str(i))
    await spin()
    assert len(clock._timers) == 51  # the 50 sleeps and one timer for all the limits
    await clock.advance(2)
    assert len(seen) == 50 and all(what.endswith("done") for what, _ in seen)


async def test_deadlines_forget_ended_limits_behind_a_long_one(clock: VirtualClock) -> None:
    """A handler that runs long keeps the oldest limit: the ended ones behind it go anyway."""
    deadlines = Deadlines(clock, 3600)
    seen: list[tuple[str, int]] = []
    limited(clock, deadlines, 7200, seen, "long")
    for round_ in range(10):
        for i in range(100):
            limited(clock, deadlines, 0.001, seen, f"{round_}.{i}")
        await clock.advance(0.01)
    assert len(seen) == 1000
    assert len(deadlines._queue) <= 2 * deadlines._live + 64
    await clock.advance(3600)
    assert seen[-1] == ("long timed out", 3_600_000)


async def test_deadline_swallowed_by_the_body_leaves_the_task_uncancelled(
        clock: VirtualClock) -> None:
    """A body that catches its cancellation ends normally; the task must not stay marked
    as cancelling, or the next limit it runs under would not turn into TimeoutError."""
    deadlines = Deadlines(clock, 1)
    outcomes: list[str] = []

    async def stubborn() -> None:
        try:
            await clock.sleep(60)
        except asyncio.CancelledError:
            outcomes.append("swallowed")

    async def body() -> None:
        with deadlines.limit() as lim:
            await stubborn()
        outcomes.append(f"first ended, expired={lim.expired}")
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0
        try:
            with deadlines.limit():
                await clock.sleep(60)
        except TimeoutError:
            outcomes.append("second timed out")

    task = spawn(clock, body())
    await clock.advance(5)
    await task
    assert outcomes == ["swallowed", "first ended, expired=True", "second timed out"]


async def test_deadlines_without_a_limit_never_expire(clock: VirtualClock) -> None:
    for seconds in (None, float("inf")):
        deadlines = Deadlines(clock, seconds)
        seen: list[tuple[str, int]] = []
        limited(clock, deadlines, 3600, seen, "a")
        await clock.advance(3600)
        assert seen == [("a done", elapsed(clock))]
        assert clock.next_timer_ms() is None


async def test_outer_cancellation_under_a_deadline_stays_a_cancellation(
        clock: VirtualClock) -> None:
    deadlines = Deadlines(clock, 5)

    async def body() -> None:
        with deadlines.limit():
            await clock.sleep(60)

    task = spawn(clock, body())
    await clock.advance(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await clock.advance(10)  # the expired limit's timer finds nothing to cancel


# -- SystemClock -----------------------------------------------------------------------------


async def test_system_clock_reads_epoch_milliseconds() -> None:
    before = time.time_ns() // 1_000_000
    now = SystemClock().now_ms()
    assert before <= now <= time.time_ns() // 1_000_000


async def test_system_clock_timer_in_the_past_fires_without_waiting() -> None:
    sysclock = SystemClock()
    fired: list[int] = []
    sysclock.call_at_ms(sysclock.now_ms() - 1000, lambda: fired.append(1))
    cancelled = sysclock.call_at_ms(sysclock.now_ms() - 1000, lambda: fired.append(2))
    cancelled.cancel()
    await sysclock.sleep_until_ms(sysclock.now_ms() - 1000)
    await spin()
    assert fired == [1]
