"""A DataTable that views refill from plain rows on every redraw, cheaply, and whose
cursor follows a row's identity, not its line."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable
from textual.widgets.data_table import RowKey

from alarmtop.tui.compat import forget_renders, set_cells_in_place

Row = tuple[str, Sequence[Any]]  # (key, cells), cells as plain values
Styler = Callable[[Any], Any]  # a plain cell value to what the table draws
ColumnSpec = tuple[str, int]  # (label, width)


class ConsoleTable(DataTable[Any]):
    """Rows are (key, cells) with plain, comparable cells; `stylers` turn a column's
    plain value into what is drawn (a coloured label, say).

    `show()` compares each row with what the table shows and updates only the cells
    that differ: one tuple equality for an unchanged row, and a styled cell built
    only when it changes.

    Once the operator has chosen a row (moved the cursor, clicked, or acted on it:
    `pin()`), the cursor stays on that row (its key) when the rows change order or
    membership, wherever the row now is; when the row is gone, the cursor goes to
    the row now on its line, the table posts `SelectionLeft` and keeps to its line
    again until the next choice. Before any choice the cursor keeps its line: the
    top, the most urgent row, as `top` does.
    """

    @dataclass
    class SelectionLeft(Message):
        """The selected row left the table; the cursor is now on `now` (None: empty)."""

        table: ConsoleTable
        left: str
        now: str | None

    # Home and End go to the first and last row: a DataTable scrolls sideways with them.
    BINDINGS = [Binding("home", "first_row", "First row", show=False),
                Binding("end", "last_row", "Last row", show=False)]

    def __init__(self, *, id: str, stylers: Mapping[int, Styler] | None = None) -> None:
        super().__init__(id=id, cursor_type="row")
        self._stylers = dict(stylers or {})
        self._shown: dict[str, tuple[Any, ...]] = {}
        self._columns_shown: tuple[ColumnSpec, ...] = ()
        self.pinned = False  # the operator chose the row under the cursor
        self._refill_keep: str | None = None  # see set_columns

    def pin(self) -> None:
        """The row under the cursor is the operator's choice: follow it."""
        self.pinned = self.row_count > 0

    def action_cursor_up(self) -> None:
        super().action_cursor_up()
        self.pin()

    def action_cursor_down(self) -> None:
        super().action_cursor_down()
        self.pin()

    def action_page_up(self) -> None:
        super().action_page_up()
        self.pin()

    def action_page_down(self) -> None:
        super().action_page_down()
        self.pin()

    def on_click(self, event: events.Click) -> None:
        self.pin()  # after DataTable's own handler moved the cursor to the row clicked

    @property
    def selected(self) -> str | None:
        """The key of the row under the cursor."""
        if self.row_count == 0:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
        except Exception:  # no row under the cursor
            return None
        return None if key.value is None else str(key.value)

    def action_first_row(self) -> None:
        if self.row_count:
            self.move_cursor(row=0)
            self.pin()

    def action_last_row(self) -> None:
        if self.row_count:
            self.move_cursor(row=self.row_count - 1)
            self.pin()

    def set_columns(self, columns: Sequence[ColumnSpec]) -> None:
        """Labels and widths of the columns; the table is rebuilt only when they change
        (a sort arrow moved, the terminal was resized)."""
        spec = tuple(columns)
        if spec == self._columns_shown:
            return
        keep = self.selected
        rows = list(self._shown.items())
        same_shape = len(spec) == len(self._columns_shown)
        self.clear(columns=True)
        for label, width in spec:
            self.add_column(label, width=width)
        self._columns_shown, self._shown = spec, {}
        if rows and same_shape:
            self._replace(rows, keep)
        elif rows:
            # Rows drawn for other columns (a narrow layout has fewer) do not fit these:
            # the caller's next `show` refills, the cursor back on its row.
            self._refill_keep = keep

    def show(self, rows: Iterable[Row], *, follow: bool = True, announce: bool = True) -> None:
        """Show `rows` in order, touching only the cells that changed. `follow`: the
        cursor stays on its row (False: on its line, as after a page move);
        `announce`: post `SelectionLeft` when that row is gone."""
        fresh = [(key, tuple(cells)) for key, cells in rows]
        if self.row_count != len(self._shown) or [k for k, _ in fresh] != list(self._shown):
            keep = (self._refill_keep or self.selected) if follow and self.pinned else None
            self._refill_keep = None
            left = self._replace(fresh, keep)
            if left is not None:
                self.pinned = False
                if announce:
                    self.post_message(self.SelectionLeft(self, left, self.selected))
            return
        changes: list[tuple[str, int, Any]] = []
        for key, cells in fresh:
            before = self._shown[key]
            if cells != before:
                changes += [(key, i, new) for i, (old, new) in
                            enumerate(zip(before, cells, strict=False)) if old != new]
                self._shown[key] = cells
        if changes:
            self._update(changes)

    def _update(self, changes: list[tuple[str, int, Any]]) -> None:
        columns = list(self.columns)
        styled = [(RowKey(key), columns[i], self._styled(i, value)) for key, i, value in changes]
        if not set_cells_in_place(self, styled):
            for row, column, value in styled:
                self.update_cell(row, column, value)
            return
        forget_renders(self, {(row, column) for row, column, _ in styled},
                       {row for row, _, _ in styled})

    def _replace(self, rows: list[tuple[str, tuple[Any, ...]]], keep: str | None) -> str | None:
        """Other rows or another order: refill. The cursor goes to the row `keep` where
        it now is, else stays on its line; returns `keep` when that row is gone."""
        line = self.cursor_row
        self.clear()
        self._shown = {}
        for key, cells in rows:
            self.add_row(*(self._styled(i, c) for i, c in enumerate(cells)), key=key)
            self._shown[key] = cells
        keys = list(self._shown)
        if keep is not None and keep in self._shown:
            self.move_cursor(row=keys.index(keep))
            return None
        if rows:
            self.move_cursor(row=min(line, len(rows) - 1))
        return keep

    def _styled(self, column: int, value: Any) -> Any:
        """What the table draws for a plain value: styled, and a text too long for its
        column cut with an ellipsis (a DataTable crops it without one, and a name cut
        silently reads as another name). A plain string becomes a `Text`: DataTable
        parses strings as markup, which costs most of a cell's render and turns an
        error message such as "expected '[/]'" into markup (or a markup error)."""
        if isinstance(value, str) and column < len(self._columns_shown):
            width = self._columns_shown[column][1]
            if len(value) > width > 1:
                value = value[:width - 1] + "…"
        styler = self._stylers.get(column)
        if styler is not None:
            return styler(value)
        return Text(value, end="") if isinstance(value, str) else value


def arrow_label(label: str, arrow: bool | None) -> str:
    """A column label with the sort arrow: ▲ ascending, ▼ descending, none unsorted."""
    if arrow is None:
        return label
    return f"{label} {'▼' if arrow else '▲'}"
