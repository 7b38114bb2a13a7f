"""What each list view shows: its columns, how a row becomes cells, how it sorts. Pure.

A column that sorts names the server's sort key (`server/listing.py`): the real
value (a due time, a retry count), never the text drawn. One column per listing
is flexible (`width == 0`): it takes the width the others leave, so a long last
error is cut at the edge of the terminal, not at a fixed 48 characters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from alarmtop.tui.formatting import (
    alarm_cells,
    audit_cells,
    execution_cells,
    fault_cells,
    object_cells,
)
from alarmtop.tui.paging import ListQuery

Row = dict[str, Any]
CELL_PAD = 2  # DataTable pads every cell by one column on each side
SCROLLBAR = 2
MIN_FLEX = 10


@dataclass(frozen=True)
class Column:
    label: str
    width: int  # 0: the flexible column
    sort: str | None = None  # the server's sort key for this column
    # How narrow it may get on a small terminal (0: not narrower); for the flexible
    # column, how wide it should stay while others can give way.
    min: int = 0
    name: bool = False  # it holds names: cut keeping the part that tells them apart


@dataclass(frozen=True)
class Listing:
    """One server listing as a view shows it."""

    name: str  # the server's listing: alarms, executions, objects, audit, faults
    noun: str  # what a row is, for the status line: "alarm", "execution"
    columns: tuple[Column, ...]
    key: Callable[[Row], str]
    cells: Callable[[Row, int, int], tuple[Any, ...]]  # row, now_ms, flexible width
    default_sort: str  # the column key of the listing's own order
    default_desc: bool = False

    def names(self) -> list[int]:
        """The columns that hold names."""
        return [i for i, c in enumerate(self.columns) if c.name]

    def sort_keys(self) -> list[str]:
        return [c.sort for c in self.columns if c.sort is not None]

    def next_sort(self, query: ListQuery) -> ListQuery:
        """`s`: the next column to sort by (ascending), back to the listing's own order
        after the last."""
        keys = self.sort_keys()
        current = query.sort or self.default_sort
        nxt = keys[(keys.index(current) + 1) % len(keys)] if current in keys else keys[0]
        return query.with_sort(None if nxt == self.default_sort else nxt)

    def reversed(self, query: ListQuery) -> ListQuery:
        """`S`: the same column the other way round (the listing's own order again when
        that is where it lands)."""
        sort = query.sort or self.default_sort
        desc = (not query.desc) if query.sort is not None else (not self.default_desc)
        if (sort, desc) == (self.default_sort, self.default_desc):
            return query.with_sort(None)
        return query.with_sort(sort, desc)

    def arrow(self, query: ListQuery) -> tuple[int, bool] | None:
        """(column index, descending) to mark in the header: the column sorted by (the
        listing's own order is a column too: state, most urgent first)."""
        sort = query.sort or self.default_sort
        desc = query.desc if query.sort is not None else self.default_desc
        for i, c in enumerate(self.columns):
            if c.sort == sort:
                return i, desc
        return None

    def label_of(self, sort: str | None) -> str:
        return next((c.label for c in self.columns if c.sort == sort), str(sort))


def fit_widths(columns: tuple[Column, ...], available: int) -> tuple[int, ...]:
    """Each column's width in a table `available` cells wide: fixed ones as declared,
    the flexible one what is left. When that is under `MIN_FLEX` (an 80-column
    terminal), the fixed columns give up what they can (down to their `min`), the
    one with the most to give first, before the table has to scroll sideways."""
    widths = [c.width for c in columns]
    wanted = next((c.min for c in columns if not c.width and c.min), MIN_FLEX)
    room = available - sum(w + CELL_PAD for w in widths if w) - CELL_PAD - SCROLLBAR
    deficit = wanted - room
    while deficit > 0:
        slack = [(w - (c.min or w), i) for i, (c, w) in enumerate(zip(columns, widths)) if w]
        most, i = max(slack, default=(0, -1))
        if most <= 0:
            break
        widths[i] -= 1
        deficit -= 1
        room += 1
    flex = max(MIN_FLEX, room)
    return tuple(w or flex for w in widths)


def flex_width(columns: tuple[Column, ...], widths: tuple[int, ...]) -> int:
    return next((w for c, w in zip(columns, widths) if not c.width), MIN_FLEX)


def badge(query: ListQuery, listing: Listing) -> str:
    """What a view's title and footer say while a filter or a sort is on."""
    parts = []
    if query.filter:
        parts.append(f"filter “{query.filter}”")
    if query.sort is not None:
        parts.append(f"sort {listing.label_of(query.sort)} {'▼' if query.desc else '▲'}")
    return "  ".join(parts)


ALARMS = Listing(
    "alarms", "alarm",
    (Column("state", 11, "state"), Column("object", 34, "object", 20, name=True),
     Column("due in", 10, "due", 9), Column("retry", 6, "retry", 5),
     Column("next try", 10, "next", 9), Column("last error", 0, "error", 14)),
    key=lambda r: str(r["object"]),
    cells=lambda r, now, w: alarm_cells(r, now, w), default_sort="state")
EXECUTIONS = Listing(
    "executions", "execution",
    (Column("status", 14, "status"), Column("execution", 34, "execution", 24, name=True),
     Column("waiting on / saga", 0, "waiting", 30), Column("updated", 10, "updated", 9)),
    key=lambda r: str(r["execution_id"]),
    cells=lambda r, now, w: execution_cells(r, now, w), default_sort="status")
OBJECTS = Listing(
    "objects", "object",
    (Column("object", 0, "object", 24, name=True), Column("where", 11, "where", 10),
     Column("storage", 7), Column("sockets", 7, "sockets"), Column("alarm", 12, "alarm", 9),
     Column("alarm state", 11, "state")),
    key=lambda r: str(r["object"]),
    cells=lambda r, now, w: object_cells(r, now, w), default_sort="object")
AUDIT = Listing(
    "audit", "audit row",
    # The minimums let the reason column (a snooze's "by 1d0h") show at 80 columns.
    (Column("when", 8, "when"), Column("node", 12, "node", 3), Column("who", 21, "who", 5),
     Column("role", 8, "role", 4),
     Column("action", 18, "action", 11), Column("target", 30, "target", 12, name=True),
     Column("ok", 7, "ok"), Column("reason", 0, "reason")),
    key=lambda r: str(r["seq"]),
    cells=lambda r, now, w: audit_cells(r, w), default_sort="when", default_desc=True)
FAULTS = Listing(
    "faults", "fault",
    (Column("id", 5, "id"), Column("target", 34, "target", 16, name=True),
     Column("kind", 17, "kind", 12), Column("remaining", 9, "remaining"),
     Column("triggered", 9, "triggered"), Column("step/point/secs", 0)),
    key=lambda r: str(r["id"]),
    cells=lambda r, now, w: fault_cells(r, w), default_sort="id")
