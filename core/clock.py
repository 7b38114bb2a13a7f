"""Time for the runtime: a `Clock` protocol, the wall clock and a virtual clock.

Every timer in the runtime goes through a clock so that tests can jump through
hours of retries in milliseconds. The virtual clock also knows when the runtime
is *idle*: runtime tasks are tracked, and a tracked task counts as busy except
while it waits on the clock. `VirtualClock.advance` moves from one due timer to
the next and waits for idleness at each, so results do not depend on the speed
of the machine.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

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


class Clock(Protocol):
    """What the runtime needs from time."""

    def now_ms(self) -> int: ...

    def call_at_ms(self, when_ms: int, callback: Callable[[], None]) -> TimerHandle: ...

    async def sleep_until_ms(self, when_ms: int) -> None: ...

    async def sleep(self, seconds: float) -> None: ...

    def spawn(self, coro: Coroutine[Any, Any, T], name: str | None = None) -> asyncio.Task[T]: ...

    async def idle_wait(self, awaitable: Awaitable[T]) -> T: ...


class _TrackingMixin:
    """Busy accounting shared by both clocks (a no-op cost for the wall clock)."""

    def __init__(self) -> None:
        self._busy = 0
        self._tracked: set[asyncio.Task[Any]] = set()
        self._idle: asyncio.Event | None = None

    def _idle_event(self) -> asyncio.Event:
        if self._idle is None:
            self._idle = asyncio.Event()
            if self._busy == 0:
                self._idle.set()
        return self._idle

    def _acquire(self) -> None:
        self._busy += 1
        if self._idle is not None:
            self._idle.clear()

    def _release(self) -> None:
        self._busy -= 1
        if self._busy == 0 and self._idle is not None:
            self._idle.set()

    def _is_tracked(self) -> bool:
        task = asyncio.current_task()
        return task is not None and task in self._tracked

    def spawn(self, coro: Coroutine[Any, Any, T], name: str | None = None) -> asyncio.Task[T]:
        """Start a runtime task that counts as busy until it ends or waits on the clock."""
        self._acquire()
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tracked.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tracked.discard(task)
        self._release()

    async def idle_wait(self, awaitable: Awaitable[T]) -> T:
        """Await something that is not work of the runtime (a queue, a lock held elsewhere).

        A tracked task waiting here is not busy. Whoever wakes it is expected to be
        busy itself until the woken task has run (a handler awaiting its commit, say).
        """
        if not self._is_tracked():
            return await awaitable
        self._release()
        try:
            return await awaitable
        finally:
            self._acquire()

    async def _wait_timer(self, when_ms: int) -> None:
        await Wakeup(self).wait(when_ms)

    def call_at_ms(self, when_ms: int, callback: Callable[[], None]) -> TimerHandle:
        raise NotImplementedError


class Wakeup:
    """Wait until a time or until poked, whichever comes first.

    Whoever wakes a tracked waiter (the clock's timer or `poke`) takes the busy
    token for it before it runs, so a virtual clock never sees an idle gap
    between a cause and its effect.
    """

    def __init__(self, clock: _TrackingMixin) -> None:
        self._clock = clock
        self._fut: asyncio.Future[None] | None = None
        self._tracked = False
        self._poked = False

    def poke(self) -> None:
        fut = self._fut
        if fut is None:
            self._poked = True
        elif not fut.done():
            self._wake(fut)

    def _wake(self, fut: asyncio.Future[None]) -> None:
        if self._tracked:
            self._clock._acquire()
        fut.set_result(None)

    async def wait(self, when_ms: int | None) -> None:
        """Return at `when_ms` (never, if None) or when poked; a poke before `wait` counts."""
        if self._poked:
            self._poked = False
            return
        clock = self._clock
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._fut, self._tracked = fut, clock._is_tracked()

        def fire() -> None:
            if not fut.done():
                self._wake(fut)

        handle = clock.call_at_ms(when_ms, fire) if when_ms is not None else None
        if self._tracked:
            clock._release()
        try:
            await fut
        finally:
            self._fut = None
            if not (fut.done() and not fut.cancelled()):
                # Cancelled while waiting: nobody handed us the token.
                if handle is not None:
                    handle.cancel()
                if self._tracked:
                    clock._acquire()
            elif handle is not None:
                handle.cancel()


class SharedTimers:
    """Many timers on one clock timer: `call_at_ms` like a clock's, for timers that are
    nearly always cancelled long before they fire (a timeout per alarm attempt).

    Only the earliest pending timer is on the clock. Cancelled timers are dropped
    lazily, and the heap is rebuilt when they outnumber the live ones, so memory
    stays proportional to the live timers.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._heap: list[tuple[int, int, _SharedHandle]] = []
        self._seq = itertools.count()
        self._live = 0
        self._armed: TimerHandle | None = None

    def call_at_ms(self, when_ms: int, callback: Callable[[], None]) -> TimerHandle:
        handle = _SharedHandle(int(when_ms), callback, self)
        heapq.heappush(self._heap, (handle.when_ms, next(self._seq), handle))
        self._live += 1
        if len(self._heap) > 64 and len(self._heap) > 2 * self._live:
            self._heap = [e for e in self._heap if not e[2].cancelled]
            heapq.heapify(self._heap)
        if self._armed is None or handle.when_ms < self._armed.when_ms:
            self._arm()
        return handle

    def _arm(self) -> None:
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        if self._armed is not None:
            self._armed.cancel()
            self._armed = None
        if heap:
            self._armed = self._clock.call_at_ms(heap[0][0], self._fire)

    def _fire(self) -> None:
        self._armed = None
        now, heap = self._clock.now_ms(), self._heap
        while heap and heap[0][0] <= now:
            _, _, handle = heapq.heappop(heap)
            if not handle.cancelled:
                handle.cancelled = True  # fired: no longer live
                self._live -= 1
                handle.callback()
        self._arm()


class _SharedHandle(TimerHandle):
    __slots__ = ("_owner",)

    def __init__(self, when_ms: int, callback: Callable[[], None], owner: SharedTimers) -> None:
        super().__init__(when_ms, callback)
        self._owner = owner

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self._owner._live -= 1


class ClockTimeout:
    """`async with ClockTimeout(clock, seconds):` cancels the body when the clock says so.

    Like `asyncio.timeout`, but on the runtime's clock, so a virtual clock can
    expire it. Raises `TimeoutError` out of the block when it expired.
    """

    def __init__(self, clock: Clock, seconds: float | None,
                 timers: SharedTimers | None = None) -> None:
        self._clock = clock
        self._timers: Clock | SharedTimers = timers or clock
        self._seconds = seconds
        self._handle: TimerHandle | None = None
        self._task: asyncio.Task[Any] | None = None
        self.expired = False

    async def __aenter__(self) -> ClockTimeout:
        if self._seconds is not None:
            self._task = asyncio.current_task()
            when = self._clock.now_ms() + round(self._seconds * 1000)
            self._handle = self._timers.call_at_ms(when, self._expire)
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


class SystemClock(_TrackingMixin):
    """Wall-clock time (epoch milliseconds) with timers on the event loop.

    Nobody waits for the wall clock to be idle, so it keeps no busy accounting: its
    tasks are plain tasks and `idle_wait` is a plain await (these sit on the hot path
    of every alarm).
    """

    def spawn(self, coro: Coroutine[Any, Any, T], name: str | None = None) -> asyncio.Task[T]:
        return asyncio.get_running_loop().create_task(coro, name=name)

    def _is_tracked(self) -> bool:
        return False

    async def idle_wait(self, awaitable: Awaitable[T]) -> T:
        return await awaitable

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def call_at_ms(self, when_ms: int, callback: Callable[[], None]) -> TimerHandle:
        handle = TimerHandle(when_ms, callback)
        delay = max(0.0, (when_ms - self.now_ms()) / 1000.0)
        handle._loop_handle = asyncio.get_running_loop().call_later(delay, callback)
        return handle

    async def sleep_until_ms(self, when_ms: int) -> None:
        await self._wait_timer(when_ms)

    async def sleep(self, seconds: float) -> None:
        await self._wait_timer(self.now_ms() + round(seconds * 1000))


class VirtualClock(_TrackingMixin):
    """A clock that only moves when a test tells it to.

    `await clock.advance(seconds)` fires every timer that falls due, in time order,
    including timers set by the work those timers set off, and returns once the
    runtime is idle at the target time.
    """

    def __init__(self, start_ms: int = 1_800_000_000_000) -> None:
        super().__init__()
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
        await self._wait_timer(when_ms)

    async def sleep(self, seconds: float) -> None:
        await self._wait_timer(self._now + round(seconds * 1000))

    def next_timer_ms(self) -> int | None:
        """When the next live timer is due, or None."""
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        return self._timers[0][0] if self._timers else None

    async def settle(self) -> None:
        """Wait until no tracked task is busy (and the loop has run what is ready)."""
        while True:
            await self._idle_event().wait()
            # Let callbacks that are already scheduled run; they may start new work.
            for _ in range(3):
                await asyncio.sleep(0)
            if self._busy == 0:
                return

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
