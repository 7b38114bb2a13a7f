"""The timers board's rows as an operator reads them, and its keyed paging. Pure.

A row of the server's `timers` query is one pending timer: an object's alarm (or
its retry), or an execution's wait, retry, condition poll, callback or heartbeat
deadline, or execution timeout. Its countdown moves with the console's clock;
one past its due time by more than `OVERDUE_GRACE_MS` is overdue and says so
("due 40s ago, not fired"), unless it is paused (it waits for the resume).

The server pages the board by key (`after` = the `key` of the row before), not
by position: `Cursors` keeps, for each position an answer covered, the key of
the row before it, so a page at a position the console has seen is one query.
"""

from __future__ import annotations

import bisect
from typing import Any

from alarmtop.tui.formatting import duration, first_line

OVERDUE_GRACE_MS = 1500  # a timer a moment past due is firing, not overdue
KIND_LABEL = {"alarm": "alarm", "retry": "retry", "wait": "wait", "poll": "condition poll",
              "callback_timeout": "callback deadline", "heartbeat": "heartbeat deadline",
              "execution_timeout": "execution timeout"}

Row = dict[str, Any]


def timer_key(row: Row) -> str:
    """A timer's identity on the board: its kind, target and operation (its `key`, the
    paging cursor, moves with its due time: a snoozed timer is the same timer)."""
    target = row.get("target") or row.get("execution_id") or row.get("object")
    return f"{row.get('kind')}|{target}|{row.get('op_id') or ''}"


def countdown(due_ms: int | None, now_ms: int, paused: bool = False) -> str:
    """"in 4.2s"; "due now"; "due 40s ago, not fired" (or ", paused")."""
    if due_ms is None:
        return "-"
    late = now_ms - due_ms
    if late < 0:
        return f"in {duration(-late)}"
    if late <= OVERDUE_GRACE_MS:
        return "due now"
    return f"due {duration(late)} ago, " + ("paused" if paused else "not fired")


def short_countdown(due_ms: int | None, now_ms: int, paused: bool = False) -> str:
    """The countdown of a narrow board: "in 4.2s", "due now", "40s late", "paused"."""
    if paused:
        return "paused"
    if due_ms is None:
        return "-"
    late = now_ms - due_ms
    if late < 0:
        return f"in {duration(-late)}"
    return "due now" if late <= OVERDUE_GRACE_MS else f"{duration(late)} late"


def overdue(row: Row, now_ms: int) -> bool:
    due = row.get("due_ms")
    return due is not None and not row.get("paused") and now_ms - int(due) > OVERDUE_GRACE_MS


def countdown_style(text: str) -> str:
    if text.endswith(("not fired", " late")):
        return "bold white on red"
    if text.endswith("paused"):
        return "magenta"
    if text == "due now":
        return "bold yellow"
    return ""


def what(row: Row) -> str:
    """What the timer is for: the operation's name, and its execution's handler."""
    parts = [str(row["name"]) if row.get("name") else ""]
    if row.get("op_id"):
        parts.append(f"(operation {row['op_id']})")
    return " ".join(p for p in parts if p) or "-"


def timer_cells(row: Row, now_ms: int, width: int = 40) -> tuple[str, ...]:
    """due, kind, target, name, state, paused, retry."""
    retry = row.get("retry_count")
    return (countdown(row.get("due_ms"), now_ms, bool(row.get("paused"))),
            KIND_LABEL.get(str(row.get("kind")), str(row.get("kind"))),
            str(row.get("target") or row.get("execution_id") or row.get("object") or "?"),
            first_line(what(row), width), str(row.get("state") or "-").upper(),
            "paused" if row.get("paused") else "-", "-" if retry is None else str(retry))


def narrow_cells(row: Row, now_ms: int, width: int = 12) -> tuple[str, ...]:
    """due, kind, target, name, state, retry: for a terminal under 120 columns, where a
    paused timer says so in its countdown rather than in a column of its own."""
    _, kind, target, name, state, _, retry = timer_cells(row, now_ms, width)
    return (short_countdown(row.get("due_ms"), now_ms, bool(row.get("paused"))), kind,
            target, name, state, retry)


def mark_kind(row: Row) -> str:
    """What a bulk action on the row acts on: an execution's timer marks the execution,
    an object's alarm the alarm."""
    return "executions" if row.get("execution_id") else "alarms"


def mark_key(row: Row) -> str:
    """The key a bulk action takes for the row: the execution id or the object."""
    if row.get("execution_id"):
        return str(row["execution_id"])
    return str(row.get("object") or row.get("target"))


def soonest_first(rows: list[Row]) -> bool:
    """Whether the rows are in the board's order (the server's: soonest due first)."""
    dues = [int(r.get("due_ms") or 0) for r in rows]
    return dues == sorted(dues)


class Cursors:
    """Position -> the `key` of the row before it, learnt from answers (bounded)."""

    def __init__(self, limit: int = 20_000) -> None:
        self.limit = limit
        self._positions: list[int] = []
        self._after: dict[int, Any] = {}

    def learn(self, start: int, rows: list[Row]) -> None:
        for i, row in enumerate(rows, 1):
            pos = start + i
            if pos not in self._after:
                bisect.insort(self._positions, pos)
            self._after[pos] = row.get("key")
        while len(self._positions) > self.limit:  # the farthest from what was just learnt
            far = 0 if abs(self._positions[0] - start) > abs(self._positions[-1] - start) \
                else -1
            del self._after[self._positions.pop(far)]

    def nearest(self, offset: int) -> tuple[int, Any]:
        """(position, the key to start after) of the nearest known position at or
        before `offset`; (0, None) for the board's start."""
        i = bisect.bisect_right(self._positions, offset)
        if i == 0:
            return 0, None
        pos = self._positions[i - 1]
        return pos, self._after[pos]

    def clear(self) -> None:
        self._positions, self._after = [], {}
