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
from alarmtop.tui.formatting import shorten_name

Row = tuple[str, Sequence[Any]]  # (key, cells), cells as plain values
Styler = Callable[[Any], Any]  # a plain cell value to what the table draws
ColumnSpec = tuple[str, int]  # (label, width)


@dataclass(frozen=True)
class Held:
    """A cell of a row held in sight though the last rows left it out: drawn dim, and
    unequal to the same plain value, so the row is redrawn plain when it comes back."""

    value: Any


class ConsoleTable(DataTable[Any]):
    """Rows are (key, cells) with plain, comparable cells; `stylers` turn a column's
    plain value into what is drawn (a coloured label, say).

    `show()` compares each row with what the table shows and updates only the cells
    that differ: one tuple equality for an unchanged row, and a styled cell built
    only when it changes.

    The cursor follows the identity of its row (its key), always: when rows change
    order or membership it goes to that row wherever it now is. Once the operator
    has chosen the row (moved the cursor, clicked, acted on it: `pin()`), a refresh
    that leaves it out does not lose it: it is held in sight, dimmed, on its line,
    for `hold_s` seconds (`show(now=...)`), since an alarm that fires and re-arms is
    missing from one refresh and back in the next. A chosen row still missing after
    that has left: the cursor takes the row now on its line and follows that one,
    and the table posts `SelectionLeft` once. A row nobody chose (the top one the
    cursor starts on) that leaves is replaced quietly by the row on its line, as in
    `top`: timers fire every second on the timers board. After a page move the
    cursor keeps its line (`keep="line"`); after a new filter or sort
    (`keep="query"`) it stays on its row if the answer has it, else goes to the
    first row (`SelectionLeft` then says a chosen row was filtered out).
    """

    @dataclass
    class SelectionLeft(Message):
        """The row under the cursor left the table; the cursor is now on `now` (None:
        the table is empty). `filtered`: a new filter or sort left it out."""

        table: ConsoleTable
        left: str
        now: str | None
        filtered: bool = False

    # Home and End go to the first and last row: a DataTable scrolls sideways with them.
    BINDINGS = [Binding("home", "first_row", "First row", show=False),
                Binding("end", "last_row", "Last row", show=False)]
    HOLD_S = 3.0

    def __init__(self, *, id: str, stylers: Mapping[int, Styler] | None = None,
                 hold_s: float | None = None, names: Iterable[int] = ()) -> None:
        super().__init__(id=id, cursor_type="row")
        self._stylers = dict(stylers or {})
        self.names = frozenset(names)  # columns of names: cut by `shorten_name`
        self._shown: dict[str, tuple[Any, ...]] = {}
        self._columns_shown: tuple[ColumnSpec, ...] = ()
        self.hold_s = self.HOLD_S if hold_s is None else hold_s
        self.pinned = False  # the operator chose the row under the cursor
        self._missing: tuple[str, float] | None = None  # (key, since) of a held row
        self._refill_keep: str | None = None  # see set_columns

    def pin(self) -> None:
        """The row under the cursor is the operator's choice: hold it while it is missing,
        say when it leaves."""
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
    def held(self) -> str | None:
        """The key of the row shown under the cursor though the last rows left it out."""
        return None if self._missing is None else self._missing[0]

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

    def show(self, rows: Iterable[Row], *, keep: str = "row", now: float | None = None,
             announce: bool = True) -> None:
        """Show `rows` in order, touching only the cells that changed. `keep`: "row",
        the cursor stays on its row (held in sight while missing, when `now` says
        since when); "line", on its line (a page move); "query", on its row if it is
        there, else on the first row (a new filter or sort). `announce`: post
        `SelectionLeft` when the cursor's row is gone."""
        fresh = [(key, tuple(cells)) for key, cells in rows]
        chosen = (self._refill_keep or self.selected) if keep != "line" else None
        self._refill_keep = None
        if keep == "row":
            fresh = self._hold(fresh, chosen, now)
        else:
            self._missing = None
        if self.row_count != len(self._shown) or [k for k, _ in fresh] != list(self._shown):
            left = self._replace(fresh, chosen, top=keep == "query")
            if left is not None and self.pinned:
                self.pinned = False  # the row now under the cursor was nobody's choice
                if announce:
                    self.post_message(self.SelectionLeft(self, left, self.selected,
                                                         filtered=keep == "query"))
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

    def _hold(self, fresh: list[tuple[str, tuple[Any, ...]]], chosen: str | None,
              now: float | None) -> list[tuple[str, tuple[Any, ...]]]:
        """`fresh`, with the cursor's row put back on its line while it has been missing
        for less than `hold_s` (it is gone for good after that)."""
        if (chosen is None or now is None or not self.pinned or chosen not in self._shown
                or any(key == chosen for key, _ in fresh)):
            self._missing = None
            return fresh
        if self._missing is None or self._missing[0] != chosen:
            self._missing = (chosen, now)
        if now - self._missing[1] >= self.hold_s:
            self._missing = None
            return fresh
        line = min(self.cursor_row, len(fresh))
        cells = tuple(c if isinstance(c, Held) else Held(c) for c in self._shown[chosen])
        return [*fresh[:line], (chosen, cells), *fresh[line:]]

    def _update(self, changes: list[tuple[str, int, Any]]) -> None:
        columns = list(self.columns)
        styled = [(RowKey(key), columns[i], self._styled(i, value)) for key, i, value in changes]
        if not set_cells_in_place(self, styled):
            for row, column, value in styled:
                self.update_cell(row, column, value)
            return
        forget_renders(self, {(row, column) for row, column, _ in styled},
                       {row for row, _, _ in styled})

    def _replace(self, rows: list[tuple[str, tuple[Any, ...]]], keep: str | None,
                 top: bool = False) -> str | None:
        """Other rows or another order: refill. The cursor goes to the row `keep` where
        it now is, else stays on its line (`top`: goes to the first row); returns
        `keep` when that row is gone."""
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
            self.move_cursor(row=0 if top else min(line, len(rows) - 1))
        return keep

    def _styled(self, column: int, value: Any) -> Any:
        """What the table draws for a plain value: styled, and a text too long for its
        column cut with an ellipsis (a DataTable crops it without one, and a name cut
        silently reads as another name), a name by the end that tells it apart. A plain
        string becomes a `Text`: DataTable parses strings as markup, which costs most of
        a cell's render and turns an error message such as "expected '[/]'" into markup
        (or a markup error)."""
        if isinstance(value, Held):
            drawn = self._styled(column, value.value)
            drawn = drawn.copy() if isinstance(drawn, Text) else Text(str(drawn), end="")
            drawn.stylize("dim")
            return drawn
        if isinstance(value, str) and column < len(self._columns_shown):
            width = self._columns_shown[column][1]
            if len(value) > width > 1:
                value = (shorten_name(value, width) if column in self.names
                         else value[:width - 1] + "…")
        styler = self._stylers.get(column)
        if styler is not None:
            return styler(value)
        return Text(value, end="") if isinstance(value, str) else value


def arrow_label(label: str, arrow: bool | None) -> str:
    """A column label with the sort arrow: ▲ ascending, ▼ descending, none unsorted."""
    if arrow is None:
        return label
    return f"{label} {'▼' if arrow else '▲'}"
