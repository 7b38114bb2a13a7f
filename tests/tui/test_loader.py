"""`screens/loader.Loader`: one fetch at a time, asks coalesced, only while shown."""

from __future__ import annotations

from typing import Any

from alarmtop.tui.screens.executions import ExecutionsScreen
from tests.tui.fake import SIZE, fake_console, fed, frozen_console_clock, until


async def test_asks_while_a_fetch_flies_become_one_more_fetch() -> None:
    with frozen_console_clock():
        app = fake_console()
        async with app.run_test(size=SIZE) as pilot:
            await fed(pilot)
            await pilot.press("3")
            await until(pilot, lambda: isinstance(app.screen, ExecutionsScreen)
                        and app.screen.detail is not None, "the executions and a detail")
            screen = app.screen
            assert isinstance(screen, ExecutionsScreen)
            asked: list[str] = []
            fetch = app.fetch

            async def counting(op: str, **args: Any) -> Any:
                asked.append(op)
                return await fetch(op, **args)

            app.fetch = counting  # type: ignore[method-assign]
            for _ in range(10):  # ten frames that touched executions, at once
                screen.details.ask()
            await until(pilot, lambda: not screen.details.gate.in_flight
                        and not screen.details.gate.wanted and asked, "the asks answered")
            await pilot.pause(0.6)
            assert asked == ["execution"]  # not ten
            await pilot.press("1")  # another view: the executions view fetches nothing
            await until(pilot, lambda: app.screen is not screen, "the overview")
            screen.details.ask()
            await pilot.pause(0.6)
            assert asked == ["execution"]
            app.workers.cancel_group(app, "feed")
