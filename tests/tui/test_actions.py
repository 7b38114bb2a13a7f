"""Which operator action applies to which row (`screens/actions.py`, pure part)."""

from __future__ import annotations

import pytest

from alarmtop.tui.screens.actions import applies, refusal
from alarmtop.tui.screens.tools import tool_applies, tool_refusal


@pytest.mark.parametrize(("state", "offered"), [
    ("dead", {"rearm", "fire_now", "clear_dead_letter", "inject_fault"}),
    ("pending", {"rearm", "fire_now", "inject_fault"}),
    ("retrying", {"rearm", "fire_now", "inject_fault"}),
])
def test_clear_dead_letter_is_for_dead_letters_only(state: str, offered: set[str]) -> None:
    """`x` on a pending alarm asked to drop a dead letter that did not exist."""
    actions = {"rearm", "fire_now", "clear_dead_letter", "inject_fault", "abort"}
    assert {a for a in actions if applies(a, {"state": state}, None)} == offered


@pytest.mark.parametrize(("status", "offered"), [
    ("needs_human", {"retry_compensation", "resolve", "abort"}),
    ("suspended", {"send_callback", "abort", "hand_to_human"}),
    ("running", {"send_callback", "abort", "hand_to_human"}),
    ("succeeded", set()), ("aborted", set()), ("failed", set()),
])
def test_execution_actions_follow_its_status(status: str, offered: set[str]) -> None:
    actions = {"send_callback", "retry_compensation", "resolve", "abort", "hand_to_human"}
    row = {"status": status, "blocked_on": "needs a human: compensate_x failed (boom)"
           if status == "needs_human" else None}
    assert {a for a in actions if applies(a, None, row)} == offered


def test_retry_compensation_is_not_offered_on_an_execution_held_with_h() -> None:
    """`R` on an execution handed to a human failed with "nothing to retry": held, it is
    needs-human too, but no compensation failed."""
    held = {"name": "festival-stream", "execution_id": "d1", "status": "needs_human",
            "blocked_on": "waiting for callback 'verdict'"}
    assert not applies("retry_compensation", None, held)
    assert applies("resolve", None, held) and applies("abort", None, held)
    assert "held for a human" in refusal("retry_compensation", None, held)
    assert "nothing to retry" in refusal("retry_compensation", None, held)


def test_pause_or_resume_follows_the_alarm_as_it_is_now() -> None:
    paused = {"object": "Flaky/a", "state": "pending", "paused": True}
    running = {**paused, "paused": False}
    assert tool_applies("resume_alarm", paused, None)
    assert not tool_applies("pause_alarm", paused, None)
    assert tool_applies("pause_alarm", running, None)
    assert tool_refusal("resume_alarm", running, None) == "the alarm of Flaky/a is not paused"
    assert not applies("fire_now", paused, None)
    assert "resume it first" in refusal("fire_now", paused, None)


def test_every_refusal_names_its_row() -> None:
    assert refusal("clear_dead_letter", {"object": "Flaky/a", "state": "pending"},
                   None) == "Flaky/a is not a dead letter (it is pending)"
    assert refusal("rearm", None, None) == "no alarm is selected"
    done = {"name": "n", "execution_id": "e", "status": "succeeded"}
    assert refusal("abort", None, done) == "n/e has ended (succeeded)"
    assert tool_refusal("redrive", None, {**done, "status": "running"}).startswith(
        "n/e is running: redrive")


def test_nothing_selected_nothing_offered() -> None:
    assert not applies("rearm", None, None) and not applies("inject_fault", None, None)
    assert not applies("abort", {"state": "dead"}, None)
    assert applies("inject_fault", None, {"status": "succeeded"})
