"""Every reach into Textual's internals, in one place (Textual 8.x).

The console uses a few private parts of Textual where its public API has no way
to do what the console needs fast enough. Each is wrapped here, says why it is
needed and what it falls back on when Textual no longer looks as expected, and
has its own test in `tests/tui/test_compat.py`: a Textual upgrade that moves one
of them fails that test and this file, nothing else.

1. `compose_ahead`: start a mode's screen before it is first shown (`App._register`,
   `App._screen_stacks`); a view composed on its first visit cost 40-110 ms of
   the key that asked for it.
2. `restyle_pending` / `adopt_styles`: a screen styled before the last theme
   change is restyled when shown (`_css_update_count`): 30-70 ms per first visit.
3. `set_cells_in_place` / `forget_renders`: change DataTable cells without dropping
   every render cache of the table (`update_cell` bumps `_update_count`, which
   keys all of them): a changed countdown re-rendered all 42 visible lines.
4. `drawing_driver`: Textual's Linux driver draws on stderr (`LinuxDriver._file`) and
   asks stdout for the terminal's size (`_get_terminal_size`), so `alarmtop --demo
   2>err.log` showed a blank terminal and wrote megabytes of escape codes into the
   file. `TerminalDriver` draws on the terminal instead; stderr keeps the logs.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Hashable, Iterable
from typing import Any, TextIO, TypeVar

from textual.app import App
from textual.cache import LRUCache
from textual.screen import Screen
from textual.widget import AwaitMount
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey

K = TypeVar("K", bound=Hashable)

# -- 1. screens composed before their first visit ---------------------------------------


def mode_started(app: App[Any], mode: str) -> bool:
    """Whether `mode` has a screen already (shown before, or composed ahead)."""
    stacks = getattr(app, "_screen_stacks", None)
    return isinstance(stacks, dict) and mode in stacks


def compose_ahead(app: App[Any], mode: str, screen: Screen[Any]) -> AwaitMount | None:
    """Mount `screen` as the screen of `mode` without showing it; `switch_mode(mode)`
    then shows this one. None (nothing done) when Textual's internals are not as
    expected: the view is composed on its first visit instead."""
    stacks = getattr(app, "_screen_stacks", None)
    register = getattr(app, "_register", None)
    if not isinstance(stacks, dict) or not callable(register) or mode in stacks:
        return None
    stacks[mode] = [screen]  # first: a key for this view now finds this screen
    return AwaitMount(screen, register(app, screen))


# -- 2. styles ----------------------------------------------------------------------------


def restyle_pending(app: App[Any]) -> bool:
    """Whether the screen shown was styled before the app's last restyle (Textual then
    restyles everything again when it is shown again)."""
    try:
        return bool(app.screen._css_update_count != app._css_update_count)
    except AttributeError:
        return False


def adopt_styles(screen: Screen[Any], app: App[Any]) -> None:
    """Count `screen` as styled with the app's current stylesheet: it is styled as it
    mounts anyway, and otherwise Textual restyles the whole app when it is shown."""
    count = getattr(app, "_css_update_count", None)
    if isinstance(count, int) and hasattr(screen, "_css_update_count"):
        screen._css_update_count = count


# -- 3. DataTable cells in place -----------------------------------------------------------


def set_cells_in_place(table: DataTable[Any],
                       cells: Iterable[tuple[RowKey, ColumnKey, Any]]) -> bool:
    """Write cell values straight into the table's data; False (nothing written) when the
    table does not hold its data as expected: the caller uses `update_cell`."""
    data = getattr(table, "_data", None)
    if not isinstance(data, dict):
        return False
    todo = list(cells)
    if any(row not in data for row, _, _ in todo):
        return False
    for row, column, value in todo:
        data[row][column] = value
    return True


def forget_renders(table: DataTable[Any], cells: set[tuple[RowKey, ColumnKey]],
                   rows: set[RowKey]) -> None:
    """Drop the cached renders of `cells` and of the lines of `rows`, so that they are
    drawn again and nothing else is; when the caches are not as expected, drop them
    all (what `update_cell` does)."""
    try:
        cell_cache, row_cache = table._cell_render_cache, table._row_render_cache
        renderables, lines = table._row_renderable_cache, table._line_cache
        locations = table._row_locations
    except AttributeError:
        _drop_all(table)
        return
    indexes = {locations.get(row) for row in rows}
    # Keys: cells (row, column, ...), rows (row, ...), renderables (count, index),
    # lines (y, ...).
    _discard(cell_cache, lambda k: (k[0], k[1]) in cells)
    _discard(row_cache, lambda k: k[0] in rows)
    _discard(renderables, lambda k: k[1] in indexes)
    _discard(lines, lambda k: _row_at(table, k[0]) in rows)
    for index in indexes:
        if index is not None:
            table.refresh_row(index)


def _drop_all(table: DataTable[Any]) -> None:
    if isinstance(getattr(table, "_update_count", None), int):
        table._update_count += 1  # the caches are keyed by it
    table.refresh()


def _row_at(table: DataTable[Any], y: int) -> RowKey | None:
    try:
        return table._get_offsets(y)[0]
    except (LookupError, IndexError, AttributeError):
        return None


def _discard(cache: LRUCache[K, Any], doomed: Callable[[K], bool]) -> None:
    for key in [k for k in cache.keys() if doomed(k)]:
        cache.discard(key)


# -- 4. drawing on the terminal, not on a redirected stderr ------------------------------

try:  # Textual's driver for Linux and macOS terminals (termios)
    from textual.drivers.linux_driver import LinuxDriver
except ImportError:  # pragma: no cover - Windows: its driver draws on stdout
    LinuxDriver = None  # type: ignore[assignment,misc]


def terminal_output() -> tuple[TextIO | None, bool]:
    """The stream the console should draw on instead of stderr, and whether it was
    opened here (to close after): stdout when stderr is not the terminal and stdout
    is, else the process's terminal (`/dev/tty`); (None, False) when stderr will do
    (it is the terminal, or there is no terminal at all)."""
    for stream in (sys.__stderr__, sys.__stdout__):
        if stream is not None and _is_terminal(stream):
            return (None, False) if stream is sys.__stderr__ else (stream, False)
    try:
        return open("/dev/tty", "w", encoding="utf-8"), True
    except OSError:
        return None, False


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (ValueError, OSError):  # closed
        return False


if LinuxDriver is not None:

    class TerminalDriver(LinuxDriver):
        """`LinuxDriver`, drawing on the terminal rather than on a redirected stderr."""

        def __init__(self, app: Any, **options: Any) -> None:
            super().__init__(app, **options)
            self._terminal, self._opened = terminal_output()
            if self._terminal is not None:
                self._file = self._terminal  # type: ignore[assignment]

        def _get_terminal_size(self) -> tuple[int, int]:
            # Textual asks stdout for the size: not the terminal when it is redirected.
            if self._terminal is not None:
                with contextlib.suppress(ValueError, OSError):
                    size = os.get_terminal_size(self._terminal.fileno())
                    return size.columns, size.lines
            return super()._get_terminal_size()

        def close(self) -> None:
            super().close()  # its writer thread is done with the stream
            if self._opened and self._terminal is not None:
                with contextlib.suppress(OSError):
                    self._terminal.close()


def drawing_driver(driver: type[Any]) -> type[Any]:
    """The driver the console runs with: `TerminalDriver` in place of Textual's plain
    terminal driver; any other (the browser's under `alarmtop web`, the tests'
    headless one) as it is."""
    if LinuxDriver is not None and driver is LinuxDriver:
        return TerminalDriver
    return driver
