"""Alarm state and retry decisions as plain data and pure functions.

Nothing here touches asyncio or a database: the scheduler asks these functions what
the next state of an alarm is and then makes it durable. Each transition returns
the new record (or None when the alarm is gone) and the events it announces.
"""

from __future__ import annotations

import enum
import math
import random
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple


class AlarmState(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    RETRYING = "retrying"
    DEAD = "dead"


MAX_DELAY_S = 30 * 24 * 3600.0  # the longest gap between two attempts


@dataclass(frozen=True)
class RetryPolicy:
    """How failed alarm handlers are retried.

    The default retries 6 times, 2 s after the first failure and doubling, so the
    7 attempts start at about +0, 2, 6, 14, 30, 62 and 126 s.
    """

    max_retries: int = 6
    initial_delay_s: float = 2.0
    backoff_rate: float = 2.0
    max_delay_s: float | None = None
    jitter: float = 0.0  # fraction of each delay drawn at random, 0 <= jitter <= 1

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError("RetryPolicy.max_retries must be >= 0")
        if self.initial_delay_s < 0 or self.backoff_rate < 1:
            raise ValueError("RetryPolicy needs initial_delay_s >= 0 and backoff_rate >= 1")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("RetryPolicy.jitter is a fraction between 0 and 1")


def next_delay(policy: RetryPolicy, retry_number: int, rng: random.Random | None = None) -> float:
    """Seconds between a failure and retry number `retry_number` (1-based)."""
    try:
        delay = policy.initial_delay_s * policy.backoff_rate ** (retry_number - 1)
    except OverflowError:
        delay = math.inf
    # Without a cap of its own, a long ladder still stays storable (and sane).
    delay = min(delay, policy.max_delay_s if policy.max_delay_s is not None else MAX_DELAY_S)
    if policy.jitter and rng is not None:
        delay -= delay * policy.jitter * rng.random()
    return delay


@dataclass(frozen=True)
class Attempt:
    start_ms: int
    end_ms: int | None
    error: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"start_ms": self.start_ms, "end_ms": self.end_ms, "error": self.error}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Attempt:
        return Attempt(d["start_ms"], d.get("end_ms"), d.get("error"))


AlarmKey = tuple[str, str]  # (object class, object name)


@dataclass(frozen=True)
class AlarmRecord:
    """Everything the runtime knows about one object's alarm."""

    object_class: str
    object_name: str
    scheduled_ms: int
    state: AlarmState = AlarmState.PENDING
    retry_count: int = 0
    next_attempt_ms: int | None = None
    last_error: str | None = None
    attempts: tuple[Attempt, ...] = field(default_factory=tuple)
    started_ms: int | None = None  # start of the attempt in progress

    @property
    def key(self) -> AlarmKey:
        return (self.object_class, self.object_name)

    @property
    def due_ms(self) -> int | None:
        """When the scheduler should next run this alarm (None: never, it is dead)."""
        return None if self.state is AlarmState.DEAD else self.next_attempt_ms

    def user_view(self) -> int | None:
        """What `get_alarm()` shows to the object's own code."""
        if self.state is AlarmState.DEAD:
            return None
        return self.next_attempt_ms


# Tuples rather than frozen dataclasses: every firing makes two transitions and their
# announcements, and a tuple costs half as much to build.
class Announcement(NamedTuple):
    type: str
    data: dict[str, Any]


class Transition(NamedTuple):
    record: AlarmRecord | None
    events: tuple[Announcement, ...] = ()


def _ann(type_: str, rec: AlarmRecord, **data: Any) -> Announcement:
    return Announcement(type_, {"object": f"{rec.object_class}/{rec.object_name}", **data})


def set_alarm(key: AlarmKey, at_ms: int) -> Transition:
    rec = AlarmRecord(key[0], key[1], scheduled_ms=at_ms, next_attempt_ms=at_ms)
    return Transition(rec, (_ann("alarm.set", rec, scheduled_ms=at_ms),))


def delete_alarm(rec: AlarmRecord) -> Transition:
    return Transition(None, (_ann("alarm.deleted", rec),))


def start_attempt(rec: AlarmRecord, now_ms: int) -> Transition:
    # Spelled out rather than `replace(...)`, which costs twice as much: once per firing.
    started = AlarmRecord(rec.object_class, rec.object_name, rec.scheduled_ms,
                          AlarmState.RUNNING, rec.retry_count, rec.next_attempt_ms,
                          rec.last_error, rec.attempts, now_ms)
    return Transition(
        started,
        (_ann("alarm.fired", rec, retry_count=rec.retry_count, scheduled_ms=rec.scheduled_ms,
              lateness_ms=now_ms - (rec.next_attempt_ms or now_ms)),),
    )


def succeed(rec: AlarmRecord, now_ms: int, new_alarm_ms: int | None) -> Transition:
    """The handler returned. A new alarm set by the handler survives; else the alarm is done.

    A later alarm that an earlier failing attempt set (kept in `scheduled_ms` while
    the retry ran first) survives too: success does not swallow it.
    """
    done = _ann("alarm.succeeded", rec, retry_count=rec.retry_count,
                duration_ms=now_ms - (rec.started_ms or now_ms))
    if new_alarm_ms is None and rec.scheduled_ms > now_ms:
        new_alarm_ms = rec.scheduled_ms
    if new_alarm_ms is None:
        return Transition(None, (done,))
    nxt = AlarmRecord(rec.object_class, rec.object_name, new_alarm_ms, next_attempt_ms=new_alarm_ms)
    return Transition(nxt, (done, _ann("alarm.set", nxt, scheduled_ms=new_alarm_ms)))


def fail(
    rec: AlarmRecord,
    now_ms: int,
    error: str,
    policy: RetryPolicy,
    new_alarm_ms: int | None = None,
    rng: random.Random | None = None,
    crashed: bool = False,
) -> Transition:
    """The handler raised, timed out, or the process died during it.

    A new alarm set before the raise does not hide the failure: the retry runs at
    the earlier of the retry time and the new alarm, and the retry count goes on.
    """
    attempt = Attempt(rec.started_ms if rec.started_ms is not None else now_ms,
                      None if crashed else now_ms, error)
    attempts = (*rec.attempts, attempt)
    retry = rec.retry_count + 1
    scheduled = new_alarm_ms if new_alarm_ms is not None else rec.scheduled_ms
    base = replace(rec, attempts=attempts, last_error=error, started_ms=None,
                   scheduled_ms=scheduled)
    failed = _ann("alarm.failed", rec, retry_count=rec.retry_count, error=error,
                  last_attempt=retry > policy.max_retries, crashed=crashed)
    if retry > policy.max_retries:
        dead = replace(base, state=AlarmState.DEAD, next_attempt_ms=None)
        return Transition(dead, (failed, _ann("alarm.dead", dead, attempts=len(attempts),
                                              error=error)))
    delay_ms = 0 if crashed else math.ceil(next_delay(policy, retry, rng) * 1000)
    at = now_ms + delay_ms
    if new_alarm_ms is not None:
        at = min(at, new_alarm_ms)
    retrying = replace(base, state=AlarmState.RETRYING, retry_count=retry, next_attempt_ms=at)
    events = [failed, _ann("alarm.retry_scheduled", retrying, retry_count=retry,
                           next_attempt_ms=at, max_retries=policy.max_retries)]
    if is_near_exhaustion(retrying, policy):
        events.append(_ann("alarm.near_exhaustion", retrying, retry_count=retry,
                           next_attempt_ms=at, max_retries=policy.max_retries))
    return Transition(retrying, tuple(events))


def is_near_exhaustion(rec: AlarmRecord, policy: RetryPolicy) -> bool:
    """True when the next attempt is the last one: one more failure makes it dead."""
    return rec.state in (AlarmState.RETRYING, AlarmState.RUNNING) and (
        rec.retry_count >= policy.max_retries and rec.retry_count > 0
    )


def rearm(rec: AlarmRecord, at_ms: int) -> Transition:
    """An operator gives the alarm a fresh ladder: retry count and attempts reset."""
    fresh = AlarmRecord(rec.object_class, rec.object_name, at_ms, next_attempt_ms=at_ms)
    return Transition(fresh, (_ann("alarm.rearmed", fresh, at_ms=at_ms,
                                   previous_state=rec.state.value,
                                   previous_retry_count=rec.retry_count),))


def fire_now(rec: AlarmRecord, now_ms: int) -> Transition:
    """Run the next attempt now, keeping the retry count (a dead letter is re-armed instead)."""
    if rec.state is AlarmState.DEAD:
        return rearm(rec, now_ms)
    # Brought forward, not copied: a later scheduled_ms would survive the success.
    moved = replace(rec, next_attempt_ms=now_ms, scheduled_ms=min(rec.scheduled_ms, now_ms))
    return Transition(moved, (_ann("alarm.fire_now", moved, at_ms=now_ms),))
