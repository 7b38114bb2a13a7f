"""Which operator action applies to which row (`screens/actions.py`, pure part)."""

from __future__ import annotations

import pytest

from alarmtop.tui.screens.actions import applies


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
    assert {a for a in actions if applies(a, None, {"status": status})} == offered


def test_nothing_selected_nothing_offered() -> None:
    assert not applies("rearm", None, None) and not applies("inject_fault", None, None)
    assert not applies("abort", {"state": "dead"}, None)
    assert applies("inject_fault", None, {"status": "succeeded"})
