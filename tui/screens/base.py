"""What every console view shares: the status bar, the footer, table filling."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.app import ComposeResult
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import DataTable, Footer
from textual.worker import Worker

from alarmtop.tui.formatting import EXEC_STYLE, STATE_STYLE
from alarmtop.tui.state import ConsoleState
from alarmtop.tui.widgets.status_bar import StatusBar

if TYPE_CHECKING:
    from alarmtop.tui.app import AlarmtopApp

Row = tuple[str, Sequence[Any]]


def styled_state(label: str) -> Text:
    style = STATE_STYLE.get(label) or EXEC_STYLE.get(label.lower(), "")
    return Text(f" {label} ", style=style)


def fill_table(table: DataTable[Any], rows: Iterable[Row]) -> None:
    """Show `rows` (key, cells) in order, touching only the cells that changed."""
    rows = list(rows)
    keys = [k for k, _ in rows]
    current = [str(k.value) for k in table.rows]
    if current != keys:
        cursor = table.cursor_row
        table.clear()
        for key, cells in rows:
            table.add_row(*cells, key=key)
        if rows:
            table.move_cursor(row=min(cursor, len(rows) - 1))
        return
    columns = list(table.columns)
    for key, cells in rows:
        old = table.get_row(key)
        for col, (before, after) in zip(columns, zip(old, cells, strict=False), strict=False):
            if str(before) != str(after):
                table.update_cell(key, col, after)


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


class ConsoleScreen(Screen[None]):
    """A view: status bar on top, footer with its keys below."""

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

    def refresh_from(self, state: ConsoleState) -> None:
        """Redraw from the console state (called on every frame from the server)."""
        self.query_one(StatusBar).show(state, self.console.target, self.console.read_only)

    async def reload(self) -> None:
        """Fetch what this view pages from the server (views that page override it)."""
