"""What every console view shares: the status bar, the footer, sorting, selection."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.app import App, ComposeResult, ScreenStackError
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import DataTable, Footer
from textual.worker import Worker

from alarmtop.tui import collector
from alarmtop.tui.formatting import EXEC_STYLE, STATE_STYLE
from alarmtop.tui.state import ConsoleState
from alarmtop.tui.widgets.status_bar import StatusBar
from alarmtop.tui.widgets.table import Row

if TYPE_CHECKING:
    from alarmtop.tui.app import AlarmtopApp


def styled_state(label: str) -> Text:
    style = STATE_STYLE.get(label) or EXEC_STYLE.get(label.lower(), "")
    return Text(f" {label} ", style=style)


class Sorting:
    """A column to sort a table by, chosen by clicking its header (again: reversed)."""

    def __init__(self) -> None:
        self.column: int | None = None
        self.reverse = False

    def choose(self, column: int) -> None:
        self.reverse = self.column == column and not self.reverse
        self.column = column

    def apply(self, rows: Sequence[Row]) -> list[Row]:
        if self.column is None:
            return list(rows)  # the server's order: most urgent first
        col = self.column
        return sorted(rows, key=lambda r: _sort_text(r[1][col]), reverse=self.reverse)


def _sort_text(cell: Any) -> tuple[int, float | str]:
    text = str(cell.plain if isinstance(cell, Text) else cell).strip()
    try:
        return (0, float(text.split("/")[0]))
    except ValueError:
        return (1, text)


def selected_key(table: DataTable[Any]) -> str | None:
    if table.row_count == 0:
        return None
    try:
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
    except Exception:  # no row under the cursor
        return None
    return None if key.value is None else str(key.value)


def _a_screen_is_up(app: App[Any]) -> bool:
    try:
        return app.screen is not None
    except ScreenStackError:
        return False


class ConsoleScreen(Screen[None]):
    """A view: status bar on top, footer with its keys below."""

    def __init__(self) -> None:
        super().__init__()
        self._footer_keys: tuple[tuple[str, bool], ...] | None = None
        if _a_screen_is_up(self.app):
            # Textual restyles the whole app, re-parsing every stylesheet (30-50 ms),
            # when it shows a screen styled before the last theme change; a new screen
            # counts as such, so a view's first visit paid for that twice. Once a first
            # screen is up the stylesheet is complete, and a new view is styled as it
            # mounts. (The first screen does need it: theme variables come that way.)
            self._css_update_count = self.app._css_update_count

    def on_mount(self) -> None:
        # Textual asks the footer to refresh too (on focus changes): what it then shows
        # is not what we last told it.
        self.bindings_updated_signal.subscribe(self, self._footer_refreshed, immediate=True)
        self.call_after_refresh(collector.settle)  # composed: it lives as long as we do

    def _footer_refreshed(self, screen: Screen[Any]) -> None:
        self._footer_keys = None

    def refresh_actions(self) -> None:
        """Refresh the footer when an action was enabled or disabled since it was drawn:
        the footer rebuilds all its keys on every request, so not on every frame or
        cursor move."""
        keys = tuple((key, b.enabled) for key, b in self.active_bindings.items())
        if keys != self._footer_keys:
            self.refresh_bindings()
            self._footer_keys = keys

    @property
    def console(self) -> AlarmtopApp:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield from self.body()
        yield Footer()

    def body(self) -> ComposeResult:
        yield from ()

    def on_screen_resume(self) -> None:
        self.redraw()
        # The method, not a coroutine: a worker cancelled before it starts must not
        # leave a coroutine that was never awaited.
        worker: Worker[None] = self.run_worker(self.reload, exclusive=True, group="reload")
        del worker

    def redraw(self) -> None:
        """Redraw from the console state, unless the view is not (or no longer) composed:
        frames, ticks and answers to queries may land while a view comes or goes."""
        with contextlib.suppress(NoMatches):
            self.refresh_from(self.console.state)
            if _a_screen_is_up(self.app) and self is self.app.screen:
                # What is shown is now current: the pacer then holds the next redraw back
                # (while keys come), instead of drawing at once an answer that lands while
                # a key waits, as it would for a view it thinks was drawn long ago.
                self.console.pacer.drawn(self.console.clock())

    def refresh_from(self, state: ConsoleState) -> None:
        """Redraw from the console state (called on every frame from the server)."""
        self.query_one(StatusBar).show(state, self.console.target, self.console.read_only)

    async def reload(self) -> None:
        """Fetch what this view pages from the server (views that page override it)."""
