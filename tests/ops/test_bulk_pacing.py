"""GapPacer: how many alarm items a bulk batch writes next, fitted between alarms."""

from __future__ import annotations

import gc

from alarmtop.core.model.alarm_policy import AlarmRecord, AlarmState
from alarmtop.core.model.bulk_pacing import MAX_WAIT_MS, MIN_GROUP, STEADY_GROUP_MS, GapPacer
from alarmtop.core.storage.sqlite.counters import new_states


def test_no_alarm_due_takes_the_largest_group() -> None:
    assert GapPacer(200).size(1_000, None, 0, 0) == 200


def test_a_running_alarm_makes_the_batch_wait() -> None:
    assert GapPacer(200).size(1_000, None, 1, 0) is None


def test_the_group_fits_the_gap_before_the_next_due_alarm() -> None:
    pacer = GapPacer(200)
    pacer.per_item_ms = 0.1
    assert pacer.size(1_000, 1_005, 0, 0) == 35  # 5 ms, 70% of it, 0.1 ms an item
    assert pacer.size(1_000, 1_100, 0, 0) == 200  # never more than the largest
    assert pacer.size(1_000, 1_001, 0, 0) is None  # too small a gap: wait


def test_a_steady_stream_of_alarms_delays_the_batch_boundedly() -> None:
    """No gap ever fits: after the longest wait a group goes anyway, sized so that the
    batch keeps a share of the writer: a group that takes STEADY_GROUP_MS."""
    pacer = GapPacer(1000)
    pacer.per_item_ms = 0.04
    assert pacer.size(1_000, 1_000, 1, MAX_WAIT_MS) == int(STEADY_GROUP_MS / 0.04)
    pacer.per_item_ms = 10.0
    assert pacer.size(1_000, 1_000, 1, MAX_WAIT_MS) == MIN_GROUP
    assert pacer.size(1_000, None, 0, MAX_WAIT_MS) == 1000
    assert GapPacer(5).size(1_000, 1_000, 1, MAX_WAIT_MS) == 5


def test_timings_move_the_estimate_per_item() -> None:
    pacer = GapPacer(200)
    for _ in range(30):
        pacer.observe(100, 2.0)  # 0.02 ms an item
    assert abs(pacer.per_item_ms - 0.02) < 0.001
    assert pacer.size(0, 2, 0, 0) in (69, 70)  # 2 ms, 70% of it
    pacer.observe(0, 5.0)  # nothing learnt from an empty group
    assert abs(pacer.per_item_ms - 0.02) < 0.001


def test_the_writers_state_cache_holds_tuples_the_collector_stops_tracking() -> None:
    """Tens of thousands of (state, retry) pairs are cached: an enum member inside each
    kept them all in every full collection's scan."""
    states = new_states({("C", "a"): AlarmRecord("C", "a", 5, AlarmState.DEAD, 3)})
    pair = states[("C", "a")]
    assert pair == ("dead", 3) and type(pair[0]) is str
    gc.collect()
    assert not gc.is_tracked(pair)
