"""Helpers for tests of your own objects and executions, on a `VirtualClock`.

Each helper that waits for something moves the runtime's virtual clock from one
due timer to the next (`VirtualClock.advance_to_ms`: what falls due then runs, and
the runtime is idle before the next timer), checking its
goal after each. It stops when the goal is reached and raises `NotReached`,
saying what state it did reach, once `within` seconds of virtual time (a day by
default) or `max_steps` timers have passed: a test never loops forever. No helper
sleeps on the wall clock.

Nothing here imports pytest: the helpers work under any test runner. Nor does
importing it import the runtime (the pytest plugin is loaded by every pytest run
of the environment, and should cost it nothing).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from alarmtop.core import AlarmStatus, Attempt, DurableObject, Runtime, VirtualClock

T = TypeVar("T")

DAY_S = 24 * 3600.0
MAX_STEPS = 100_000
# The statuses an execution ends in (it changes no more unless an operator acts).
FINISHED = ("succeeded", "failed", "timed_out", "aborted")
STATUSES = ("running", "suspended", "succeeded", "failed", "timed_out", "needs_human",
            "aborted")


class NotReached(AssertionError):
    """A helper moved the virtual clock as far as it may and its goal was not reached.

    An `AssertionError`, so pytest reports it as a failed check. Fields: `goal`
    (what was waited for), `state` (what was seen last), `waited_s` (virtual
    seconds advanced), `timers` (timers fired on the way).
    """

    def __init__(self, goal: str, state: str, waited_s: float, timers: int, why: str) -> None:
        super().__init__(f"{goal}: not reached after {waited_s:g} s of virtual time "
                         f"({timers} timers fired; {why}); last seen: {state}")
        self.goal = goal
        self.state = state
        self.waited_s = waited_s
        self.timers = timers


def virtual_clock_of(rt: Runtime) -> VirtualClock:
    """The runtime's `VirtualClock`, or `TypeError` saying how to get one."""
    from alarmtop.core import VirtualClock

    clock = rt.clock
    if not isinstance(clock, VirtualClock):
        raise TypeError(f"this helper moves a VirtualClock, and the runtime runs on "
                        f"{type(clock).__name__}: build it with Runtime(..., "
                        "clock=VirtualClock()) or use the alarmtop_runtime fixture")
    if not rt.running:
        raise RuntimeError("the runtime is not running: start it first (await rt.start(), "
                           "or the alarmtop_runtime fixture)")
    return clock


async def _value(fn: Callable[[], Any]) -> Any:
    out = fn()
    return await out if inspect.isawaitable(out) else out


class GiveUp(Exception):
    """Raised by a check given to `until` to stop waiting: the goal can no longer be
    reached (say, the execution ended). `until` turns it into `NotReached`."""


async def until(rt: Runtime, check: Callable[[], Awaitable[T | None]] | Callable[[], T | None],
                *, what: str = "the check",
                within: float = DAY_S, max_steps: int = MAX_STEPS,
                state: Callable[[], Any] | None = None) -> T:
    """Advance the virtual clock, timer by timer, until `check()` returns something true.

    Args:
        rt: a running runtime on a `VirtualClock`.
        check: sync or async, called once now and after each timer; its first true
            result is returned. It may raise `GiveUp` to stop early.
        what: the goal, for the error message.
        within: virtual seconds to advance at most.
        max_steps: timers to fire at most (a handler that re-arms a millisecond later,
            forever, would otherwise take a day's worth of steps).
        state: sync or async; describes what was reached, for the error message
            (default: the last result of `check`).

    Raises:
        NotReached: the goal was not reached in time, or `check` gave up.

    Example (a fragment of a test):

        await rt.get(Counter, "c").add(5)        # flushes on a debounce alarm
        await until(rt, rt.get(Counter, "c").flushed, what="the flush")
    """
    clock = virtual_clock_of(rt)
    start = clock.now_ms()
    deadline = start + round(within * 1000)
    await clock.settle()
    timers = 0
    seen: Any = None
    why = ""
    try:
        while True:
            seen = await _value(check)
            if seen:
                return seen  # type: ignore[no-any-return]
            due = clock.next_timer_ms()
            if due is None:
                why = "nothing was left to run"
                break
            if timers >= max_steps:
                why = f"{max_steps} timers is the limit (max_steps=)"
                break
            if due > deadline:
                # Nothing fires before the deadline, but time itself may be the goal.
                await clock.advance_to_ms(deadline)
                seen = await _value(check)
                if seen:
                    return seen  # type: ignore[no-any-return]
                why = f"within={within:g} s is the limit"
                break
            await clock.advance_to_ms(due)  # one due time: the goal is checked after each
            timers += 1
    except GiveUp as exc:
        why = str(exc)
    last = await _value(state) if state is not None else repr(seen)
    raise NotReached(what, str(last), (clock.now_ms() - start) / 1000, timers, why)


def _class_name(cls: type[DurableObject] | str) -> str:
    return cls if isinstance(cls, str) else cls.__name__


def describe_alarm(status: AlarmStatus | None, now_ms: int) -> str:
    """One line on an alarm, for error messages: state, retries, next attempt, error."""
    if status is None:
        return "no alarm (never set, deleted, or it succeeded and was cleared)"
    text = f"{status.state}, retry {status.retry_count} of {status.max_retries}"
    if status.next_attempt_ms is not None:
        text += f", next attempt in {(status.next_attempt_ms - now_ms) / 1000:g} s"
    if status.last_error:
        text += f", last error: {status.last_error}"
    return text


async def until_dead(rt: Runtime, cls: type[DurableObject] | str, name: str, *,
                     within: float = DAY_S, max_steps: int = MAX_STEPS) -> AlarmStatus:
    """Advance until the alarm of `cls`/`name` is a dead letter; returns its status.

    Example (a fragment of a test): an alarm that always raises walks the default
    ladder (attempts at +0, 2, 6, 14, 30, 62 and 126 s) in milliseconds.

        await rt.get(Flaky, "p0").arm()
        dead = await until_dead(rt, Flaky, "p0")
        assert await ladder(rt, Flaky, "p0") == [0, 2, 6, 14, 30, 62, 126]
    """
    clock = virtual_clock_of(rt)
    found: list[AlarmStatus | None] = [None]

    async def check() -> AlarmStatus | None:
        found[0] = status = await rt.alarm(cls, name)
        return status if status is not None and status.state == "dead" else None

    return await until(rt, check, what=f"the alarm of {_class_name(cls)}/{name} dead",
                       within=within, max_steps=max_steps,
                       state=lambda: describe_alarm(found[0], clock.now_ms()))


def _check_statuses(statuses: Sequence[str]) -> tuple[str, ...]:
    wanted = tuple(statuses) or FINISHED
    for status in wanted:
        if status not in STATUSES:
            raise ValueError(f"{status!r} is not an execution status; statuses: "
                             f"{', '.join(STATUSES)}")
    return wanted


def describe_execution(d: dict[str, Any] | None) -> str:
    """One line on an execution, for error messages: status, what it waits on, error."""
    if d is None:
        return "no such execution"
    text = str(d["status"])
    if d.get("paused"):
        text += " (paused)"
    if d.get("blocked_on"):
        text += f", {d['blocked_on']}"
    if d.get("error"):
        text += f", error: {d['error']}"
    return text


async def _describe(rt: Runtime, execution_id: str) -> dict[str, Any] | None:
    from alarmtop.core.durable import UnknownExecution
    try:
        return await rt.executions.describe(execution_id)
    except UnknownExecution:
        return None  # started, but its first invocation has not run yet


async def until_status(rt: Runtime, execution_id: str, *statuses: str, within: float = DAY_S,
                       max_steps: int = MAX_STEPS) -> dict[str, Any]:
    """Advance until execution `execution_id` has one of `statuses` (default: any
    finished one: succeeded, failed, timed_out, aborted); returns its `describe()`.

    Example (a fragment of a test):

        eid = await rt.executions.start("trip", {"trip": "t1"})
        d = await until_status(rt, eid, "succeeded")
        assert d["result"] == "paid booking-t1"
    """
    wanted = _check_statuses(statuses)
    found: list[dict[str, Any] | None] = [None]

    async def check() -> dict[str, Any] | None:
        found[0] = d = await _describe(rt, execution_id)
        return d if d is not None and d["status"] in wanted else None

    return await until(rt, check, what=f"execution {execution_id} {' or '.join(wanted)}",
                       within=within, max_steps=max_steps,
                       state=lambda: describe_execution(found[0]))


async def attempts(rt: Runtime, cls: type[DurableObject] | str, name: str) -> list[Attempt]:
    """The recorded attempts of the alarm of `cls`/`name` (start, end, error of each:
    the first few and the latest, see `Runtime(keep_attempts=)`).

    Raises `LookupError` when it has no alarm (never set, or it succeeded: a
    successful alarm is cleared with its attempts).

    Example (a fragment of a test):

        [first, *_] = await attempts(rt, Flaky, "p0")
        assert "payment backend down" in first.error
    """
    status = await rt.alarm(cls, name)
    if status is None:
        raise LookupError(f"{_class_name(cls)}/{name} has no alarm: never set, deleted, or "
                          "it succeeded (a successful alarm is cleared with its attempts)")
    return list(status.attempts)


async def ladder(rt: Runtime, cls: type[DurableObject] | str, name: str) -> list[float]:
    """When each recorded attempt of the alarm started, in seconds after the first.

    Example (a fragment of a test): `assert await ladder(rt, Flaky, "p0") == [0, 2, 6]`.
    """
    tried = await attempts(rt, cls, name)
    return [(a.start_ms - tried[0].start_ms) / 1000 for a in tried]


async def waiting_callback(rt: Runtime, execution_id: str, name: str, *,
                           within: float = DAY_S, max_steps: int = MAX_STEPS) -> str:
    """Advance until execution `execution_id` waits on its callback `name`; returns the
    callback id. Gives up early if the execution ends first.

    Example (a fragment of a test):

        cb = await waiting_callback(rt, eid, "verdict")
        await rt.executions.send_callback_heartbeat(cb)
    """
    found: list[dict[str, Any] | None] = [None]

    async def check() -> str | None:
        found[0] = d = await _describe(rt, execution_id)
        if d is None:
            return None
        for cb in d["callbacks"]:
            if cb["name"] == name and cb["status"] == "started":
                return str(cb["callback_id"])
        if d["status"] in FINISHED:
            raise GiveUp("the execution ended first")
        return None

    def state() -> str:
        d = found[0]
        names = [f"{c['name']} ({c['status']})" for c in d["callbacks"]] if d else []
        return f"{describe_execution(d)}; callbacks: {', '.join(names) or 'none'}"

    return await until(rt, check, what=f"execution {execution_id} waiting on callback {name!r}",
                       within=within, max_steps=max_steps, state=state)


async def send_callback(rt: Runtime, execution_id: str, name: str, payload: Any = None, *,
                        within: float = DAY_S) -> str:
    """Wait until the execution waits on its callback `name`, complete it with
    `payload`, and let the execution carry on (whatever is due now runs). Returns
    the callback id.

    Example (a fragment of a test):

        eid = await rt.executions.start("festival-stream", {"eventId": "e1"})
        await send_callback(rt, eid, "verdict", "cancel")
        assert (await until_status(rt, eid))["result"] == {"status": "cancelled"}
    """
    callback_id = await waiting_callback(rt, execution_id, name, within=within)
    await rt.executions.send_callback_success(callback_id, payload)
    await virtual_clock_of(rt).advance(0)
    return callback_id


async def fail_callback(rt: Runtime, execution_id: str, name: str,
                        error_type: str = "CallbackError", message: str = "", *,
                        within: float = DAY_S) -> str:
    """As `send_callback`, but the callback fails: `cb.result()` raises
    `CallbackExternalError(error_type, message)` in the handler.

    Example (a fragment of a test):

        await fail_callback(rt, eid, "approval", "Rejected", "fraud check")
    """
    callback_id = await waiting_callback(rt, execution_id, name, within=within)
    await rt.executions.send_callback_failure(callback_id, error_type, message)
    await virtual_clock_of(rt).advance(0)
    return callback_id


class Fault:
    """An injected fault: `id`, `clear()`; as a context manager, cleared on the way out
    (if it is still there: a fault with `times` is gone once used up)."""

    def __init__(self, rt: Runtime, fault_id: str) -> None:
        self.rt = rt
        self.id = fault_id

    @property
    def active(self) -> bool:
        """Whether the fault is still armed (or, for a delay, still running)."""
        return any(f["id"] == self.id for f in self.rt.faults.list())

    def clear(self) -> None:
        if self.active:
            self.rt.faults.clear(self.id)

    def __enter__(self) -> Fault:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.clear()


def inject_fault(rt: Runtime, target: str | tuple[type[DurableObject] | str, str], kind: str,
                 times: int | None = 1, **options: Any) -> Fault:
    """Inject a fault (see `rt.faults.inject` for the kinds and options); returns a
    `Fault` that clears it, or clears it at the end of a `with` block.

    `target` is an execution id, `"Class/name"` or a `(Class, name)` pair. An
    object fault whose class is not registered is refused: it would wait for an
    object that can never exist, and the test would pass for the wrong reason.

    Example (a fragment of a test): the next two attempts raise, the third succeeds.

        with inject_fault(rt, (Flaky, "p0"), "alarm_raise", times=2):
            await rt.get(Flaky, "p0").arm()
            await virtual_clock.advance(10)
    """
    if isinstance(target, tuple):
        cls, name = target
        target = f"{_class_name(cls)}/{name}"
    if kind.startswith("alarm_"):
        class_name = target.split("/", 1)[0]
        if rt.registered_class(class_name) is None:
            raise ValueError(f"fault target {target!r}: no class {class_name!r} is registered "
                             "with this runtime (register it, or check the spelling)")
    return Fault(rt, rt.faults.inject(target, kind, times, **options))
