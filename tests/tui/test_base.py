"""What every view shares (`screens/base.py`), on the fake server: the footer is rebuilt
only when an action comes or goes, and a first visit does not restyle the whole app."""

from __future__ import annotations

from typing import Any

import pytest
from textual.app import App
from textual.screen import Screen

from alarmtop.tui.screens.alarms import AlarmsScreen
from tests.tui.fake import SIZE, fake_console, fed, frozen_console_clock, until


async def test_moving_the_cursor_does_not_rebuild_the_footer() -> None:
    """The footer rebuilds all its keys whenever it is asked to; moving between alarms
    that offer the same actions (two that are not dead letters) leaves every action as
    it was, so it is not asked (it was, on every move)."""
    with frozen_console_clock():
        app = fake_console()
        async with app.run_test(size=SIZE) as pilot:
            await fed(pilot)
            await pilot.press("2")
            await until(pilot, lambda: isinstance(app.screen, AlarmsScreen)
                        and app.screen.query_one("#alarm-page").row_count > 0, "the alarms")
            await pilot.press("down")  # off the dead letter: x no longer applies
            await pilot.pause()
            asked: list[Screen[Any]] = []
            app.screen.bindings_updated_signal.subscribe(app.screen, asked.append,
                                                         immediate=True)
            await pilot.press("down", "down", "up")
            await pilot.pause()
            assert app.screen.query_one("#alarm-page").cursor_row == 2
            assert asked == []
            labels = {str(k.description) for k in app.screen.query("FooterKey")}
            assert "Re-arm" in labels and "Clear dead" not in labels


async def test_visiting_every_view_restyles_the_app_once_at_most(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Textual re-parses every stylesheet when it restyles the app (30-50 ms); a first
    visit of each view did it twice. Only the first screen, the overview, keeps one
    restyle (it needs it at start). The pictures, unchanged, are the snapshot tests."""
    restyled: list[App[Any]] = []
    original = App.refresh_css

    def refresh_css(self: App[Any], animate: bool = True) -> None:
        restyled.append(self)
        original(self, animate)

    monkeypatch.setattr(App, "refresh_css", refresh_css)
    with frozen_console_clock():
        app = fake_console()
        async with app.run_test(size=SIZE) as pilot:
            await fed(pilot)
            restyled.clear()
            for key in "23456781":
                await pilot.press(key)
                await pilot.pause()
            assert len(restyled) <= 1
