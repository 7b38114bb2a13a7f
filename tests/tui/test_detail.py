"""An execution as the console shows it (`tui/detail.py`), from a `describe()` answer."""

from __future__ import annotations

from typing import Any

from alarmtop.tui.detail import (
    callbacks_text,
    detail_text,
    event_summary,
    history_cells,
    json_text,
    saga_text,
    summary_text,
)

NOW = 1_800_000_000_000


def execution(**extra: Any) -> dict[str, Any]:
    history = [{"EventId": i, "EventType": "StepSucceeded", "Name": f"step-{i}",
                "EventTimestamp": "2027-01-15T08:00:00.250+00:00"} for i in range(1, 60)]
    history.append({"EventId": 60, "EventType": "ExecutionSucceeded",
                    "EventTimestamp": "2027-01-15T08:00:01.000+00:00"})
    return {"execution_id": "hsf-day2", "name": "festival-stream", "status": "succeeded",
            "version": "1", "invocations": 3, "created_ms": NOW - 60_000,
            "updated_ms": NOW - 1000, "ended_ms": NOW - 1000, "blocked_on": None,
            "human_hold": None, "error": None, "input": {"eventId": "hsf-day2"},
            "result": {"status": "cancelled", "verdict": "cancel"}, "history": history,
            "saga": [], "callbacks": [], **extra}


def test_the_summary_says_the_outcome_not_only_the_status() -> None:
    """A cancelled festival and a streaming one both end SUCCEEDED: the outcome differs."""
    text = summary_text(execution(), NOW).plain
    assert "SUCCEEDED" in text and "outcome: cancelled" in text
    assert "ended 1.0s ago" in text


def test_the_whole_history_is_there_with_times_the_last_event_too() -> None:
    text = detail_text(execution(), NOW).plain
    assert "history (60 events" in text and "ExecutionSucceeded" in text
    assert "08:00:01.000" in text
    assert text.index("input") < text.index("result") < text.index("saga stack")


def test_input_and_result_are_indented_json_cut_when_long() -> None:
    short = json_text("input", {"eventId": "hsf-day2"}).plain
    assert '"eventId": "hsf-day2"' in short and "more lines" not in short
    long = json_text("result", {f"k{i}": i for i in range(30)}, max_lines=8).plain
    assert "(32 lines)" in long and "… 25 more lines" in long
    assert json_text("result", {f"k{i}": i for i in range(30)}, None).plain.count("\n") == 33


def test_every_saga_state_has_its_mark_kept_included() -> None:
    """After a "go" verdict the stack is kept, not pending: the saga ended without
    compensating it (DESIGN section 5)."""
    text = saga_text([{"name": "reserve_streaming", "state": "kept"},
                      {"name": "open_viewing_page", "state": "failed", "error": "boom"},
                      {"name": "notify_partners", "state": "resolved", "note": "by hand"}])
    assert "● reserve_streaming" in text.plain and "kept" in text.plain
    assert "✗ open_viewing_page" in text.plain and "boom" in text.plain
    assert "note: by hand" in text.plain


def test_callbacks_show_their_ids() -> None:
    text = callbacks_text([{"name": "verdict", "status": "started", "kind": "Callback",
                            "callback_id": "cb1.WyJoc2YtZGF5MiIsIjQiXQ"}]).plain
    assert "verdict" in text and "cb1.WyJoc2YtZGF5MiIsIjQiXQ" in text


def test_a_history_event_as_a_row() -> None:
    failed = {"EventId": 7, "EventType": "StepFailed", "Name": "compensate_x",
              "EventTimestamp": "2027-01-15T08:00:00.250Z",
              "StepFailedDetails": {"Error": {"Payload": {"ErrorType": "Boom",
                                                           "ErrorMessage": "it broke"}},
                                    "RetryDetails": {"NextAttemptDelaySeconds": 1}}}
    assert history_cells(failed) == ("7", "08:00:00.250", "StepFailed", "compensate_x",
                                     "Boom: it broke  retry in 1s")
    assert event_summary({"EventType": "StepStarted"}) == ""
    assert history_cells({"EventId": 1, "EventType": "ExecutionStarted"})[1] == "-"
