"""The bulk actions' pure parts: selections, requests, progress, the board's merge."""

from __future__ import annotations

from typing import Any

import pytest

from alarmtop.core.model import alarm_pause
from alarmtop.core.model.alarm_policy import AlarmRecord, AlarmState
from alarmtop.core.model.bulk_actions import (
    DEFAULT_THROTTLE,
    ExecutionState,
    already_applied,
    kind_of,
    plan_start,
)
from alarmtop.core.model.bulk_progress import Progress, finished_status
from alarmtop.core.model.errors import InvalidArgument, NoAlarm
from alarmtop.core.model.selection import Selection, parse_selection
from alarmtop.core.ops.bulk import decide
from alarmtop.core.ops.timers_board import alarm_row, check_page, merge


def test_a_selection_keeps_what_was_given() -> None:
    sel = parse_selection({"kind": "alarms", "state": "dead", "class": "Job", "name": "eu-",
                           "due_from_ms": 1, "due_to_ms": 1})
    assert sel == Selection("alarms", state="dead", cls="Job", name="eu-", due_from_ms=1,
                            due_to_ms=1)
    assert sel.to_dict() == {"kind": "alarms", "state": "dead", "class": "Job",
                             "name": "eu-", "due_from_ms": 1, "due_to_ms": 1}
    assert parse_selection({"kind": "executions", "status": "failed",
                            "error": "timeout"}).error == "timeout"


@pytest.mark.parametrize("value, match", [
    ("dead", "a selection is a dict"),
    ({}, "needs \"kind\""),
    ({"kind": "alarms", "status": "failed"}, "unknown selection field"),
    ({"kind": "executions", "due_from_ms": 5}, "unknown selection field"),
    ({"kind": "alarms", "state": "asleep"}, "state is one of"),
    ({"kind": "executions", "status": "asleep"}, "status is one of"),
    ({"kind": "alarms", "name": ""}, "text of 1-256"),
    ({"kind": "alarms", "due_to_ms": "soon"}, "epoch milliseconds"),
    ({"kind": "alarms", "due_to_ms": True}, "epoch milliseconds"),
    ({"kind": "alarms", "updated_from_ms": 5, "updated_to_ms": 4}, "swap them"),
])
def test_bad_selections_say_what_is_wrong(value: Any, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        parse_selection(value)


def test_requests() -> None:
    plan = plan_start("rearm", keys=["A/x", "A/y", "A/x"])
    assert (plan.kind, plan.keys, plan.throttle) == ("alarms", ("A/x", "A/y"),
                                                    DEFAULT_THROTTLE)
    assert plan_start("pause", selection={"kind": "alarms"}).action == "pause_alarm"
    assert plan_start("clear", keys=["A/x"]).action == "clear_dead_letter"
    assert plan_start("pause", keys=["e1"]).kind == "executions"
    assert kind_of("redrive") == "executions"
    with pytest.raises(InvalidArgument, match="give kind="):
        kind_of("clear_faults")
    with pytest.raises(InvalidArgument, match="not an action on alarms"):
        plan_start("redrive", selection={"kind": "alarms"})
    with pytest.raises(InvalidArgument, match=r"at_ms .* is for rearm only"):
        plan_start("fire_now", keys=["A/x"], at_ms=5)
    with pytest.raises(InvalidArgument, match="1-100,000"):
        plan_start("rearm", keys=[])
    with pytest.raises(InvalidArgument, match="throttle"):
        plan_start("rearm", keys=["A/x"], throttle=1001)


def test_an_execution_item_cut_short_is_judged_by_what_it_saw() -> None:
    seen = ExecutionState("failed", False, True, 0, None, None).fingerprint()
    after = ExecutionState("running", False, False, 1, None, None)
    assert already_applied("redrive", seen, after)
    assert not already_applied("redrive", seen, ExecutionState("failed", False, True, 0,
                                                               None, None))
    waiting = ExecutionState("needs_human", False, False, 0, "op7", None)
    assert not already_applied("resolve", waiting.fingerprint(), waiting)
    assert already_applied("resolve", waiting.fingerprint(),
                           ExecutionState("running", False, False, 0, None, None))
    assert already_applied("pause", {}, ExecutionState("running", True, False, 0, None, None))


def test_progress_counts_and_coalesces() -> None:
    p = Progress(total=1000, throttle=10)
    assert p.every == 20  # 1000 / 50 events, never fewer items than the throttle
    p.began(10)
    assert (p.in_flight, p.max_in_flight) == (10, 10)
    p.ended(9, [("A/x", "no alarm")])
    assert (p.done, p.failed, p.left, p.in_flight) == (9, 1, 990, 0)
    assert not p.due(now_ms=0)  # 10 ended, 20 make an event, no time has passed
    p.began(10)
    p.ended(10)
    assert p.due(now_ms=0)
    p.announced(0)
    assert not p.due(now_ms=10_000)  # nothing ended since
    p.began(1)
    p.ended(1)
    assert p.due(now_ms=10_000)  # time alone, once something ended
    event = p.event("b1", "rearm", "alarms")
    assert event["recent_failures"] == [{"key": "A/x", "error": "no alarm"}]
    assert finished_status(0, False) == "done" and finished_status(1, False) == "failed"
    assert finished_status(0, True) == "cancelled"


def _rec(state: AlarmState = AlarmState.DEAD, next_ms: int | None = None,
         paused: int | None = None) -> AlarmRecord:
    return AlarmRecord("A", "x", 100, state, 6, next_ms, "boom", paused_ms=paused)


def test_decide_from_the_record() -> None:
    tr = decide("rearm", _rec(), ("A", "x"), 1000, None)
    assert tr.record is not None and (tr.record.state, tr.record.retry_count,
                                      tr.record.next_attempt_ms) == (AlarmState.PENDING, 0,
                                                                     1000)
    assert decide("clear_dead_letter", _rec(), ("A", "x"), 1000, None).record is None
    with pytest.raises(InvalidArgument, match="not a dead letter"):
        decide("clear_dead_letter", _rec(AlarmState.PENDING, 5), ("A", "x"), 1000, None)
    with pytest.raises(NoAlarm):
        decide("rearm", None, ("A", "x"), 1000, None)
    with pytest.raises(InvalidArgument, match="resume it first"):
        decide("fire_now", _rec(AlarmState.PENDING, 5, paused=1), ("A", "x"), 1000, None)


def test_pause_keeps_the_record_and_is_never_due() -> None:
    rec = _rec(AlarmState.RETRYING, 5_000)
    tr = alarm_pause.pause(rec, 1_000, "why")
    assert tr is not None and tr.record is not None
    assert tr.record.due_ms is None and tr.record.retry_count == 6
    assert alarm_pause.pause(tr.record, 2_000) is None  # paused already: nothing to write
    back = alarm_pause.resume(tr.record, 9_000)
    assert back is not None and back.record == rec and back.events[0].data["overdue"]
    assert alarm_pause.snoozed_until(5_000, 1_000, 60_000) == 65_000
    assert alarm_pause.snoozed_until(5_000, 45_000, 60_000) == 105_000  # overdue: from now
    with pytest.raises(InvalidArgument, match="dead letter"):
        alarm_pause.snooze(_rec(), 0, 10)


def test_the_board_merges_in_key_order() -> None:
    a = alarm_row(_rec(AlarmState.PENDING, 20), now_ms=50)
    assert a["state"] == "overdue" and a["key"] == [20, 0, "A", "x", ""]
    rows = merge(3, None, [{"key": [5, 0, "A", "a", ""]}, {"key": [9, 0, "A", "b", ""]}],
                 [{"key": [5, 2, "e", "1", "wait"]}])
    assert [r["key"][0] for r in rows] == [5, 5, 9]
    assert merge(3, [5, 0, "A", "a", ""], [{"key": [5, 0, "A", "a", ""]}]) == []
    with pytest.raises(InvalidArgument, match="limit"):
        check_page(0, None)
    with pytest.raises(InvalidArgument, match="key"):
        check_page(5, [1, 7, "a", "b", "c"])
