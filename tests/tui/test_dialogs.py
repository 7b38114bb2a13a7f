"""The fault form's rules (`screens/dialogs.fault_args`), without a screen."""

from __future__ import annotations

import pytest

from alarmtop.tui.screens.dialogs import callback_option, fault_args


def test_times_or_always_and_seconds_as_numbers() -> None:
    assert fault_args("F/a", "alarm_raise", "2", "", "", "B") == {
        "target": "F/a", "kind": "alarm_raise", "times": 2}
    assert fault_args("F/a", "alarm_delay", "", "2.5", "", "B") == {
        "target": "F/a", "kind": "alarm_delay", "always": True, "seconds": 2.5}
    assert fault_args("e1", "step_crash", "1", "", " reserve ", "C") == {
        "target": "e1", "kind": "step_crash", "times": 1, "step": "reserve", "point": "C"}
    assert fault_args("e1", "checkpoint_delay", "3", "1.5", "", "B") == {
        "target": "e1", "kind": "checkpoint_delay", "times": 3, "seconds": 1.5}
    assert fault_args("e1", "checkpoint_revoke", "1", "", "", "B") == {
        "target": "e1", "kind": "checkpoint_revoke", "times": 1}


@pytest.mark.parametrize(("kind", "times", "seconds", "step", "says"), [
    ("alarm_delay", "", "nan", "", "seconds is a number of seconds above 0"),
    ("alarm_delay", "", "inf", "", "not 'inf'"),
    ("alarm_delay", "", "0", "", "above 0"),
    ("alarm_delay", "", "soon", "", "not 'soon'"),
    ("alarm_delay", "", "", "", "alarm_delay needs seconds"),
    ("checkpoint_delay", "", "", "", "checkpoint_delay needs seconds: how long each "
                                     "checkpoint's answer waits"),
    ("alarm_raise", "two", "", "", "times is a whole number"),
    ("alarm_raise", "0", "", "", "times is 1 or more"),
    ("compensation_fail", "", "", "", "needs the step's name"),
])
def test_a_wrong_field_is_named_with_what_it_should_be(kind: str, times: str, seconds: str,
                                                       step: str, says: str) -> None:
    """`nan` was sent and came back as "'seconds' must be a number, not float"."""
    with pytest.raises(ValueError, match=says):
        fault_args("F/a", kind, times, seconds, step, "B")


def test_a_callback_is_offered_by_name_and_whole_id() -> None:
    assert callback_option({"name": "verdict", "callback_id": "cb1.WyJoc2YtZGF5MSIsIjQiXQ"}) == (
        "verdict  cb1.WyJoc2YtZGF5MSIsIjQiXQ")
