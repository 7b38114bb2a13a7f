"""Data down as messages (`tui/messages.py`): a waiting one is replaced by the next."""

from __future__ import annotations

from alarmtop.tui.messages import Reload, StateChanged
from alarmtop.tui.state import ConsoleState


def test_a_newer_state_replaces_one_still_waiting() -> None:
    old, new = ConsoleState(seq=1), ConsoleState(seq=2)
    assert StateChanged(old).can_replace(StateChanged(new))
    assert not StateChanged(old).can_replace(Reload())
    assert Reload().can_replace(Reload()) and not Reload().can_replace(StateChanged(new))
