"""The sort keys of the large listings (`core/storage/keys.py`): pure, no database."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from alarmtop.core.model import keys

STATES = ("pending", "running", "retrying", "dead")
STATUSES = ("running", "suspended", "succeeded", "failed", "timed_out", "needs_human",
            "aborted")
START_MS = 1_800_000_000_000

times = st.one_of(st.none(), st.integers(START_MS - 10**9, START_MS + 10**9),
                  st.integers(-(2**44), 2**44))
alarms = st.lists(st.tuples(st.sampled_from(STATES), st.integers(0, 40), times,
                            st.sampled_from("ABC"), st.text("xyz", min_size=1, max_size=3)),
                  max_size=60)


def old_alarm_order(row: tuple[str, int, int | None, str, str]) -> tuple[Any, ...]:
    """The ORDER BY the alarm listing had before keys: CASE rank, retry_count DESC,
    next_attempt_ms (NULL first), class, name."""
    state, retries, nxt, cls, name = row
    rank = {"dead": 0, "retrying": 1, "running": 2}.get(state, 3)
    return (rank, -retries, (0, 0) if nxt is None else (1, nxt), cls, name)


@given(alarms)
def test_alarm_urgency_orders_as_the_old_order_by(rows: list[Any]) -> None:
    by_key = sorted(rows, key=lambda r: (keys.alarm_urgency(r[0], r[1], r[2]), r[3], r[4]))
    assert by_key == sorted(rows, key=old_alarm_order)


@given(st.sampled_from(STATES), st.integers(0, 10**6), times)
def test_an_urgency_fits_a_signed_64_bit_column_and_its_state_range(
        state: str, retries: int, nxt: int | None) -> None:
    u = keys.alarm_urgency(state, retries, nxt)
    low, high = keys.alarm_rank_range(state)
    assert 0 <= low <= u < high <= 2**63 - 1


def test_the_ranges_of_the_states_follow_the_urgency_order() -> None:
    ranges = [keys.alarm_rank_range(s) for s in ("dead", "retrying", "running", "pending")]
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))


def test_retries_past_the_limit_tie_and_times_past_the_range_clamp() -> None:
    assert keys.alarm_urgency("retrying", keys.RETRY_MAX, 5) == \
        keys.alarm_urgency("retrying", 10**9, 5)
    assert keys.alarm_urgency("pending", 0, 2**50) == keys.alarm_urgency("pending", 0, 2**51)
    # a dead letter (no next attempt) before any real time, the earliest included
    assert keys.alarm_urgency("dead", 3, None) < keys.alarm_urgency("dead", 3, -(2**45))


executions = st.lists(st.tuples(st.sampled_from(STATUSES),
                                st.integers(START_MS - 10**6, START_MS + 10**6),
                                st.text("ab", min_size=1, max_size=4)), max_size=60)


@given(executions)
def test_execution_urgency_orders_as_the_old_order_by(rows: list[Any]) -> None:
    """CASE status rank, updated_ms DESC; the id breaks ties (the old query left them
    to chance, which paging by offset cannot afford)."""
    rank = {"needs_human": 0, "failed": 1, "running": 2, "suspended": 3}
    old = sorted(rows, key=lambda r: (rank.get(r[0], 4), -r[1], r[2]))
    assert sorted(rows, key=lambda r: (keys.execution_urgency(r[0], r[1]), r[2])) == old


@given(st.sampled_from(STATUSES), st.integers(-(2**46), 2**46))
def test_an_execution_urgency_is_in_its_status_range(status: str, updated: int) -> None:
    u = keys.execution_urgency(status, updated)
    low, high = keys.execution_rank_range(status)
    assert 0 <= low <= u < high <= 2**63 - 1


@pytest.mark.parametrize(("order", "value"), [
    ("alarms.urgency", [5, "Quiet", "q1"]), ("alarms.object", ["Quiet", "q1"]),
    ("executions.urgency", [7, "e1"]), ("objects.object", ("Quiet", "q1")),
    ("audit.seq", [12])])
def test_a_cursor_of_the_right_shape_is_taken(order: str, value: Any) -> None:
    assert keys.check_cursor(order, value) == tuple(value)


@pytest.mark.parametrize(("order", "value"), [
    ("alarms.urgency", [5, "Quiet"]), ("alarms.urgency", ["5", "Quiet", "q1"]),
    ("alarms.object", "Quiet/q1"), ("audit.seq", [True]), ("audit.seq", {"seq": 1}),
    ("executions.urgency", [1.5, "e1"]), ("objects.object", [None, "q"])])
def test_a_cursor_of_another_shape_is_refused(order: str, value: Any) -> None:
    with pytest.raises(ValueError, match="cursor"):
        keys.check_cursor(order, value)
