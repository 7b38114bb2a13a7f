"""Alarm state and retry decisions as plain data and pure functions.

Nothing here touches asyncio or a database: the scheduler asks these functions what
the next state of an alarm is and then makes it durable. Each transition returns
the new record (or None when the alarm is gone) and the events it announces.
"""

from __future__ import annotations

import enum
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple


class AlarmState(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    RETRYING = "retrying"
    DEAD = "dead"


MAX_DELAY_S = 30 * 24 * 3600.0  # the longest gap between two attempts


@dataclass(frozen=True)
class RetryPolicy:
    """How a failed alarm handler or durable step is retried: the one policy type.

    The default retries 6 times, 2 s after the first failure and doubling, so the
    7 attempts start at about +0, 2, 6, 14, 30, 62 and 126 s. Steps take it
    through the AWS-shaped `RetryStrategyConfig` (`alarmtop.core.durable`), whose
    `max_attempts` is `max_retries + 1` and whose FULL/HALF jitter is a `jitter`
    of 1.0/0.5.

    `retryable_errors` (message texts or patterns) and `retryable_error_types`
    narrow what is retried; left None, every failure is. Steps consult them (a
    step's exception is at hand); alarm retries do not (a handler that must
    not be retried deletes its alarm instead).
    """

    max_retries: int = 6
    initial_delay_s: float = 2.0
    backoff_rate: float = 2.0
    max_delay_s: float | None = None
    jitter: float = 0.0  # fraction of each delay drawn at random, 0 <= jitter <= 1
    retryable_errors: Sequence[str | re.Pattern[str]] | None = None
    retryable_error_types: Sequence[type[BaseException]] | None = None

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError("RetryPolicy.max_retries must be >= 0")
        if self.initial_delay_s < 0 or self.backoff_rate < 1:
            raise ValueError("RetryPolicy needs initial_delay_s >= 0 and backoff_rate >= 1")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("RetryPolicy.jitter is a fraction between 0 and 1")


def is_retryable(policy: RetryPolicy, error: BaseException) -> bool:
    """Whether `error` is one the policy retries (by message text or type)."""
    if policy.retryable_errors is None and policy.retryable_error_types is None:
        return True
    text = str(error)
    by_message = any(p.search(text) if isinstance(p, re.Pattern) else p in text
                     for p in policy.retryable_errors or ())
    return by_message or isinstance(error, tuple(policy.retryable_error_types or ()))


def retry_after(policy: RetryPolicy, error: BaseException, retries_so_far: int,
                rng: random.Random | None = None) -> float | None:
    """Seconds until the next try after a failure, or None: do not retry.

    `retries_so_far` counts the retries already made (0 after the first attempt)."""
    if retries_so_far >= policy.max_retries or not is_retryable(policy, error):
        return None
    return next_delay(policy, retries_so_far + 1, rng)


def next_delay(policy: RetryPolicy, retry_number: int, rng: random.Random | None = None) -> float:
    """Seconds between a failure and retry number `retry_number` (1-based).

    Finite for any retry number: the doubling is compared with the cap in log space,
    so a long ladder never overflows (nor turns a zero delay into infinity)."""
    cap = policy.max_delay_s if policy.max_delay_s is not None else MAX_DELAY_S
    initial, rate, exponent = policy.initial_delay_s, policy.backoff_rate, max(0, retry_number - 1)
    if initial <= 0 or cap <= 0:
        delay = 0.0
    elif rate <= 1 or exponent * math.log(rate) < math.log(cap) - math.log(initial):
        delay = min(initial * rate ** exponent, cap)
    else:
        delay = cap  # past the cap (and the float range, for a long enough ladder)
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
KEEP_FIRST = 3  # attempts kept from the start of a ladder, beside the last `keep`
DEFAULT_KEEP = 20


class AlarmRecord(NamedTuple):
    """Everything the runtime knows about one object's alarm (a row of the alarm index).

    `gen` is the generation of the object's alarm intent this record was made from
    (see `alarms.intent`): what the object's code set or deleted is its intent,
    what the runtime decided since (retries, the dead letter, an operator's re-arm)
    is this record. `hint_ms`/`hint_gen` are a wake hint an event wrote before its
    object committed a new, earlier intent: the record fires no later than the hint,
    and the dispatcher then reads the intent to see whether it landed. `in_file`
    says the object's intent may live in the object's own database (else it is this
    row). `attempts` keeps the first few and the last `keep` failures;
    `attempt_count` counts them all. `paused_ms` says since when an operator has held
    the alarm (`alarms.pause`): a paused record keeps its time, retries and attempts,
    and is never due until it is resumed.

    A named tuple rather than a frozen dataclass: several are made at every firing,
    and a tuple of 14 fields is built in a fifth of the time.
    """

    object_class: str
    object_name: str
    scheduled_ms: int
    state: AlarmState = AlarmState.PENDING
    retry_count: int = 0
    next_attempt_ms: int | None = None
    last_error: str | None = None
    attempts: tuple[Attempt, ...] = ()
    started_ms: int | None = None  # start of the attempt in progress
    gen: int = 0
    hint_ms: int | None = None
    hint_gen: int = 0
    in_file: bool = False
    attempt_count: int = 0
    paused_ms: int | None = None

    @property
    def key(self) -> AlarmKey:
        return (self.object_class, self.object_name)

    @property
    def due_ms(self) -> int | None:
        """When the scheduler should next look at this alarm (None: never, it is dead
        and has no hint, or it is paused): its next attempt, or its wake hint if that
        comes first."""
        if self.paused_ms is not None:
            return None
        due = None if self.state is AlarmState.DEAD else self.next_attempt_ms
        hint = self.hint_ms
        if hint is not None and (due is None or hint < due):
            return hint
        return due

    @property
    def attempt_due(self) -> bool:
        """Whether the record itself (not only its hint) asks for an attempt by `due_ms`."""
        return self.state is not AlarmState.DEAD and self.next_attempt_ms is not None and (
            self.hint_ms is None or self.next_attempt_ms <= self.hint_ms)

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


def ann(type_: str, rec: AlarmRecord, **data: Any) -> Announcement:
    return Announcement(type_, {"object": f"{rec.object_class}/{rec.object_name}", **data})


def set_alarm(key: AlarmKey, at_ms: int, gen: int = 0, in_file: bool = False) -> Transition:
    """The object's intent `gen` asks for an alarm at `at_ms`: a fresh record."""
    rec = AlarmRecord(key[0], key[1], scheduled_ms=at_ms, next_attempt_ms=at_ms, gen=gen,
                      in_file=in_file)
    return Transition(rec, (ann("alarm.set", rec, scheduled_ms=at_ms),))


def hint(rec: AlarmRecord, at_ms: int, gen: int, in_file: bool) -> Transition:
    """Wake no later than `at_ms`: an event is about to commit intent `gen` asking for it.

    The record itself (its retry count, its dead letter) is left alone until the
    object's commit has landed; only then does `set_alarm` replace it."""
    early = at_ms if rec.hint_ms is None or at_ms < rec.hint_ms else rec.hint_ms
    return Transition(rec._replace(hint_ms=early, hint_gen=max(gen, rec.hint_gen),
                              in_file=rec.in_file or in_file))


def delete_alarm(rec: AlarmRecord) -> Transition:
    return Transition(None, (ann("alarm.deleted", rec),))


def start_attempt(rec: AlarmRecord, now_ms: int) -> Transition:
    """The handler is about to run (the dispatcher has checked the intent: any hint
    has been dealt with, so it goes)."""
    # Spelled out rather than `replace(...)`, which costs twice as much: once per firing.
    started = AlarmRecord(rec.object_class, rec.object_name, rec.scheduled_ms,
                          AlarmState.RUNNING, rec.retry_count, rec.next_attempt_ms,
                          rec.last_error, rec.attempts, now_ms, rec.gen, None, 0, rec.in_file,
                          rec.attempt_count, rec.paused_ms)
    return Transition(
        started,
        (ann("alarm.fired", rec, retry_count=rec.retry_count, scheduled_ms=rec.scheduled_ms,
              lateness_ms=now_ms - (rec.next_attempt_ms or now_ms)),),
    )


def withdraw_attempt(started: AlarmRecord, before: AlarmRecord, why: str) -> Transition:
    """The attempt's handler never ran (its shard was handed over between the start's
    commit and the handler): the row goes back to how it was before the start, so the
    next owner does not count, and retry, an attempt that did not happen."""
    back = started._replace(state=before.state, started_ms=before.started_ms)
    return Transition(back, (ann("alarm.handed_over", started, reason=why),))


def succeed(rec: AlarmRecord, now_ms: int, new_alarm_ms: int | None, gen: int | None = None,
            in_file: bool = False) -> Transition:
    """The handler returned. A new alarm set by the handler (its intent `gen`) survives;
    else the alarm is done.

    A later alarm that an earlier failing attempt set (kept in `scheduled_ms` while
    the retry ran first) survives too: success does not swallow it.
    """
    done = ann("alarm.succeeded", rec, retry_count=rec.retry_count,
                duration_ms=now_ms - (rec.started_ms or now_ms))
    if new_alarm_ms is None and rec.scheduled_ms > now_ms and gen is None:
        new_alarm_ms = rec.scheduled_ms
    if new_alarm_ms is None:
        return Transition(None, (done,))
    nxt = AlarmRecord(rec.object_class, rec.object_name, new_alarm_ms,
                      next_attempt_ms=new_alarm_ms, gen=rec.gen if gen is None else gen,
                      in_file=rec.in_file or in_file)
    return Transition(nxt, (done, ann("alarm.set", nxt, scheduled_ms=new_alarm_ms)))


def kept_attempts(attempts: tuple[Attempt, ...], new: Attempt,
                  keep: int = DEFAULT_KEEP) -> tuple[Attempt, ...]:
    """The first few attempts and the last `keep`, with `new` appended.

    An alarm that fails for days must not grow a record rewritten at every attempt:
    the start of the ladder says how it began, the tail how it goes now."""
    out = (*attempts, new)
    limit = KEEP_FIRST + max(1, keep)
    if len(out) <= limit:
        return out
    return (*out[:KEEP_FIRST], *out[len(out) - max(1, keep):])


def fail(
    rec: AlarmRecord,
    now_ms: int,
    error: str,
    policy: RetryPolicy,
    new_alarm_ms: int | None = None,
    rng: random.Random | None = None,
    crashed: bool = False,
    gen: int | None = None,
    keep: int = DEFAULT_KEEP,
    in_file: bool = False,
    final: bool = False,
) -> Transition:
    """The handler raised, timed out, or the process died during it.

    A new alarm set before the raise (the object's intent `gen`) does not hide the
    failure: the retry runs at the earlier of the retry time and the new alarm, and
    the retry count goes on. A `final` failure (the handler gave up) is a dead letter
    at once, whatever retries are left.
    """
    attempt = Attempt(rec.started_ms if rec.started_ms is not None else now_ms,
                      None if crashed else now_ms, error)
    attempts = kept_attempts(rec.attempts, attempt, keep)
    count = max(rec.attempt_count, len(rec.attempts)) + 1
    retry = rec.retry_count + 1
    scheduled = new_alarm_ms if new_alarm_ms is not None else rec.scheduled_ms
    base = rec._replace(attempts=attempts, last_error=error, started_ms=None,
                   scheduled_ms=scheduled, attempt_count=count,
                   gen=rec.gen if gen is None else gen, in_file=rec.in_file or in_file)
    last = final or retry > policy.max_retries
    failed = ann("alarm.failed", rec, retry_count=rec.retry_count, error=error,
                  last_attempt=last, crashed=crashed)
    if last:
        dead = base._replace(state=AlarmState.DEAD, next_attempt_ms=None)
        return Transition(dead, (failed, ann("alarm.dead", dead, attempts=count,
                                              error=error)))
    delay_ms = 0 if crashed else math.ceil(next_delay(policy, retry, rng) * 1000)
    at = now_ms + delay_ms
    if new_alarm_ms is not None:
        at = min(at, new_alarm_ms)
    retrying = base._replace(state=AlarmState.RETRYING, retry_count=retry, next_attempt_ms=at)
    events = [failed, ann("alarm.retry_scheduled", retrying, retry_count=retry,
                           next_attempt_ms=at, max_retries=policy.max_retries)]
    if is_near_exhaustion(retrying, policy):
        events.append(ann("alarm.near_exhaustion", retrying, retry_count=retry,
                           next_attempt_ms=at, max_retries=policy.max_retries))
    return Transition(retrying, tuple(events))


def is_near_exhaustion(rec: AlarmRecord, policy: RetryPolicy) -> bool:
    """True when the next attempt is the last one: one more failure makes it dead."""
    return rec.state in (AlarmState.RETRYING, AlarmState.RUNNING) and (
        rec.retry_count >= policy.max_retries and rec.retry_count > 0
    )


def rearm(rec: AlarmRecord, at_ms: int) -> Transition:
    """An operator gives the alarm a fresh ladder: retry count and attempts reset.

    The runtime's own decision: the intent generation stays (a re-armed dead letter
    fires), and so does a wake hint (an intent committed meanwhile is still looked at)."""
    fresh = AlarmRecord(rec.object_class, rec.object_name, at_ms, next_attempt_ms=at_ms,
                        gen=rec.gen, hint_ms=rec.hint_ms, hint_gen=rec.hint_gen,
                        in_file=rec.in_file)
    return Transition(fresh, (ann("alarm.rearmed", fresh, at_ms=at_ms,
                                   previous_state=rec.state.value,
                                   previous_retry_count=rec.retry_count),))


def fire_now(rec: AlarmRecord, now_ms: int) -> Transition:
    """Run the next attempt now, keeping the retry count (a dead letter is re-armed instead)."""
    if rec.state is AlarmState.DEAD:
        return rearm(rec, now_ms)
    # Brought forward, not copied: a later scheduled_ms would survive the success.
    moved = rec._replace(next_attempt_ms=now_ms, scheduled_ms=min(rec.scheduled_ms, now_ms))
    return Transition(moved, (ann("alarm.fire_now", moved, at_ms=now_ms),))
