"""A DataTable that views refill from plain rows on every redraw, cheaply."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from textual.cache import LRUCache
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey

Row = tuple[str, Sequence[Any]]  # (key, cells), cells as plain values
Styler = Callable[[Any], Any]  # a plain cell value to what the table draws
Changes = dict[str, list[tuple[int, Any]]]  # row key: (column index, new plain value)
K = TypeVar("K", bound=Hashable)


class ConsoleTable(DataTable[Any]):
    """Rows are (key, cells) with plain, comparable cells; `stylers` turn a column's
    plain value into what is drawn (a coloured label, say).

    `show()` compares each row with what the table shows and updates only the cells
    that differ: one tuple equality for an unchanged row, and a styled cell built
    only when it changes.
    """

    def __init__(self, *, id: str, stylers: Mapping[int, Styler] | None = None) -> None:
        super().__init__(id=id, cursor_type="row")
        self._stylers = dict(stylers or {})
        self._shown: dict[str, tuple[Any, ...]] = {}

    def show(self, rows: Iterable[Row]) -> None:
        """Show `rows` in order, touching only the cells that changed."""
        fresh = [(key, tuple(cells)) for key, cells in rows]
        if self.row_count != len(self._shown) or [k for k, _ in fresh] != list(self._shown):
            self._replace(fresh)
            return
        changes: Changes = {}
        for key, cells in fresh:
            before = self._shown[key]
            if cells != before:
                changes[key] = [(i, new) for i, (old, new) in
                                enumerate(zip(before, cells, strict=False)) if old != new]
                self._shown[key] = cells
        if changes and not self._update_in_place(changes):
            columns = list(self.columns)
            for key, updates in changes.items():
                for i, value in updates:
                    self.update_cell(key, columns[i], self._styled(i, value))

    def _update_in_place(self, changes: Changes) -> bool:
        """Change the cells and forget the renders of those cells and rows only.

        `update_cell` bumps a counter that every render cache of the DataTable is keyed
        by: one changed cell re-renders every visible cell, 25-55 ms for the 42 lines of
        the alarms page on a loaded 2-core machine, on each redraw (its countdowns move);
        this takes about half. It reaches into Textual's DataTable (8.x; test_table.py
        checks what it draws): False when that does not look as expected, and the
        caller falls back on `update_cell`.
        """
        try:
            data, locations = self._data, self._row_locations
        except AttributeError:
            return False
        columns = list(self.columns)
        cells: set[tuple[RowKey, ColumnKey]] = set()
        for key, updates in changes.items():
            row = RowKey(key)
            for i, value in updates:
                data[row][columns[i]] = self._styled(i, value)
                cells.add((row, columns[i]))
        rows = {RowKey(key) for key in changes}
        indexes = {locations.get(row) for row in rows}
        if not self._forget(cells, rows, indexes):
            self._update_count += 1  # the caches are keyed by it: drop them all
            self.refresh()
            return True
        for index in indexes:
            if index is not None:
                self.refresh_row(index)
        return True

    def _forget(self, cells: set[tuple[RowKey, ColumnKey]], rows: set[RowKey],
                indexes: set[int | None]) -> bool:
        """Drop the cached renders of `cells` and of the lines of `rows`."""
        try:
            cell_cache, row_cache = self._cell_render_cache, self._row_render_cache
            renderables, lines = self._row_renderable_cache, self._line_cache
        except AttributeError:
            return False
        # Keys: cells (row, column, ...), rows (row, ...), renderables (count, index),
        # lines (y, ...).
        _discard(cell_cache, lambda k: (k[0], k[1]) in cells)
        _discard(row_cache, lambda k: k[0] in rows)
        _discard(renderables, lambda k: k[1] in indexes)
        _discard(lines, lambda k: self._row_at(k[0]) in rows)
        return True

    def _row_at(self, y: int) -> RowKey | None:
        try:
            return self._get_offsets(y)[0]
        except (LookupError, IndexError):
            return None

    def _replace(self, rows: list[tuple[str, tuple[Any, ...]]]) -> None:
        """Other rows or another order: refill, the cursor staying on its line."""
        cursor = self.cursor_row
        self.clear()
        self._shown = {}
        for key, cells in rows:
            self.add_row(*(self._styled(i, c) for i, c in enumerate(cells)), key=key)
            self._shown[key] = cells
        if rows:
            self.move_cursor(row=min(cursor, len(rows) - 1))

    def _styled(self, column: int, value: Any) -> Any:
        styler = self._stylers.get(column)
        return value if styler is None else styler(value)


def _discard(cache: LRUCache[K, Any], doomed: Callable[[K], bool]) -> None:
    for key in [k for k in cache.keys() if doomed(k)]:
        cache.discard(key)
