"""Time for the runtime: the wall clock and a virtual clock (`ports.Clock`), and time
limits on a clock.

A clock is time only: it tells the time and calls back at a time. Every timer in
the runtime goes through one, so that tests can jump through hours of retries in
milliseconds. Tasks and whether the runtime is busy are the supervisor's
(`kernel.supervisor`): its `BusyTracker` counts tracked tasks as busy except while
they wait on the clock, and `VirtualClock.advance`, which moves from one due timer
to the next, reads that count at each, so results do not depend on the speed of
the machine.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from alarmtop.core.kernel.supervisor import BusyTracker, Wakeup
from alarmtop.core.ports import Clock, Timer

T = TypeVar("T")


class TimerHandle:
    """A cancellable timer returned by `Clock.call_at_ms`."""

    __slots__ = ("_loop_handle", "callback", "cancelled", "when_ms")

    def __init__(self, when_ms: int, callback: Callable[[], None]) -> None:
        self.when_ms = when_ms
        self.callback = callback
        self.cancelled = False
        self._loop_handle: asyncio.TimerHandle | None = None

    def cancel(self) -> None:
        self.cancelled = True
        if self._loop_handle is not None:
            self._loop_handle.cancel()

    def __lt__(self, other: TimerHandle) -> bool:  # heap order only
        return self.when_ms < other.when_ms


class Deadlines:
    """One time limit shared by many tasks: `with deadlines.limit() as lim:` cancels the
    task when the limit passes and raises `TimeoutError` out of the block (`lim.expired`).

    Every alarm attempt runs under the same limit and nearly all end long before it.
    The limits are kept in start order, so only the oldest live one needs a clock timer
    (one per `seconds`, not one per attempt), and the block is a plain `with`: entering
    it costs no coroutine. Limits that ended are dropped when they reach the front, or
    all at once when they outnumber the live ones behind a long-running attempt.
    """

    def __init__(self, clock: Clock, seconds: float | None) -> None:
        self._clock = clock
        # None or infinite: no limit (the blocks run as long as they take).
        self._ms = round(seconds * 1000) if seconds is not None and math.isfinite(seconds) else None
        self._queue: collections.deque[Limit] = collections.deque()
        self._live = 0
        self._armed: Timer | None = None

    def limit(self, task: asyncio.Task[Any] | None = None) -> Limit:
        """A limit for `task` (the current task when None), starting now."""
        if task is None:
            task = asyncio.current_task()
            if task is None:
                raise RuntimeError("Deadlines.limit() is used inside a task")
        if self._ms is None:
            return Limit(self, None, 0)  # never queued: never expires
        when = self._clock.now_ms() + self._ms
        queue = self._queue
        if queue and queue[-1].when_ms > when:
            when = queue[-1].when_ms  # the wall clock stepped back: keep the queue in order
        lim = Limit(self, task, when)
        queue.append(lim)
        self._live += 1
        if self._armed is None:
            self._armed = self._clock.call_at_ms(queue[0].when_ms, self._fire)
        return lim

    def _end(self, lim: Limit) -> None:
        if lim.task is None:
            return
        lim.task = None
        self._live -= 1
        queue = self._queue
        while queue and queue[0].task is None:
            queue.popleft()
        if len(queue) > 64 and len(queue) > 2 * self._live:
            self._queue = collections.deque(x for x in queue if x.task is not None)

    def _fire(self) -> None:
        self._armed = None
        now, queue = self._clock.now_ms(), self._queue
        while queue and queue[0].when_ms <= now:
            lim = queue.popleft()
            task = lim.task
            if task is not None and not task.done():
                lim.expired = True
                task.cancel()
        while queue and queue[0].task is None:
            queue.popleft()
        if queue:
            self._armed = self._clock.call_at_ms(queue[0].when_ms, self._fire)


class Limit:
    """One task's place in `Deadlines`; a context manager for the block it limits."""

    __slots__ = ("_owner", "expired", "interrupted", "task", "when_ms")

    def __init__(self, owner: Deadlines, task: asyncio.Task[Any] | None, when_ms: int) -> None:
        self._owner = owner
        self.task: asyncio.Task[Any] | None = task
        self.when_ms = when_ms
        self.expired = False
        self.interrupted: str | None = None  # why it was ended before its time

    def interrupt(self, why: str) -> bool:
        """End the block now, as if its time had come (`interrupted` says why); False
        when it has ended already."""
        task = self.task
        if task is None or task.done() or self.expired:
            return False
        self.expired, self.interrupted = True, why
        task.cancel()
        return True

    def __enter__(self) -> Limit:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: Any) -> None:
        task = self.task
        self._owner._end(self)  # drops the task: no cycle through the queue outlives us
        if self.expired and task is not None:
            # Balance the cancel request even when the body swallowed it: the task goes
            # on to other work (the next alarm), which must not inherit it.
            if task.uncancel() == 0 and exc_type is asyncio.CancelledError:
                raise TimeoutError from exc


class ClockTimeout:
    """`async with ClockTimeout(clock, seconds):` cancels the body when the clock says so.

    Like `asyncio.timeout`, but on the runtime's clock, so a virtual clock can
    expire it. Raises `TimeoutError` out of the block when it expired.
    """

    def __init__(self, clock: Clock, seconds: float | None) -> None:
        self._clock = clock
        self._seconds = seconds
        self._handle: Timer | None = None
        self._task: asyncio.Task[Any] | None = None
        self.expired = False

    async def __aenter__(self) -> ClockTimeout:
        if self._seconds is not None:
            self._task = asyncio.current_task()
            when = self._clock.now_ms() + round(self._seconds * 1000)
            self._handle = self._clock.call_at_ms(when, self._expire)
        return self

    def _expire(self) -> None:
        if self._task is not None and not self._task.done():
            self.expired = True
            self._task.cancel()

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: Any) -> bool:
        # Drop the handle (its callback is our bound method) and the task: left in
        # place they form a cycle that keeps the finished task for the cyclic GC.
        handle, task, self._handle, self._task = self._handle, self._task, None, None
        if handle is not None:
            handle.cancel()
        if self.expired and exc_type is asyncio.CancelledError and task is not None:
            if task.uncancel() == 0:
                raise TimeoutError from exc
        return False


class SystemClock:
    """Wall-clock time (epoch milliseconds) with timers on the event loop.

    Nobody waits for the wall clock to be idle, so it has no busy tracker: the
    runtime's tasks are plain tasks and waits are plain awaits (these sit on the
    hot path of every alarm).
    """

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def call_at_ms(self, when_ms: int, callback: Callable[[], None]) -> TimerHandle:
        handle = TimerHandle(when_ms, callback)
        delay = max(0.0, (when_ms - self.now_ms()) / 1000.0)
        handle._loop_handle = asyncio.get_running_loop().call_later(delay, callback)
        return handle

    async def sleep_until_ms(self, when_ms: int) -> None:
        await Wakeup(self).wait(when_ms)

    async def sleep(self, seconds: float) -> None:
        await Wakeup(self).wait(self.now_ms() + round(seconds * 1000))


class VirtualClock:
    """A clock that only moves when a test tells it to.

    `await clock.advance(seconds)` fires every timer that falls due, in time order,
    including timers set by the work those timers set off, and returns once the
    runtime is idle at the target time: every runtime on this clock does its busy
    accounting on `tracker`.
    """

    def __init__(self, start_ms: int = 1_800_000_000_000) -> None:
        self.tracker = BusyTracker()
        self._now = int(start_ms)
        self._timers: list[tuple[int, int, TimerHandle]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self._now

    def call_at_ms(self, when_ms: int, callback: Callable[[], None]) -> TimerHandle:
        handle = TimerHandle(int(when_ms), callback)
        heapq.heappush(self._timers, (handle.when_ms, next(self._seq), handle))
        return handle

    async def sleep_until_ms(self, when_ms: int) -> None:
        await Wakeup(self, self.tracker).wait(when_ms)

    async def sleep(self, seconds: float) -> None:
        await Wakeup(self, self.tracker).wait(self._now + round(seconds * 1000))

    async def idle_wait(self, awaitable: Awaitable[T]) -> T:
        """Await, from a tracked task, something other tracked work finishes."""
        return await self.tracker.idle_wait(awaitable)

    @property
    def busy(self) -> int:
        return self.tracker.busy

    def next_timer_ms(self) -> int | None:
        """When the next live timer is due, or None."""
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    async def settle(self) -> None:
        """Wait until no tracked task is busy (and the loop has run what is ready)."""
        await self.tracker.settle()

    async def advance(self, seconds: float) -> None:
        """Move time forward by `seconds`, firing due timers in order."""
        if seconds < 0:
            raise ValueError("advance() takes a non-negative number of seconds")
        target = self._now + round(seconds * 1000)
        await self.settle()
        while True:
            due = self.next_timer_ms()
            if due is None or due > target:
                break
            self._now = max(self._now, due)
            self._fire_due()
            await self.settle()
        self._now = target
        await self.settle()

    async def advance_to_ms(self, when_ms: int) -> None:
        await self.advance(max(0, when_ms - self._now) / 1000.0)

    def _fire_due(self) -> None:
        while self._timers and self._timers[0][0] <= self._now:
            _, _, handle = heapq.heappop(self._timers)
            if not handle.cancelled:
                handle.callback()
