"""The console's pure formatting: what an operator reads, rule by rule."""

from __future__ import annotations

import random
from typing import Any

import pytest

from alarmtop.tui.formatting import (
    EXEC_STYLE,
    SAGA_MARK,
    SPARK,
    STATE_LABEL,
    STATE_STYLE,
    ago,
    alarm_cells,
    alarm_label,
    audit_cells,
    clock_text,
    count,
    duration,
    event_time,
    execution_cells,
    fault_cells,
    first_line,
    object_cells,
    outcome,
    paused_text,
    pretty_json,
    relative,
    retry_text,
    saga_line,
    shorten_name,
    sparkline,
    urgency,
)

NOW = 1_800_000_000_000
S = 1000
M = 60 * S
H = 60 * M
D = 24 * H


def row(ref: str, state: str, *, retry: int = 0, max_retries: int = 6, due: int | None = None,
        near: bool = False, error: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"object": ref, "state": state, "retry_count": retry, "max_retries": max_retries,
            "next_attempt_ms": due, "scheduled_ms": due, "near_exhaustion": near,
            "last_error": error, **extra}


@pytest.mark.parametrize(("ms", "text"), [
    (None, "-"),
    (0, "0.0s"),
    (400, "0.4s"),
    (1500.0, "1.5s"),
    (9_900, "9.9s"),
    (10 * S, "10s"),
    (59 * S + 999, "59s"),
    (M, "1m00s"),
    (3 * M + 5 * S, "3m05s"),
    (59 * M + 59 * S, "59m59s"),
    (H, "1h00m"),
    (2 * H + 10 * M + 59 * S, "2h10m"),
    (23 * H + 59 * M, "23h59m"),
    (D, "1d0h"),
    (3 * D + 4 * H + 59 * M, "3d4h"),
    (400 * D, "400d0h"),
])
def test_duration_is_compact_at_every_scale(ms: float | None, text: str) -> None:
    """Seconds with a tenth under 10 s, then whole seconds, m+s, h+m, d+h (truncated)."""
    assert duration(ms) == text


@pytest.mark.parametrize(("ms", "text"), [
    (-400, "-0.4s"), (-12 * S, "-12s"), (-(3 * M + 5 * S), "-3m05s"),
    (-(2 * H + 10 * M), "-2h10m"), (-(3 * D + 4 * H), "-3d4h"),
])
def test_duration_keeps_the_sign_of_a_negative_span(ms: int, text: str) -> None:
    """A negative span (an overdue alarm) reads like the positive one with a minus."""
    assert duration(ms) == text
    assert duration(-ms) == text[1:]


@pytest.mark.parametrize(("at_ms", "text"), [
    (None, "-"),
    (NOW, "now"), (NOW + 49, "now"), (NOW - 49, "now"),
    (NOW + 60, "in 0.1s"), (NOW + 3_100, "in 3.1s"), (NOW + 63_800, "in 1m03s"),
    (NOW - 125 * S, "2m05s ago"), (NOW - 2 * D, "2d0h ago"),
])
def test_relative_says_in_or_ago_and_now_within_50_ms(at_ms: int | None, text: str) -> None:
    """The future reads 'in ...', the past '... ago', anything within 50 ms 'now'."""
    assert relative(at_ms, NOW) == text


def test_count_groups_thousands() -> None:
    """Counts carry thousands separators, as in the header sketch (9,812)."""
    assert [count(n) for n in (0, 7, 9_812, 100_000, 1_234_567)] == [
        "0", "7", "9,812", "100,000", "1,234,567"]


@pytest.mark.parametrize(("fields", "label"), [
    ({"state": "dead"}, "DEAD"),
    ({"state": "retrying"}, "RETRYING"),
    ({"state": "running"}, "RUNNING"),
    ({"state": "pending"}, "PENDING"),
    ({"state": "retrying", "near_exhaustion": True}, "NEAR-EXH"),
    ({"state": "running", "near_exhaustion": True}, "NEAR-EXH"),
    ({"state": "paused"}, "PAUSED"),
    ({}, "?"),
])
def test_alarm_label(fields: dict[str, Any], label: str) -> None:
    """The state's label; near exhaustion wins over the state; unknown states shout."""
    assert alarm_label(fields) == label


def test_every_alarm_label_has_a_style() -> None:
    """Colours mean something: every label the console prints has its style."""
    assert set(STATE_LABEL.values()) <= set(STATE_STYLE)
    assert "NEEDS-HUMAN" in STATE_STYLE and "needs_human" in EXEC_STYLE


def test_urgency_orders_dead_near_retrying_running_then_pending_by_due() -> None:
    """Sorted by urgency: dead, near exhaustion, retrying, running, then pending soonest
    due first; within a rank the alarm further up its ladder comes first."""
    expected = [
        row("Flaky/dead", "dead", retry=6, due=None),
        row("Ledger/near", "retrying", retry=6, due=NOW + 60 * S, near=True),
        row("Counter/retry-4", "retrying", retry=4, due=NOW + 30 * S),
        row("Counter/retry-2", "retrying", retry=2, due=NOW + 3 * S),
        row("Counter/running", "running", retry=0, due=NOW - S),
        row("Ledger/soon", "pending", due=NOW + 400),
        row("Ledger/later", "pending", due=NOW + 12 * S),
        row("Dash/much-later", "pending", due=NOW + 2 * H),
    ]
    shuffled = expected[:]
    random.Random(5).shuffle(shuffled)
    assert [r["object"] for r in sorted(shuffled, key=urgency)] == [
        r["object"] for r in expected]


def test_urgency_falls_back_to_the_scheduled_time() -> None:
    """A row without a next attempt is placed by its scheduled time."""
    a = {"object": "A/a", "state": "pending", "scheduled_ms": NOW + 5}
    b = {"object": "B/b", "state": "pending", "scheduled_ms": NOW + 1}
    assert sorted([a, b], key=urgency) == [b, a]


def test_retry_text() -> None:
    """Retries as count/max, '?' when the maximum is unknown."""
    assert retry_text({"retry_count": 2, "max_retries": 6}) == "2/6"
    assert retry_text({}) == "0/?"


@pytest.mark.parametrize(("text", "width", "out"), [
    (None, 10, "-"), ("", 10, "-"), ("   \n  ", 10, "-"),
    ("first\nsecond", 10, "first"), ("  padded  ", 10, "padded"),
    ("exactly10!", 10, "exactly10!"), ("eleven char", 10, "eleven ch…"),
])
def test_first_line(text: str | None, width: int, out: str) -> None:
    """The first line of a message, stripped, cut to `width` with an ellipsis."""
    assert first_line(text, width) == out
    assert len(first_line(text, width)) <= width


def test_alarm_cells_for_each_state() -> None:
    """Dead and retrying alarms have no 'due in' (their next try says when); pending
    ones say when they are due; the last error is cut to one short line."""
    long_error = "RuntimeError: " + "x" * 80 + "\nTraceback line"
    assert alarm_cells(row("Flaky/p-7", "dead", retry=6, error="TimeoutError: slow"), NOW) == (
        "DEAD", "Flaky/p-7", "-", "6/6", "-", "TimeoutError: slow")
    assert alarm_cells(row("L/t-42", "retrying", retry=5, due=NOW + 63_800, near=True,
                           error=long_error), NOW) == (
        "NEAR-EXH", "L/t-42", "-", "5/6", "in 1m03s", first_line(long_error, 48))
    assert len(alarm_cells(row("L/t", "retrying", error=long_error), NOW)[5]) == 48
    assert alarm_cells(row("C/abc", "retrying", retry=2, due=NOW + 3_100), NOW) == (
        "RETRYING", "C/abc", "-", "2/6", "in 3.1s", "-")
    assert alarm_cells(row("L/t-7", "pending", due=NOW + 400), NOW) == (
        "PENDING", "L/t-7", "in 0.4s", "0/6", "-", "-")
    assert alarm_cells(row("L/late", "pending", due=NOW - 2_500), NOW)[2] == "2.5s ago"
    assert alarm_cells(row("C/run", "running", due=NOW), NOW)[:3] == ("RUNNING", "C/run", "now")


STACK = [
    {"name": "notify_partners", "state": "compensated"},
    {"name": "open_viewing_page", "state": "failed", "error": "boom"},
    {"name": "reserve_streaming", "state": "pending"},
]


def test_saga_line_marks_each_entry() -> None:
    """Top of the stack first, each entry with its mark and state, like the sketch."""
    assert saga_line(STACK) == ("notify_partners ✓ compensated | open_viewing_page ✗ failed | "
                                "reserve_streaming · pending")
    assert saga_line([{"name": "x", "state": "resolved"}, {"name": "y",
                                                           "state": "compensating"}]) == (
        "x ✎ resolved | y … compensating")
    assert saga_line([{"name": "z", "state": "mystery"}]) == "z ? mystery"
    assert saga_line([]) == "-"
    # every state of DESIGN section 5, kept included (the saga ended without compensating)
    assert set(SAGA_MARK) == {"compensated", "resolved", "failed", "compensating", "pending",
                              "kept"}
    assert saga_line([{"name": "k", "state": "kept"}]) == "k ● kept"


def test_sparkline_scales_to_the_highest_value() -> None:
    """Eight levels from the lowest block to the full one, scaled to the maximum."""
    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == SPARK
    assert sparkline([0, 7]) == "▁█"
    assert sparkline([5, 5, 5]) == "███"


def test_sparkline_of_nothing_and_of_zeros() -> None:
    """No values draw nothing; all zeros draw a flat line (no division by zero)."""
    assert sparkline([]) == ""
    assert sparkline([0, 0, 0, 0]) == "▁▁▁▁"


def test_sparkline_keeps_the_last_width_values() -> None:
    """Only the most recent `width` values are drawn."""
    assert sparkline(list(range(100)), width=12) == sparkline(list(range(88, 100)), width=12)
    assert len(sparkline(list(range(100)), width=12)) == 12
    assert len(sparkline([3, 1], width=12)) == 2


def test_execution_cells_for_a_needs_human_saga() -> None:
    """NEEDS-HUMAN, Name/id, what it waits on followed by its saga stack, last update; the
    failure's message (in parentheses) is left to the detail pane."""
    r = {"execution_id": "hsf-day2", "name": "festival-stream", "status": "needs_human",
         "blocked_on": "needs a human: compensate_open_viewing_page failed (injected fault "
                       "f1 (compensation_fail) on hsf-day2/compensate_open_viewing_page)",
         "updated_ms": NOW - 3 * S, "saga": STACK}
    assert execution_cells(r, NOW) == (
        "NEEDS-HUMAN", "festival-stream/hsf-day2",
        "needs a human: compensate_open_viewing_page failed  saga: notify_partners ✓ "
        "compensated | open_viewing_page ✗ failed | reserve_streaming · pending",
        "3.0s ago")


@pytest.mark.parametrize(("status", "shows_saga"), [
    ("needs_human", True), ("failed", True), ("aborted", True),
    ("suspended", False), ("running", False), ("succeeded", False),
])
def test_execution_cells_show_the_saga_only_when_it_matters(status: str,
                                                            shows_saga: bool) -> None:
    """The saga stack is spelled out for executions that failed or wait for a human."""
    r = {"execution_id": "e1", "name": "f", "status": status, "blocked_on": None,
         "updated_ms": NOW, "saga": STACK}
    label, ref, detail, updated = execution_cells(r, NOW)
    assert label == status.upper().replace("NEEDS_HUMAN", "NEEDS-HUMAN")
    assert (ref, updated) == ("f/e1", "now")
    assert detail.startswith("saga: ") if shows_saga else detail == "-"


def test_a_change_made_after_the_consoles_clock_read_is_now_not_in_the_future() -> None:
    """The server stamps a change a moment after the console's clock last heard from it:
    "updated in 0.1s" read as a change to come."""
    r = {"execution_id": "e1", "name": "n", "status": "running", "updated_ms": NOW + 100}
    assert execution_cells(r, NOW)[3] == "now"
    assert ago(NOW + 5_000, NOW) == "now" and ago(NOW - 5_000, NOW) == "5.0s ago"
    assert ago(None, NOW) == "-"


def test_execution_cells_cut_a_long_detail() -> None:
    """What an execution waits on is one line of at most 160 characters."""
    r = {"execution_id": "e", "name": "f", "status": "suspended",
         "blocked_on": "waiting " * 40, "updated_ms": None}
    detail = execution_cells(r, NOW)[2]
    assert len(detail) == 160 and detail.endswith("…")
    assert execution_cells(r, NOW)[3] == "-"


# -- the other listings' cells -----------------------------------------------------------


def test_object_cells() -> None:
    row = {"object": "Flaky/p-1", "resident": False, "storage": False, "sockets": 2,
           "alarm_ms": NOW + 3_100, "alarm_state": "retrying"}
    assert object_cells(row, NOW) == ("Flaky/p-1", "hibernated", "no", "2", "in 3.1s",
                                      "retrying")
    bare = {"object": "Execution/e1", "resident": True, "sockets": 0, "alarm_ms": None,
            "alarm_state": None}
    assert object_cells(bare, NOW)[1:] == ("resident", "yes", "0", "-", "-")


def test_audit_cells_show_a_callbacks_execution() -> None:
    row = {"seq": 2, "at_ms": 1_800_000_000_000, "actor": "127.0.0.1:50412",
           "role": "operator", "action": "send_callback", "target": "cb1.WyJoc2Yi",
           "execution_id": "hsf-day2", "reason": None, "ok": True}
    assert audit_cells(row) == ("08:00:00", "-", "127.0.0.1:50412", "operator",
                                "send_callback", "hsf-day2 (callback)", "ok", "-")
    refused = {**row, "execution_id": None, "target": "Flaky/p-7", "ok": False,
               "reason": "x" * 60, "node": "node-b"}
    cells = audit_cells(refused, width=20)
    assert cells[1] == "node-b"  # the node that ran it
    assert cells[5:7] == ("Flaky/p-7", "refused") and len(cells[7]) == 20


@pytest.mark.parametrize(("name", "width", "cut"), [
    ("LeaseLedger/tenant-42", 40, "LeaseLedger/tenant-42"),  # fits: as it is
    ("LeaseLedger/tenant-42", 18, "LeaseLe…/tenant-42"),  # the class gives way
    ("LeaseLedger/tenant-4", 13, "Lea…/tenant-4"),
    ("LeaseLedger/tenant-4", 10, "…/tenant-4"),  # the class gone, the name whole
    ("LeaseLedger/tenant-42", 9, "Leas…t-42"),  # not even the name: the middle goes
    ("festival-stream/hsf-day1", 14, "fest…/hsf-day1"),
    ("8f1c2d3e4f5a6b7c9d0e", 9, "8f1c…9d0e"),  # no slash: the middle goes
    ("abcdef", 2, "a…"),
])
def test_a_name_is_cut_by_what_tells_it_apart(name: str, width: int, cut: str) -> None:
    assert shorten_name(name, width) == cut
    assert len(cut) <= width


def test_five_tenants_cut_to_one_width_stay_five_names() -> None:
    """The bug: at 80 columns five ledgers all read "LeaseLedger/tenan…"."""
    names = [f"LeaseLedger/tenant-{n}" for n in (3, 7, 9, 42, 108)]
    assert len({shorten_name(n, 18) for n in names}) == 5
    assert len({n[:17] + "…" for n in names}) == 1  # what cutting at the end did


def test_a_paused_alarm_says_since_when_who_and_why() -> None:
    row = {"paused": True, "paused_ms": NOW - 125_000}
    assert paused_text(row, NOW) == ("PAUSED since 07:57:55 UTC (2m05s ago)\nnothing fires "
                                     "until it is resumed (p); its retry count is kept")
    full = {**row, "paused_by": "127.0.0.1:50412", "paused_reason": "vendor maintenance"}
    assert paused_text(full, NOW).startswith(
        "PAUSED since 07:57:55 UTC (2m05s ago) by 127.0.0.1:50412: vendor maintenance\n")
    unknown = {**row, "paused_by": None, "paused_reason": None}
    assert paused_text(unknown, NOW).startswith("PAUSED since 07:57:55 UTC (2m05s ago), no "
                                                "reason given\n")


def test_a_snoozes_audit_row_says_by_how_much() -> None:
    row = {"seq": 3, "at_ms": 1_800_000_000_000, "actor": "127.0.0.1:50412",
           "role": "operator", "action": "snooze_alarm", "target": "Flaky/p-7",
           "reason": None, "ok": True, "detail": {"outcome": "ok", "by_ms": 86_400_000}}
    assert audit_cells(row)[7] == "by 1d0h"
    with_reason = {**row, "reason": "deploy first", "detail": {"by_ms": 300_000}}
    assert audit_cells(with_reason)[7] == "by 5m00s: deploy first"


def test_fault_cells() -> None:
    row = {"id": "f1", "target": "hsf-day2", "kind": "step_crash", "remaining": None,
           "triggered": 3, "step": "reserve", "point": "B", "seconds": None}
    assert fault_cells(row) == ("f1", "hsf-day2", "step_crash", "always", "3", "reserve B")
    assert fault_cells({**row, "remaining": 2, "step": None, "point": None})[3:] == (
        "2", "3", "-")


def test_pretty_json_is_indented_sorted_and_cut() -> None:
    assert pretty_json({"b": 1, "a": [1, 2]}) == (
        '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}', 7)
    text, lines = pretty_json({f"k{i:02d}": i for i in range(20)}, max_lines=5)
    assert lines == 22 and text.splitlines()[-1] == "… 18 more lines"
    assert len(text.splitlines()) == 5
    assert pretty_json(None) == ("null", 1)


def test_outcome_reads_the_result_then_the_error() -> None:
    assert outcome({"result": {"status": "cancelled", "verdict": "cancel"}}) == "cancelled"
    assert outcome({"result": None, "error": {"ErrorType": "Aborted",
                                              "ErrorMessage": "venue gone"}}) == (
        "Aborted: venue gone")
    assert outcome({"result": 42}) == "42"
    assert outcome({"result": None}) == "-"


def test_event_time_of_an_iso_timestamp() -> None:
    assert event_time({"EventTimestamp": "2027-01-15T08:00:01.250+00:00"}) == "08:00:01.250"
    assert event_time({"EventTimestamp": "2027-01-15T08:00:01Z"}) == "08:00:01.000"
    assert event_time({}) == "-"
    assert event_time({"EventTimestamp": "yesterday"}) == "yesterday"


def test_clock_text_and_a_wide_last_error() -> None:
    assert clock_text(1_800_000_000_000) == "08:00:00" and clock_text(None) == "-"
    error = "RuntimeError: " + "downstream unavailable " * 8
    assert len(alarm_cells(row("F/p", "dead", error=error), NOW, error_width=150)[5]) > 48
