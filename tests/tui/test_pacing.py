"""`RedrawPacer`: when the console redraws, on explicit times (seconds); then, on the
fake server, that a burst of frames costs a redraw or two, not one per frame."""

from __future__ import annotations

from typing import Any

import pytest
from pytest import approx

from alarmtop.tui.pacing import RedrawPacer
from alarmtop.tui.screens.overview import OverviewScreen
from tests.tui.fake import FIRES, SIZE, fake_console, fed, frozen_console_clock


def pacer() -> RedrawPacer:
    return RedrawPacer(min_gap_s=0.25, countdown_s=0.5, key_quiet_s=0.15, max_stale_s=0.5)


def test_the_first_redraw_is_due_at_once() -> None:
    assert pacer().wait(100.0) == 0


def test_without_frames_the_countdowns_are_redrawn_every_half_second() -> None:
    p = pacer()
    p.drawn(100.0)
    assert p.wait(100.0) == approx(0.5)
    assert p.wait(100.3) == approx(0.2)
    assert p.wait(100.5) == 0


def test_a_frame_long_after_the_last_redraw_is_drawn_at_once() -> None:
    p = pacer()
    p.drawn(100.0)
    p.changed()
    assert p.wait(100.3) == 0


def test_frames_close_together_share_one_redraw() -> None:
    """Frames 0.1 s after a redraw wait until it is 0.25 s old, then one redraw shows
    them all; after it nothing is stale any more."""
    p = pacer()
    p.drawn(100.0)
    p.changed()
    assert p.wait(100.1) == approx(0.15)
    p.changed()
    assert p.wait(100.2) == approx(0.05)
    assert p.wait(100.25) == 0
    p.drawn(100.25)
    assert not p.stale
    assert p.wait(100.25) == approx(0.5)


def test_after_a_key_a_due_redraw_waits_for_the_keys_repaint() -> None:
    p = pacer()
    p.drawn(100.0)
    p.changed()
    p.key(100.3)
    assert p.wait(100.3) == approx(0.15)


def test_keys_never_hold_a_stale_view_past_max_stale() -> None:
    """Keys every 0.1 s (a held arrow key) would postpone redraws for ever: the view is
    redrawn anyway once the last redraw is `max_stale_s` old."""
    p = pacer()
    p.drawn(100.0)
    p.changed()
    for t in (100.1, 100.2, 100.3, 100.4):
        p.key(t)
        assert p.wait(t) > 0
    p.key(100.5)
    assert p.wait(100.5) == 0


def test_a_key_long_ago_delays_nothing() -> None:
    p = pacer()
    p.key(90.0)
    p.drawn(100.0)
    p.changed()
    assert p.wait(100.25) == 0


# -- in the console, on the fake server -------------------------------------------------


async def test_a_burst_of_frames_is_drawn_once_not_once_per_frame(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake server sends its welcome, snapshot and 12 deltas at once: the overview
    shows two states of the console at most (the first frame's, drawn at once, and the
    last one's), not each frame's. (Countdown redraws, on a slow machine, repeat one.)"""
    drawn: list[int] = []
    original = OverviewScreen.draw

    def draw(self: OverviewScreen, state: Any) -> None:
        drawn.append(state.seq)
        original(self, state)

    monkeypatch.setattr(OverviewScreen, "draw", draw)
    with frozen_console_clock():
        app = fake_console()
        async with app.run_test(size=SIZE) as pilot:
            await fed(pilot)
    assert drawn and drawn[-1] == len(FIRES)
    assert len(set(drawn)) <= 2
