"""One test per reach into Textual's internals (`tui/compat.py`): when a Textual release
moves one of them, its test here says which, and nothing else in the console breaks."""

from __future__ import annotations

import signal
from typing import Any, ClassVar

from textual.app import App, ComposeResult
from textual.screen import Screen
from textual.widgets import DataTable, Label
from textual.widgets.data_table import RowKey

from alarmtop.tui import compat


class Plain(Screen[None]):
    def compose(self) -> ComposeResult:
        yield Label("a view")


class Modes(App[None]):
    MODES: ClassVar[dict[str, Any]] = {"one": Plain, "two": Plain}
    DEFAULT_MODE = "one"


async def test_a_screen_composed_ahead_is_the_one_its_mode_shows() -> None:
    """`compose_ahead` mounts a mode's screen before it is shown; `switch_mode` then shows
    that screen (not a new one), composed already; `mode_started` knows both modes."""
    app = Modes()
    async with app.run_test() as pilot:
        assert compat.mode_started(app, "one") and not compat.mode_started(app, "two")
        ahead = Plain()
        mounting = compat.compose_ahead(app, "two", ahead)
        assert mounting is not None
        await mounting
        assert ahead.is_mounted and compat.mode_started(app, "two")
        assert compat.compose_ahead(app, "two", Plain()) is None  # one screen per mode
        await app.switch_mode("two")
        await pilot.pause()
        assert app.screen is ahead
        assert ahead.query_one(Label).render().plain == "a view"  # type: ignore[union-attr]


async def test_a_screen_styled_with_the_current_sheet_is_not_restyled() -> None:
    """`restyle_pending` is what `switch_mode` checks before restyling the whole app;
    `adopt_styles` makes a screen count as styled with the current sheet."""
    app = Modes()
    async with app.run_test() as pilot:
        await pilot.pause()
        compat.adopt_styles(app.screen, app)
        assert not compat.restyle_pending(app)
        app.theme = "textual-light" if app.theme != "textual-light" else "nord"
        assert compat.restyle_pending(app)  # the shown screen predates the new theme
        compat.adopt_styles(app.screen, app)
        assert not compat.restyle_pending(app)


class OneTable(App[None]):
    def compose(self) -> ComposeResult:
        table: DataTable[Any] = DataTable(id="t")
        table.add_columns("state", "due")
        table.add_row("PENDING", "in 1.0s", key="a")
        table.add_row("PENDING", "in 2.0s", key="b")
        yield table


def line_text(table: DataTable[Any], y: int) -> str:
    return "".join(seg.text for seg in table.render_line(y))


async def test_cells_changed_in_place_are_drawn_once_their_renders_are_forgotten() -> None:
    """The table keeps its data in `_data` and caches renders by row and cell: a value
    written in place shows once those renders are dropped (and not before, which is
    why `forget_renders` exists), and only that row is asked to repaint."""
    async with OneTable().run_test(size=(40, 6)) as pilot:
        table = pilot.app.query_one(DataTable)
        await pilot.pause()
        assert "in 1.0s" in line_text(table, 1)
        column = next(iter(table.columns))
        assert compat.set_cells_in_place(table, [(RowKey("a"), list(table.columns)[1],
                                                  "in 0.5s")])
        assert table.get_row("a")[1] == "in 0.5s"
        assert "in 1.0s" in line_text(table, 1)  # the cached render
        compat.forget_renders(table, {(RowKey("a"), list(table.columns)[1])}, {RowKey("a")})
        assert "in 0.5s" in line_text(table, 1)
        assert "in 2.0s" in line_text(table, 2)
        assert not compat.set_cells_in_place(table, [(RowKey("zz"), column, "x")])


async def test_the_terminal_driver_can_draw_elsewhere_and_size_from_there() -> None:
    """`TerminalDriver` replaces the stream Textual's Linux driver draws on (`_file`) and
    its size query (`_get_terminal_size`); the console's app picks it, and only in
    place of that driver."""
    from textual.drivers.headless_driver import HeadlessDriver
    from textual.drivers.linux_driver import LinuxDriver

    from alarmtop.tui.app import AlarmtopApp
    from tests.tui.fake import FakeOpsClient

    assert compat.drawing_driver(LinuxDriver) is compat.TerminalDriver
    assert compat.drawing_driver(HeadlessDriver) is HeadlessDriver
    app = AlarmtopApp(FakeOpsClient())
    assert app.driver_class is not LinuxDriver
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTSTP, signal.SIGCONT)}
    driver = compat.TerminalDriver(app)
    try:
        assert hasattr(driver._file, "write") and hasattr(driver._file, "flush")
        width, height = driver._get_terminal_size()
        assert width > 0 and height > 0
    finally:
        driver.close()
        for sig, handler in handlers.items():  # the driver takes Ctrl-Z for itself
            signal.signal(sig, handler)
