"""Who owns the runtime's tasks, and when the runtime is idle.

`Supervisor` owns every background task of one runtime: the scheduler loop, alarm
workers, the hibernation reaper, cron jobs, blockers. `close()` cancels whatever is
still running and awaits it, so no task outlives the runtime that started it. It
is shaped like `asyncio.TaskGroup` (spawn inside, cancel and join on exit) with one
difference a runtime needs: a task that fails is logged and its awaiters see the
error, but its siblings go on (one failing handler must not stop the scheduler).

`BusyTracker` is the idleness accounting a `VirtualClock` needs: a tracked task
counts as busy except while it waits on the clock (`Wakeup`) or on something that
other tracked work will finish (`idle_wait`). `VirtualClock.advance` moves time
only once no tracked task is busy. A wall clock has no tracker: nobody waits for
it to be idle, and the hot paths then pay nothing for the accounting.

`patience(seconds)` bounds how long the current task waits for its turn at an
object (an operator command must not queue behind a stuck handler for minutes);
it belongs to the task that set it, not to tasks it starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from alarmtop.core.ports import Clock

T = TypeVar("T")
log = logging.getLogger("alarmtop.runtime")


class BusyTracker:
    """Counts tracked tasks that are doing work (not waiting on the clock)."""

    def __init__(self) -> None:
        self.busy = 0
        self._tracked: set[asyncio.Task[Any]] = set()
        self._idle: asyncio.Event | None = None

    def _idle_event(self) -> asyncio.Event:
        if self._idle is None:
            self._idle = asyncio.Event()
            if self.busy == 0:
                self._idle.set()
        return self._idle

    def acquire(self) -> None:
        self.busy += 1
        if self._idle is not None:
            self._idle.clear()

    def release(self) -> None:
        self.busy -= 1
        if self.busy == 0 and self._idle is not None:
            self._idle.set()

    def track(self, task: asyncio.Task[Any]) -> None:
        """Count `task` as busy until it ends (the caller acquired for it already)."""
        self._tracked.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tracked.discard(task)
        self.release()

    def is_tracked(self) -> bool:
        task = asyncio.current_task()
        return task is not None and task in self._tracked

    async def idle_wait(self, awaitable: Awaitable[T]) -> T:
        """Await something that is not work of the waiting task itself.

        Whoever finishes it must be tracked work (a blocker, the event ahead in the
        object's queue, a database write's thread): it carries the busy token
        meanwhile, so time does not move while it runs.
        """
        if not self.is_tracked():
            return await awaitable
        self.release()
        try:
            return await awaitable
        finally:
            self.acquire()

    async def settle(self) -> None:
        """Wait until no tracked task is busy (and the loop has run what is ready)."""
        while True:
            await self._idle_event().wait()
            # Callbacks already scheduled may start new work: let them run first.
            for _ in range(3):
                await asyncio.sleep(0)
            if self.busy == 0:
                return


# (the task that set it, the loop time it ends at, the seconds it was given)
_PATIENCE: contextvars.ContextVar[tuple[asyncio.Task[Any], float, float] | None] = \
    contextvars.ContextVar("alarmtop_patience", default=None)


@contextlib.contextmanager
def patience(seconds: float | None) -> Iterator[None]:
    """Within the block, the current task waits at most `seconds` (loop time) for an
    object's turn; then the wait raises `ObjectBusy` and nothing of what it waited to
    do has been done. None: wait as long as it takes.

    Kept in a context variable but honoured only by the task that set it: a task
    started inside the block (a blocker, a background write) inherits the variable,
    and must not inherit a caller's hurry."""
    task = asyncio.current_task()
    if seconds is None or task is None:
        yield
        return
    token = _PATIENCE.set((task, asyncio.get_running_loop().time() + seconds, seconds))
    try:
        yield
    finally:
        _PATIENCE.reset(token)


def patience_left() -> tuple[float, float] | None:
    """(seconds left, seconds given) of the current task's patience, or None."""
    found = _PATIENCE.get()
    if found is None or found[0] is not asyncio.current_task():
        return None
    return max(0.0, found[1] - asyncio.get_running_loop().time()), found[2]


@runtime_checkable
class TracksBusy(Protocol):
    """A clock whose `advance` waits for idleness (the virtual clock)."""

    tracker: BusyTracker


def tracker_of(clock: Clock) -> BusyTracker | None:
    return clock.tracker if isinstance(clock, TracksBusy) else None


async def idle_wait(tracker: BusyTracker | None, awaitable: Awaitable[T]) -> T:
    """`tracker.idle_wait(awaitable)`, or a plain await when nothing is tracked."""
    if tracker is None:
        return await awaitable
    return await tracker.idle_wait(awaitable)


class Wakeup:
    """Wait until a time or until poked, whichever comes first.

    Whoever wakes a tracked waiter (the clock's timer or `poke`) takes the busy
    token for it before it runs, so a virtual clock never sees an idle gap
    between a cause and its effect.
    """

    def __init__(self, clock: Clock, tracker: BusyTracker | None = None) -> None:
        self._clock = clock
        # The clock's own tracker unless told otherwise: a waiter on a virtual clock is
        # idle while it waits.
        self._tracker = tracker if tracker is not None else tracker_of(clock)
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
        if self._tracked and self._tracker is not None:
            self._tracker.acquire()
        fut.set_result(None)

    async def wait(self, when_ms: int | None) -> None:
        """Return at `when_ms` (never, if None) or when poked; a poke before `wait` counts."""
        if self._poked:
            self._poked = False
            return
        tracker = self._tracker
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._fut = fut
        self._tracked = tracker is not None and tracker.is_tracked()

        def fire() -> None:
            if not fut.done():
                self._wake(fut)

        handle = self._clock.call_at_ms(when_ms, fire) if when_ms is not None else None
        if self._tracked and tracker is not None:
            tracker.release()
        try:
            await fut
        finally:
            self._fut = None
            if handle is not None:
                handle.cancel()
            if not (fut.done() and not fut.cancelled()) and self._tracked and \
                    tracker is not None:
                tracker.acquire()  # cancelled while waiting: nobody handed us the token


class Supervisor:
    """Owns a runtime's tasks: `spawn` starts one, `close` cancels and joins them all."""

    def __init__(self, tracker: BusyTracker | None = None, name: str = "runtime") -> None:
        self.tracker = tracker
        self.name = name
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, T], name: str | None = None, *,
              report: bool = True) -> asyncio.Task[T]:
        """Start `coro` as a task this supervisor owns (busy until it ends or waits).

        `report`: log the task's failure (False when an awaiter handles it)."""
        if self._closed:
            coro.close()
            raise RuntimeError(f"the {self.name} supervisor is closed; start the runtime first")
        tracker = self.tracker
        if tracker is not None:
            tracker.acquire()
        task = asyncio.get_running_loop().create_task(coro, name=name)
        if tracker is not None:
            tracker.track(task)
        self._tasks.add(task)
        task.add_done_callback(self._finished if report else self._tasks.discard)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # Retrieved here so asyncio does not warn at collection; awaiters still see it.
            log.error("task %s of the %s failed", task.get_name(), self.name,
                      exc_info=task.exception())

    def wakeup(self, clock: Clock) -> Wakeup:
        return Wakeup(clock, self.tracker)

    async def idle_wait(self, awaitable: Awaitable[T]) -> T:
        return await idle_wait(self.tracker, awaitable)

    def reopen(self) -> None:
        """Accept tasks again (a runtime started after it was stopped)."""
        self._closed = False

    async def close(self, grace_s: float | None = None) -> int:
        """Cancel every task still running and wait for them to end; returns how many
        were left behind.

        `grace_s` bounds the wait: a task that ignores cancellation for longer is left
        behind (logged) rather than holding shutdown up forever.
        """
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if not tasks:
            return 0
        _, pending = await asyncio.wait(tasks, timeout=grace_s)
        for task in pending:
            log.warning("task %s of the %s did not stop within %ss of being cancelled",
                        task.get_name(), self.name, grace_s)
        return len(pending)


class Blocker:
    """What `ctx.block_concurrency_while` returns: await it for `fn`'s result.

    Awaiting it is waiting on tracked work (the blocker's own task), so a waiting
    test task does not count as busy while the blocker sleeps on the clock.
    """

    __slots__ = ("_tracker", "task")

    def __init__(self, task: asyncio.Task[Any], tracker: BusyTracker | None) -> None:
        self.task = task
        self._tracker = tracker

    def __await__(self) -> Generator[Any, None, Any]:
        return idle_wait(self._tracker, self.task).__await__()

    def done(self) -> bool:
        return self.task.done()

    def result(self) -> Any:
        return self.task.result()

    def cancel(self) -> bool:
        return self.task.cancel()

    def add_done_callback(self, fn: Callable[[asyncio.Task[Any]], None]) -> None:
        self.task.add_done_callback(fn)


async def finish_uncancelled(aw: Awaitable[T]) -> T:
    """Await `aw` to its end even if this task is cancelled meanwhile (then re-raise
    the cancellation): a commit cut off halfway would leave the caller not knowing
    whether it landed, and its cache disagreeing with the disk."""
    task = asyncio.ensure_future(aw)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done():
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return result



def _retrieve(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


async def bounded(step: Coroutine[Any, Any, None], within: float | None) -> bool:
    """Run `step` for at most `within` seconds (None: however long); whether it ended.

    Not under a timeout that awaits the step's end: a step gathering a task that
    ignores cancellation would never end, timeout or not. Left behind, it is
    cancelled, not awaited (if it ever ends, its error is not reported twice)."""
    task = asyncio.ensure_future(step)
    done, _ = await asyncio.wait({task}, timeout=within)
    if done:
        task.result()
        return True
    task.cancel()
    task.add_done_callback(_retrieve)
    return False
