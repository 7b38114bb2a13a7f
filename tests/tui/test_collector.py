"""`collector`: the composed views stay out of full collections while the console runs."""

from __future__ import annotations

import gc

from tests.tui.fake import SIZE, fake_console, fed, frozen_console_clock, until


def tracked(obj: object) -> bool:
    """Whether a collection pass (of any generation) would walk `obj`."""
    return any(o is obj for gen in range(3) for o in gc.get_objects(generation=gen))


async def test_a_composed_view_is_frozen_until_the_console_exits() -> None:
    with frozen_console_clock():
        app = fake_console()
        async with app.run_test(size=SIZE) as pilot:
            await fed(pilot)
            overview = app.screen
            await until(pilot, lambda: gc.get_freeze_count() > 0, "the first freeze")
            assert not tracked(overview)
            await pilot.press("2")
            await until(pilot, lambda: app.screen is not overview, "the alarms view")
            alarms = app.screen
            await until(pilot, lambda: not tracked(alarms), "the alarms view frozen")
    assert gc.get_freeze_count() == 0
    assert tracked(overview) and tracked(alarms)
