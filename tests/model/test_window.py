"""DueWindow: the in-memory soonest-due slice of the alarm index."""

from __future__ import annotations

import math

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from alarmtop.core.model.alarm_policy import AlarmKey, AlarmRecord, AlarmState
from alarmtop.core.model.due_window import DueWindow


def rec(name: str, due: int, state: AlarmState = AlarmState.PENDING) -> AlarmRecord:
    """An alarm of object `C/name` next due at `due`."""
    return AlarmRecord("C", name, due, state=state,
                       next_attempt_ms=None if state is AlarmState.DEAD else due)


def loaded(*records: AlarmRecord, capacity: int = 100) -> DueWindow:
    """A window that has read the whole index (`records`)."""
    window = DueWindow(capacity)
    window.load(sorted(records, key=lambda r: r.due_ms or 0), complete=True, skip=set())
    return window


def names(records: list[AlarmRecord]) -> list[str]:
    return [r.object_name for r in records]


def test_capacity_below_four_is_refused() -> None:
    with pytest.raises(ValueError):
        DueWindow(3)


def test_a_fresh_window_covers_nothing() -> None:
    window = DueWindow()
    window.put(rec("a", 1))
    assert len(window) == 0
    assert window.next_due_ms() is None
    assert not window.covers(-(10**15))
    assert not window.covers(None)


def test_pop_due_takes_due_alarms_soonest_first_up_to_limit() -> None:
    window = loaded(rec("c", 30), rec("a", 10), rec("b", 20), rec("d", 40))
    assert window.next_due_ms() == 10
    assert names(window.pop_due(35, limit=2)) == ["a", "b"]
    assert names(window.pop_due(35, limit=10)) == ["c"]
    assert window.pop_due(35, limit=10) == []
    assert window.next_due_ms() == 40


def test_overwritten_alarm_fires_only_at_its_new_time() -> None:
    window = loaded(rec("a", 10))
    window.put(rec("a", 50))
    assert window.pop_due(20, 10) == []
    assert window.pop_due(50, 10) == [rec("a", 50)]


def test_overwrite_to_an_earlier_time_fires_once() -> None:
    window = loaded(rec("a", 50))
    window.put(rec("a", 5))
    assert window.pop_due(100, 10) == [rec("a", 5)]
    assert window.pop_due(100, 10) == []


def test_removed_alarm_never_fires() -> None:
    window = loaded(rec("a", 10), rec("b", 20))
    window.remove(("C", "a"))
    assert names(window.pop_due(100, 10)) == ["b"]
    window.remove(("C", "zzz"))  # unknown keys are fine


def test_running_alarm_is_kept_but_never_popped() -> None:
    window = loaded(rec("a", 10))
    running = rec("a", 10, AlarmState.RUNNING)
    window.put(running)
    assert window.records[("C", "a")] is running
    assert window.pop_due(100, 10) == []
    assert window.next_due_ms() is None


def test_dead_alarm_leaves_the_window() -> None:
    window = loaded(rec("a", 10))
    window.put(rec("a", 10, AlarmState.DEAD))
    assert ("C", "a") not in window.records
    assert window.pop_due(100, 10) == []


def test_incomplete_page_sets_the_horizon_at_its_last_row() -> None:
    window = DueWindow(8)
    window.load([rec("a", 10), rec("b", 20)], complete=False, skip=set())
    assert window.horizon_ms == 20
    window.put(rec("c", 20))
    window.put(rec("d", 21))  # beyond what was read: the next page brings it
    assert sorted(window.records) == [("C", "a"), ("C", "b"), ("C", "c")]
    window.load([rec("d", 21)], complete=True, skip=set())
    assert window.horizon_ms == math.inf
    assert names(window.pop_due(100, 10)) == ["a", "b", "c", "d"]


def test_complete_empty_page_covers_everything() -> None:
    window = DueWindow()
    window.load([], complete=True, skip=set())
    assert window.horizon_ms == math.inf
    window.put(rec("a", 10**15))
    assert window.next_due_ms() == 10**15


def test_load_keeps_the_newer_state_of_skipped_keys() -> None:
    window = loaded(rec("a", 5))
    newer = rec("b", 7)
    window.put(newer)
    window.horizon_ms = 10  # as if only part of the index had been read
    window.load([rec("b", 15), rec("c", 16)], complete=True, skip={("C", "b")})
    assert window.records[("C", "b")] is newer
    assert names(window.pop_due(100, 10)) == ["a", "b", "c"]


def test_needs_refill_below_a_quarter_until_everything_is_read() -> None:
    window = DueWindow(8)
    window.load([rec("a", 1)], complete=False, skip=set())
    assert window.needs_refill()
    window.load([rec(n, 10 + i) for i, n in enumerate("bc")], complete=False, skip=set())
    assert not window.needs_refill()
    window.load([], complete=True, skip=set())
    window.remove(("C", "a"))
    window.remove(("C", "b"))
    assert not window.needs_refill()  # the whole index is in memory


def test_shrink_keeps_the_soonest_capacity_and_lowers_the_horizon() -> None:
    window = loaded(*(rec(f"k{i:02}", i) for i in range(12)), capacity=4)
    window.put(rec("run", 99, AlarmState.RUNNING))
    window.shrink()
    assert window.horizon_ms == 3
    assert sorted(window.records) == [("C", "k00"), ("C", "k01"), ("C", "k02"), ("C", "k03"),
                                      ("C", "run")]
    window.put(rec("late", 4))  # beyond the new horizon
    assert names(window.pop_due(100, 100)) == ["k00", "k01", "k02", "k03"]


def test_shrink_does_nothing_below_twice_the_capacity() -> None:
    window = loaded(*(rec(f"k{i}", i) for i in range(8)), capacity=4)
    window.shrink()
    assert len(window) == 8 and window.horizon_ms == math.inf


def test_shrink_that_cannot_cut_waits_for_the_window_to_double(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A burst ties on one due time: nothing can be cut, and sorting every alarm again on
    each pass of the loop would cost O(n log n) per fired alarm."""
    window = loaded(*(rec(f"k{i:02}", 7) for i in range(12)), capacity=4)
    sorts = 0
    real_sorted = sorted

    def counting_sorted(*args: object, **kwargs: object) -> object:
        nonlocal sorts
        sorts += 1
        return real_sorted(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setitem(DueWindow.shrink.__globals__, "sorted", counting_sorted)
    window.shrink()
    assert sorts == 1 and len(window) == 12 and window.horizon_ms == 7
    for i in range(12):
        window.put(rec(f"m{i:02}", 7))
        window.shrink()
    assert sorts == 1  # 24 alarms: not more than twice the 12 of the pass that could not cut
    window.put(rec("m12", 7))
    window.shrink()
    assert sorts == 2 and len(window) == 25


def test_shrink_cuts_below_a_large_tie_and_waits_to_run_dry_before_reading_it() -> None:
    """A bulk re-arm puts thousands of alarms on one far time: the window keeps what is
    due before it (the tie is read again only once the window runs dry), and later
    alarms on that time stay out."""
    window = loaded(rec("near1", 1), rec("near2", 2), *(rec(f"t{i:03}", 500)
                                                        for i in range(20)), capacity=4)
    window.shrink()
    assert names(sorted(window.records.values(), key=lambda r: r.due_ms or 0)) == [
        "near1", "near2"]
    assert window.horizon_ms == 499
    assert not window.needs_refill()  # fewer than a quarter kept on purpose
    window.put(rec("t999", 500))
    window.put(rec("near3", 300))
    assert ("C", "t999") not in window.records and ("C", "near3") in window.records
    assert names(window.pop_due(400, 10)) == ["near1", "near2", "near3"]
    assert window.next_due_ms() is None  # dry: the loop reads the index again
    window.load([rec(f"t{i:03}", 500) for i in range(20)], complete=True, skip=set())
    assert all(("C", f"t{i:03}") in window.records for i in range(20))
    assert window.horizon_ms == math.inf


def test_a_tie_at_the_front_is_kept_whole() -> None:
    """Nothing is due before the tie: cutting it would empty the window and read it back
    at once, so the window keeps it (and waits to double before sorting again)."""
    window = loaded(*(rec(f"t{i:03}", 7) for i in range(20)), capacity=4)
    window.shrink()
    assert len(window) == 20 and window.horizon_ms == 7


def test_pop_one_takes_the_soonest_due_alarm_or_nothing() -> None:
    window = loaded(rec("b", 20), rec("a", 10))
    window.put(rec("b", 5))  # overwritten: its old heap entry is skipped
    assert window.pop_one(4) is None
    first = window.pop_one(100)
    assert first is not None and first.object_name == "b"
    second = window.pop_one(100)
    assert second is not None and second.object_name == "a"
    assert window.pop_one(100) is None
    assert window.next_due_ms() is None


# -- the model test --------------------------------------------------------------------------

KEYS = [("C", f"o{i}") for i in range(12)]  # > 2 * capacity, so shrink() has work
DUES = st.integers(0, 40)


class WindowModel(RuleBasedStateMachine):
    """The window against a model of the index: key -> (due, running).

    The model plays the scheduler: every write goes to the index and then to the
    window; a popped alarm is marked running in both (the scheduler's
    start_attempt); pages are read from the index the way `SqliteDatabase.due_after`
    reads them. Whatever the window's horizon, it must hold exactly the index's
    waiting alarms due at or before it.
    """

    def __init__(self) -> None:
        super().__init__()
        self.window = DueWindow(4)
        self.index: dict[AlarmKey, AlarmRecord] = {}

    @initialize(rows=st.dictionaries(st.sampled_from(KEYS), DUES))
    def fill(self, rows: dict[AlarmKey, int]) -> None:
        for key, due in rows.items():
            self.index[key] = rec(key[1], due)

    def visible(self) -> dict[AlarmKey, int]:
        """Alarms waiting to fire (pending or retrying) that the window covers."""
        return {k: r.next_attempt_ms for k, r in self.index.items()
                if r.state in (AlarmState.PENDING, AlarmState.RETRYING)
                and r.next_attempt_ms is not None and r.next_attempt_ms <= self.window.horizon_ms}

    @rule(key=st.sampled_from(KEYS), due=DUES)
    def set_alarm(self, key: AlarmKey, due: int) -> None:
        self.index[key] = rec(key[1], due)
        self.window.put(self.index[key])

    @rule(key=st.sampled_from(KEYS))
    def delete_alarm(self, key: AlarmKey) -> None:
        self.index.pop(key, None)
        self.window.remove(key)

    @rule(now=DUES, limit=st.integers(1, 5))
    def pop_due(self, now: int, limit: int) -> None:
        expected = sorted((d, k) for k, d in self.visible().items() if d <= now)
        got = self.window.pop_due(now, limit)
        assert len({r.key for r in got}) == len(got), "an alarm was popped twice"
        assert [r.due_ms for r in got] == [d for d, _ in expected[:limit]]
        for r in got:
            assert self.index.get(r.key) == r, "popped a deleted or overwritten alarm"
            started = r._replace(state=AlarmState.RUNNING, started_ms=now)
            self.index[r.key] = started
            self.window.put(started)

    @rule(key=st.sampled_from(KEYS), due=st.none() | DUES)
    def finish(self, key: AlarmKey, due: int | None) -> None:
        """A running alarm succeeds (None) or is retried at `due`."""
        current = self.index.get(key)
        if current is None or current.state is not AlarmState.RUNNING:
            return
        if due is None:
            del self.index[key]
            self.window.remove(key)
        else:
            self.index[key] = current._replace(state=AlarmState.RETRYING, next_attempt_ms=due,
                                      retry_count=current.retry_count + 1, started_ms=None)
            self.window.put(self.index[key])

    @precondition(lambda self: self.window.horizon_ms != math.inf)
    @rule(limit=st.integers(1, 6))
    def load_page(self, limit: int) -> None:
        after = self.window.horizon_ms
        live = sorted((r for r in self.index.values()
                       if r.next_attempt_ms is not None and r.next_attempt_ms > after),
                      key=lambda r: (r.next_attempt_ms, r.key))
        rows, complete = live[:limit], len(live) < limit
        if not complete:
            last = rows[-1].next_attempt_ms
            rows += [r for r in live[limit:] if r.next_attempt_ms == last]
        self.window.load(rows, complete, skip=set())
        expected = math.inf if complete or not rows else rows[-1].next_attempt_ms
        assert self.window.horizon_ms == expected

    @rule()
    def shrink(self) -> None:
        before = self.window.horizon_ms
        self.window.shrink()
        assert self.window.horizon_ms <= before

    @invariant()
    def holds_exactly_the_visible_pending_alarms(self) -> None:
        window = self.window
        held = {k: r.next_attempt_ms for k, r in window.records.items()
                if r.state is not AlarmState.RUNNING}
        for key, r in window.records.items():
            assert self.index.get(key) == r, "the window holds a stale record"
        assert held == self.visible()
        dues = list(held.values())
        assert window.next_due_ms() == (min(dues) if dues else None)  # type: ignore[type-var]


WindowModel.TestCase.settings = settings(max_examples=300, stateful_step_count=40,
                                         deadline=None)
TestWindowModel = WindowModel.TestCase
