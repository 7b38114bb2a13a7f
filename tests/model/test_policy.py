"""The pure alarm policy: retry delays and the alarm state transitions."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from alarmtop.core.model import alarm_policy
from alarmtop.core.model.alarm_policy import (
    AlarmRecord,
    AlarmState,
    Attempt,
    RetryPolicy,
    Transition,
    delete_alarm,
    fail,
    fire_now,
    is_near_exhaustion,
    next_delay,
    rearm,
    set_alarm,
    start_attempt,
    succeed,
)

KEY = ("Lease", "l1")
T0 = 1_800_000_000_000


def types(tr: Transition) -> list[str]:
    """The announcement types of a transition, in order."""
    return [a.type for a in tr.events]


def running(at_ms: int = T0) -> AlarmRecord:
    """A first attempt that started at `at_ms`."""
    rec = set_alarm(KEY, at_ms).record
    assert rec is not None
    started = start_attempt(rec, at_ms).record
    assert started is not None
    return started


def walk_ladder(policy: RetryPolicy, failures: int,
                rng: random.Random | None = None) -> list[Transition]:
    """Fail `failures` attempts in a row, each starting exactly when it was due."""
    rec = set_alarm(KEY, T0).record
    out: list[Transition] = []
    for _ in range(failures):
        assert rec is not None and rec.next_attempt_ms is not None
        now = rec.next_attempt_ms
        started = start_attempt(rec, now).record
        assert started is not None
        tr = fail(started, now, "boom", policy, rng=rng)
        out.append(tr)
        rec = tr.record
    return out


# -- next_delay -----------------------------------------------------------------------------


def test_default_ladder_delays_double_from_two_seconds() -> None:
    policy = RetryPolicy()
    assert [next_delay(policy, n) for n in range(1, 7)] == [2, 4, 8, 16, 32, 64]


def test_default_ladder_attempts_start_at_0_2_6_14_30_62_126() -> None:
    trs = walk_ladder(RetryPolicy(), 7)
    dead = trs[-1].record
    assert dead is not None and dead.state is AlarmState.DEAD
    assert [(a.start_ms - T0) // 1000 for a in dead.attempts] == [0, 2, 6, 14, 30, 62, 126]


def test_max_delay_caps_every_delay() -> None:
    policy = RetryPolicy(max_retries=10, max_delay_s=10)
    assert [next_delay(policy, n) for n in range(1, 7)] == [2, 4, 8, 10, 10, 10]


def test_jitter_stays_within_bounds_and_is_reproducible() -> None:
    policy = RetryPolicy(jitter=0.5)
    first = [next_delay(policy, n, random.Random(7)) for n in range(1, 7)]
    again = [next_delay(policy, n, random.Random(7)) for n in range(1, 7)]
    assert first == again
    rng = random.Random(42)
    for n in range(1, 7):
        base = next_delay(policy, n)
        for _ in range(200):
            assert base * 0.5 <= next_delay(policy, n, rng) <= base


def test_jitter_actually_varies_the_delay() -> None:
    policy = RetryPolicy(jitter=1.0)
    rng = random.Random(3)
    assert len({next_delay(policy, 3, rng) for _ in range(20)}) > 1


def test_jitter_without_rng_is_the_plain_delay() -> None:
    assert next_delay(RetryPolicy(jitter=1.0), 3) == 8


@pytest.mark.parametrize("kwargs", [
    {"max_retries": -1}, {"initial_delay_s": -1}, {"backoff_rate": 0.5},
    {"jitter": -0.1}, {"jitter": 1.5},
])
def test_invalid_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_max_delay_caps_even_after_very_many_retries() -> None:
    policy = RetryPolicy(max_retries=5000, max_delay_s=3600)
    assert next_delay(policy, 2000) == 3600


def test_retry_times_of_a_long_ladder_fit_in_storage() -> None:
    trs = walk_ladder(RetryPolicy(max_retries=80), 80)
    times = [tr.record.next_attempt_ms for tr in trs if tr.record is not None]
    assert all(t is not None and t < 2**63 for t in times)


# -- transitions ----------------------------------------------------------------------------


def test_set_alarm_makes_a_pending_record() -> None:
    tr = set_alarm(KEY, T0 + 5)
    assert tr.record == AlarmRecord("Lease", "l1", T0 + 5, next_attempt_ms=T0 + 5)
    assert types(tr) == ["alarm.set"]
    assert tr.events[0].data == {"object": "Lease/l1", "scheduled_ms": T0 + 5}


def test_delete_alarm_removes_the_record() -> None:
    rec = set_alarm(KEY, T0).record
    assert rec is not None
    tr = delete_alarm(rec)
    assert tr.record is None and types(tr) == ["alarm.deleted"]


def test_start_attempt_records_the_start_and_lateness() -> None:
    rec = set_alarm(KEY, T0).record
    assert rec is not None
    tr = start_attempt(rec, T0 + 250)
    assert tr.record is not None
    assert (tr.record.state, tr.record.started_ms) == (AlarmState.RUNNING, T0 + 250)
    assert tr.events[0].type == "alarm.fired"
    assert tr.events[0].data["lateness_ms"] == 250


def test_fail_walks_to_dead_after_max_retries_plus_one_failures() -> None:
    policy = RetryPolicy(max_retries=3)
    trs = walk_ladder(policy, 4)
    states = [tr.record.state for tr in trs if tr.record is not None]
    assert states == [AlarmState.RETRYING] * 3 + [AlarmState.DEAD]
    dead = trs[-1].record
    assert dead is not None
    assert dead.retry_count == 3 and dead.next_attempt_ms is None and dead.due_ms is None
    assert len(dead.attempts) == 4
    assert all(a.error == "boom" and a.end_ms == a.start_ms for a in dead.attempts)
    assert types(trs[-1]) == ["alarm.failed", "alarm.dead"]
    assert trs[-1].events[0].data["last_attempt"] is True
    assert trs[-1].events[1].data["attempts"] == 4


def test_dead_letter_is_invisible_to_the_object() -> None:
    dead = walk_ladder(RetryPolicy(max_retries=0), 1)[-1].record
    assert dead is not None and dead.state is AlarmState.DEAD
    assert dead.user_view() is None


def test_near_exhaustion_is_announced_once_when_scheduling_the_last_retry() -> None:
    policy = RetryPolicy()
    trs = walk_ladder(policy, 7)
    announced = [i for i, tr in enumerate(trs) if "alarm.near_exhaustion" in types(tr)]
    assert announced == [5]  # the 6th failure schedules the 7th, last, attempt
    last_retry = trs[5].record
    assert last_retry is not None and last_retry.retry_count == 6
    assert is_near_exhaustion(last_retry, policy)
    assert not any(is_near_exhaustion(tr.record, policy) for tr in trs[:5] if tr.record)
    assert types(trs[5]) == ["alarm.failed", "alarm.retry_scheduled", "alarm.near_exhaustion"]


def test_near_exhaustion_holds_while_the_last_attempt_runs() -> None:
    policy = RetryPolicy(max_retries=1)
    retrying = walk_ladder(policy, 1)[-1].record
    assert retrying is not None
    started = start_attempt(retrying, T0 + 2000).record
    assert started is not None and is_near_exhaustion(started, policy)


def test_fail_with_an_earlier_new_alarm_retries_at_the_new_alarm() -> None:
    rec = running()
    tr = fail(rec, T0 + 100, "boom", RetryPolicy(), new_alarm_ms=T0 + 500)
    assert tr.record is not None
    assert tr.record.next_attempt_ms == T0 + 500
    assert tr.record.scheduled_ms == T0 + 500
    assert tr.record.retry_count == 1 and tr.record.state is AlarmState.RETRYING


def test_fail_with_a_later_new_alarm_keeps_the_retry_time() -> None:
    rec = running()
    tr = fail(rec, T0 + 100, "boom", RetryPolicy(), new_alarm_ms=T0 + 60_000)
    assert tr.record is not None
    assert tr.record.next_attempt_ms == T0 + 2100
    assert tr.record.scheduled_ms == T0 + 60_000
    assert tr.record.retry_count == 1


def test_fail_with_a_new_alarm_on_the_last_attempt_still_dies() -> None:
    rec = running()
    tr = fail(rec, T0 + 100, "boom", RetryPolicy(max_retries=0), new_alarm_ms=T0 + 500)
    assert tr.record is not None and tr.record.state is AlarmState.DEAD


def test_crash_is_an_attempt_without_end_and_retries_now() -> None:
    rec = running(T0)
    tr = fail(rec, T0 + 9000, "crashed", RetryPolicy(), crashed=True)
    assert tr.record is not None
    assert tr.record.next_attempt_ms == T0 + 9000
    assert tr.record.retry_count == 1 and tr.record.state is AlarmState.RETRYING
    assert tr.record.attempts == (Attempt(T0, None, "crashed"),)
    assert tr.events[0].data["crashed"] is True


def test_succeed_without_a_new_alarm_clears_it() -> None:
    tr = succeed(running(T0), T0 + 40, None)
    assert tr.record is None
    assert types(tr) == ["alarm.succeeded"]
    assert tr.events[0].data["duration_ms"] == 40


def test_succeed_with_a_new_alarm_starts_a_fresh_one() -> None:
    retried = walk_ladder(RetryPolicy(), 2)[-1].record
    assert retried is not None and retried.next_attempt_ms is not None
    started = start_attempt(retried, retried.next_attempt_ms).record
    assert started is not None
    tr = succeed(started, T0 + 7000, T0 + 99_000)
    assert tr.record == AlarmRecord("Lease", "l1", T0 + 99_000, next_attempt_ms=T0 + 99_000)
    assert types(tr) == ["alarm.succeeded", "alarm.set"]
    assert tr.events[0].data["retry_count"] == 2


def test_rearm_resets_retry_count_and_attempts() -> None:
    dead = walk_ladder(RetryPolicy(max_retries=2), 3)[-1].record
    assert dead is not None and dead.state is AlarmState.DEAD
    tr = rearm(dead, T0 + 1)
    assert tr.record == AlarmRecord("Lease", "l1", T0 + 1, next_attempt_ms=T0 + 1)
    assert types(tr) == ["alarm.rearmed"]
    assert tr.events[0].data["previous_state"] == "dead"
    assert tr.events[0].data["previous_retry_count"] == 2


def test_fire_now_of_a_dead_letter_rearms_it() -> None:
    dead = walk_ladder(RetryPolicy(max_retries=1), 2)[-1].record
    assert dead is not None
    tr = fire_now(dead, T0 + 5)
    assert tr.record is not None
    assert (tr.record.state, tr.record.retry_count, tr.record.attempts) == (
        AlarmState.PENDING, 0, ())
    assert tr.record.next_attempt_ms == T0 + 5
    assert types(tr) == ["alarm.rearmed"]


def test_fire_now_of_a_retrying_alarm_keeps_its_retry_count() -> None:
    retrying = walk_ladder(RetryPolicy(), 3)[-1].record
    assert retrying is not None
    tr = fire_now(retrying, T0 + 1)
    assert tr.record is not None
    assert tr.record.next_attempt_ms == T0 + 1
    assert (tr.record.retry_count, tr.record.attempts) == (3, retrying.attempts)
    assert types(tr) == ["alarm.fire_now"]


def test_attempt_round_trips_through_a_dict() -> None:
    for attempt in (Attempt(1, 2, "x"), Attempt(1, None, None)):
        assert Attempt.from_dict(attempt.to_dict()) == attempt


# -- properties -----------------------------------------------------------------------------

policies = st.builds(
    RetryPolicy,
    max_retries=st.integers(0, 15),
    initial_delay_s=st.floats(0, 3600, allow_nan=False),
    backoff_rate=st.floats(1, 5, allow_nan=False),
    max_delay_s=st.none() | st.floats(0, 86_400, allow_nan=False),
    jitter=st.floats(0, 1, allow_nan=False),
)


@given(policy=policies, failures=st.integers(1, 16), seed=st.integers(0, 2**32))
def test_retry_times_never_go_back_and_death_comes_after_max_retries(
        policy: RetryPolicy, failures: int, seed: int) -> None:
    failures = min(failures, policy.max_retries + 1)
    trs = walk_ladder(policy, failures, random.Random(seed))
    times = [T0]
    for n, tr in enumerate(trs, start=1):
        rec = tr.record
        assert rec is not None
        assert (rec.state is AlarmState.DEAD) == (n > policy.max_retries)
        assert len(rec.attempts) == n
        if rec.state is not AlarmState.DEAD:
            assert rec.retry_count == n
            assert rec.next_attempt_ms is not None
            times.append(rec.next_attempt_ms)
    assert times == sorted(times)
    near = sum(types(tr).count("alarm.near_exhaustion") for tr in trs)
    reached_last = failures == policy.max_retries + 1
    if reached_last:
        assert near == (1 if policy.max_retries > 0 else 0)


@given(policy=policies.map(lambda p: RetryPolicy(p.max_retries, p.initial_delay_s,
                                                 p.backoff_rate, p.max_delay_s, 0.0)),
       n=st.integers(1, 30))
def test_delays_without_jitter_never_shrink(policy: RetryPolicy, n: int) -> None:
    assert 0 <= next_delay(policy, n) <= next_delay(policy, n + 1)
    if policy.max_delay_s is not None:
        assert next_delay(policy, n) <= policy.max_delay_s


@pytest.mark.parametrize("retry", [1, 1_024, 1_025, 10**6, 10**18])
def test_long_ladders_never_overflow(retry: int) -> None:
    """Observation 9: `initial_delay_s=0, backoff_rate=2` overflowed near attempt 1,024 and
    put the next attempt 30 days out; a zero delay stays zero, a capped one its cap."""
    assert next_delay(RetryPolicy(initial_delay_s=0, backoff_rate=2), retry) == 0
    assert next_delay(RetryPolicy(initial_delay_s=2, backoff_rate=2, max_delay_s=60),
                      retry) == (2 if retry == 1 else 60)
    assert math.isfinite(next_delay(RetryPolicy(initial_delay_s=1, backoff_rate=5), retry))


def test_an_alarm_keeps_its_first_and_last_attempts_and_counts_all() -> None:
    """Observation 9: every failure appended to an unbounded list (2 MB for one alarm after
    1,000 attempts). The record keeps the first few and the last N, and counts them all."""
    rec = AlarmRecord("Lease", "l1", T0, next_attempt_ms=T0)
    policy = RetryPolicy(max_retries=2_000, initial_delay_s=0)
    for i in range(1_000):
        started = alarm_policy.start_attempt(rec, T0 + i).record
        assert started is not None
        tr = alarm_policy.fail(started, T0 + i, f"boom {i}", policy, keep=20)
        assert tr.record is not None
        rec = tr.record
    assert rec.attempt_count == 1_000
    assert len(rec.attempts) == alarm_policy.KEEP_FIRST + 20
    assert [a.error for a in rec.attempts[:3]] == ["boom 0", "boom 1", "boom 2"]
    assert rec.attempts[-1].error == "boom 999"
    assert rec.attempts[3].error == "boom 980"
