"""`ConsoleState`: a snapshot merged with deltas, bounded, with a local countdown."""

from __future__ import annotations

from typing import Any

from alarmtop.tui.state import (
    HISTORY,
    KINDS,
    MAX_ALARMS,
    MAX_EVENTS,
    MAX_EXECUTIONS,
    ConsoleState,
    kinds_touched,
)

NOW = 1_800_000_000_000


def alarm(ref: str, state: str = "pending", due: int = NOW + 1000, **extra: Any
          ) -> dict[str, Any]:
    return {"object": ref, "state": state, "retry_count": 0, "max_retries": 6,
            "next_attempt_ms": due, "scheduled_ms": due, **extra}


def execution(eid: str, status: str = "running", updated: int = NOW) -> dict[str, Any]:
    return {"execution_id": eid, "name": "festival-stream", "status": status,
            "blocked_on": None, "updated_ms": updated, "saga": []}


def event(n: int) -> dict[str, Any]:
    return {"type": "alarm.fired", "at_ms": NOW + n, "data": {"n": n}}


def snapshot(**fields: Any) -> dict[str, Any]:
    return {"type": "snapshot", "at_ms": NOW, "seq": 4, "counts": {"objects": 3},
            "alarms": [], "executions": [], "faults": [], **fields}


def delta(seq: int, **fields: Any) -> dict[str, Any]:
    return {"type": "delta", "seq": seq, "at_ms": NOW + seq * 250, **fields}


def test_a_new_state_is_connecting_and_empty() -> None:
    """Before any frame: not connected, nothing known, flat sparklines."""
    s = ConsoleState()
    assert (s.connected, s.status, s.role, s.now_ms, s.events_total) == (
        False, "connecting", None, 0, 0)
    assert list(s.fires) == [0] * HISTORY and list(s.failures) == [0] * HISTORY


def test_welcome_sets_the_role_and_connects() -> None:
    """The welcome frame says who we are; the console is then connected."""
    s = ConsoleState(connected=False, status="disconnected, reconnecting")
    assert s.apply({"type": "welcome", "role": "viewer", "protocol": 1}, 1.0) is True
    assert (s.role, s.connected, s.status) == ("viewer", True, "connected")


def test_snapshot_replaces_what_was_known() -> None:
    """A snapshot (first, or after a resync) replaces alarms, executions, counts, faults."""
    s = ConsoleState()
    s.apply(snapshot(alarms=[alarm("A/old")], executions=[execution("old")]), 1.0)
    fault = {"id": "f1", "target": "x", "kind": "step_raise"}
    assert s.apply(snapshot(alarms=[alarm("A/a"), alarm("B/b", "dead")],
                            executions=[execution("e1")], faults=[fault],
                            counts={"objects": 9}), 2.0) is True
    assert set(s.alarms) == {"A/a", "B/b"} and set(s.executions) == {"e1"}
    assert (s.counts, s.faults, s.now_ms, s.seq) == ({"objects": 9}, [fault], NOW, 4)


def test_delta_merges_changed_rows() -> None:
    """A delta updates the rows it names and adds new ones; the others stay."""
    s = ConsoleState()
    s.apply(snapshot(alarms=[alarm("A/a"), alarm("B/b")], executions=[execution("e1")]), 1.0)
    s.apply(delta(5, alarms=[alarm("A/a", "retrying", retry_count=1), alarm("C/c")],
                  executions=[execution("e1", "needs_human"), execution("e2")]), 1.1)
    assert s.alarms["A/a"]["state"] == "retrying" and s.alarms["B/b"]["state"] == "pending"
    assert set(s.alarms) == {"A/a", "B/b", "C/c"}
    assert s.executions["e1"]["status"] == "needs_human" and "e2" in s.executions
    assert (s.seq, s.now_ms) == (5, NOW + 1250)


def test_a_row_with_state_none_is_removed() -> None:
    """An alarm that no longer exists comes as state "none" and leaves the table; an
    unknown one is ignored."""
    s = ConsoleState()
    s.apply(snapshot(alarms=[alarm("A/a"), alarm("B/b")]), 1.0)
    s.apply(delta(5, alarms=[{"object": "A/a", "state": "none"},
                             {"object": "Z/never-seen", "state": "none"}]), 1.1)
    assert set(s.alarms) == {"B/b"}


def test_delta_keeps_counts_and_faults_it_does_not_carry() -> None:
    """Counts and faults change only when the frame brings them."""
    s = ConsoleState()
    s.apply(snapshot(counts={"objects": 3}, faults=[{"id": "f1"}]), 1.0)
    s.apply(delta(5), 1.1)
    assert (s.counts, s.faults) == ({"objects": 3}, [{"id": "f1"}])
    s.apply(delta(6, counts={"objects": 4}, faults=[]), 1.2)
    assert (s.counts, s.faults) == ({"objects": 4}, [])


def test_deltas_feed_the_event_log_and_the_sparklines() -> None:
    """Events are appended and counted; fires and failures move the sparkline windows."""
    s = ConsoleState()
    s.apply(delta(1, events=[event(1), event(2)], fires=4, failures=1), 1.0)
    s.apply(delta(2, events=[event(3)], fires=2), 1.1)
    assert [e["data"]["n"] for e in s.events] == [1, 2, 3] and s.events_total == 3
    assert list(s.fires)[-2:] == [4, 2] and list(s.failures)[-2:] == [1, 0]
    assert len(s.fires) == HISTORY


def test_the_event_log_is_bounded_but_the_total_counts_everything() -> None:
    """The log keeps the newest MAX_EVENTS events; events_total counts every one."""
    s = ConsoleState()
    n = MAX_EVENTS + 300
    for start in range(0, n, 100):
        s.apply(delta(start // 100 + 1, events=[event(i) for i in range(start, start + 100)]),
                1.0)
    assert len(s.events) == MAX_EVENTS and s.events_total == n
    assert s.events[0]["data"]["n"] == n - MAX_EVENTS and s.events[-1]["data"]["n"] == n - 1


def test_alarms_are_bounded_keeping_the_most_urgent() -> None:
    """Past MAX_ALARMS the least urgent (latest due) pending alarms are dropped first."""
    s = ConsoleState()
    pending = [alarm(f"L/t-{i:04d}", due=NOW + i) for i in range(MAX_ALARMS + 10)]
    s.apply(delta(1, alarms=[*pending, alarm("F/dead", "dead")]), 1.0)
    assert len(s.alarms) == MAX_ALARMS
    assert "F/dead" in s.alarms and "L/t-0000" in s.alarms
    assert "L/t-0509" not in s.alarms and f"L/t-{MAX_ALARMS - 2:04d}" in s.alarms
    assert f"L/t-{MAX_ALARMS - 1:04d}" not in s.alarms


def test_executions_are_bounded_keeping_the_latest_updated() -> None:
    """Past MAX_EXECUTIONS the least recently updated executions are dropped."""
    s = ConsoleState()
    rows = [execution(f"e{i}", updated=NOW + i) for i in range(MAX_EXECUTIONS + 5)]
    s.apply(delta(1, executions=rows), 1.0)
    assert len(s.executions) == MAX_EXECUTIONS
    assert "e0" not in s.executions and "e4" not in s.executions and "e5" in s.executions


def test_advance_local_moves_the_countdown_between_frames() -> None:
    """Between frames the server's time moves on by what passed locally."""
    s = ConsoleState()
    s.advance_local(50.0)
    assert s.now_ms == 0  # no frame yet: nothing to count from
    s.apply(snapshot(), 100.0)
    s.advance_local(101.5)
    assert s.now_ms == NOW + 1500
    s.advance_local(100.25)
    assert s.now_ms == NOW + 250  # always from the frame, never accumulated


def test_a_frame_without_time_does_not_reset_the_countdown() -> None:
    """A welcome (no at_ms) leaves the base of the countdown where it was."""
    s = ConsoleState()
    s.apply(snapshot(), 100.0)
    s.apply({"type": "welcome", "role": "operator"}, 200.0)
    s.advance_local(101.0)
    assert s.now_ms == NOW + 1000
    s.apply(delta(8), 300.0)
    s.advance_local(300.5)
    assert s.now_ms == NOW + 8 * 250 + 500


def test_an_unknown_frame_changes_nothing() -> None:
    """Only welcome, snapshot and delta are merged."""
    s = ConsoleState()
    s.apply(snapshot(alarms=[alarm("A/a")]), 1.0)
    assert s.apply({"type": "error", "error": "bad frame"}, 2.0) is False
    assert s.apply({"type": "result", "id": 3, "ok": True}, 2.0) is False
    assert set(s.alarms) == {"A/a"} and s.seq == 4


def test_a_snapshot_touches_every_kind() -> None:
    """After a (re)connect every listing may have changed: every version moves."""
    s = ConsoleState()
    s.apply(snapshot(), 1.0)
    assert s.versions == dict.fromkeys(KINDS, 1)


def test_a_delta_touches_the_kinds_of_what_it_carries() -> None:
    """Changed alarm rows touch alarms and objects; an operator event touches the audit
    log; fault events and a changed fault list touch faults; any event the event log."""
    s = ConsoleState()
    s.apply(snapshot(), 1.0)
    before = dict(s.versions)
    s.apply(delta(5, alarms=[alarm("A/a", "dead")], events=[]), 1.1)
    moved = {k for k in KINDS if s.versions[k] != before[k]}
    assert moved == {"alarms", "objects"}
    before = dict(s.versions)
    s.apply(delta(6, events=[{"type": "operator.rearm", "at_ms": NOW, "data": {}}]), 1.2)
    assert {k for k in KINDS if s.versions[k] != before[k]} == {"audit", "events"}
    before = dict(s.versions)
    s.apply(delta(7, faults=[{"id": "f1"}], events=[]), 1.3)
    assert {k for k in KINDS if s.versions[k] != before[k]} == {"faults"}
    before = dict(s.versions)
    s.apply(delta(8, faults=[{"id": "f1"}], events=[]), 1.4)  # the same faults again
    assert s.versions == before


def test_kinds_touched_by_event_types() -> None:
    """Events name what they change, by their type's prefix."""
    def kinds(*types: str) -> set[str]:
        return kinds_touched({"type": "delta", "events": [
            {"type": t, "at_ms": 0, "data": {}} for t in types]}, [])
    assert kinds("object.hibernated") == {"objects", "events"}
    assert kinds("socket.opened") == {"objects", "events"}
    assert kinds("execution.needs_human") == {"executions", "objects", "events"}
    assert kinds("fault.injected") == {"faults", "events"}
    assert kinds("alarm.dead") == {"alarms", "objects", "events"}
    assert kinds("viewer.connected") == {"events"}
    assert kinds_touched({"type": "welcome"}, []) == set()


def test_lateness_history_keeps_the_worst_fire_of_each_delta() -> None:
    """The header's lateness sparkline: the worst start lateness among a delta's fires."""
    state = ConsoleState()
    state.apply({"type": "delta", "at_ms": 1, "events": [
        {"type": "alarm.fired", "at_ms": 1, "data": {"lateness_ms": 3}},
        {"type": "alarm.fired", "at_ms": 1, "data": {"lateness_ms": 40}},
        {"type": "alarm.failed", "at_ms": 1, "data": {}}]})
    state.apply({"type": "delta", "at_ms": 2, "events": []})
    assert list(state.lateness)[-2:] == [40, 0]
