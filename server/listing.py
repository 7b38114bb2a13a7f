"""Sorting, filtering and paging of listings the server holds as rows: pure, no I/O.

The ops queries (`server/ops.py`) page by key in the orders an index serves
(`KEYED`): alarms most urgent first or by object, executions most in need of a
person first, objects by name, the audit log by time; either way round, with the
state, status and text filters. Any depth costs what the first page does.

A listing sorted by another column (an alarm's due time or error, an object's
sockets), or the audit log filtered by text or target, is built here from every
matching row: that is a full sort, so it is bounded (`MAX_SCAN`) and refused
beyond with a message that says what to do.

Sort keys name real values, never the text the console draws: due times and
ages in ms, retry counts as numbers. A missing value (no due time) sorts last in
either direction, as an operator expects of `-`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

Row = dict[str, Any]
Key = Callable[[Row], Any]
T = TypeVar("T")

MAX_SCAN = 20_000

ALARM_RANK = {"dead": 0, "retrying": 1, "running": 2}


def alarm_urgency(row: Row) -> tuple[Any, ...]:
    """The alarm index's own order (`ORDER BY` of `SqliteDatabase.page`): dead,
    retrying, running, then pending; more retries first; then soonest attempt."""
    nxt = row.get("next_attempt_ms")
    return (ALARM_RANK.get(str(row.get("state")), 3), -int(row.get("retry_count") or 0),
            -(2**62) if nxt is None else int(nxt), row.get("object_class", ""),
            row.get("object_name", ""))


EXECUTION_RANK = {"needs_human": 0, "failed": 1, "running": 2, "suspended": 3}


def execution_urgency(row: Row) -> tuple[Any, ...]:
    """The executions store's order: needs a human, failed, running, suspended, then
    the rest; the most recently updated first within each."""
    return (EXECUTION_RANK.get(str(row.get("status")), 4), -int(row.get("updated_ms") or 0))


def _due(row: Row) -> Any:
    # "due in" is the next attempt of an alarm waiting for its first one; a dead or
    # retrying alarm has no due time of its own (its next attempt is another column).
    if row.get("state") in ("dead", "retrying") or row.get("near_exhaustion"):
        return None
    return row.get("next_attempt_ms")


def _next_try(row: Row) -> Any:
    retrying = row.get("state") == "retrying" or row.get("near_exhaustion")
    return row.get("next_attempt_ms") if retrying else None


SORTS: dict[str, dict[str, Key]] = {
    "alarms": {"state": alarm_urgency, "object": lambda r: r.get("object"),
               "due": _due, "retry": lambda r: r.get("retry_count"), "next": _next_try,
               "error": lambda r: r.get("last_error")},
    "executions": {"status": execution_urgency,
                   "execution": lambda r: f"{r.get('name')}/{r.get('execution_id')}",
                   "waiting": lambda r: r.get("blocked_on"),
                   "updated": lambda r: r.get("updated_ms")},
    "objects": {"object": lambda r: r.get("object"),
                "where": lambda r: not r.get("resident"),
                "sockets": lambda r: r.get("sockets"),
                "alarm": lambda r: r.get("alarm_ms"),
                "state": lambda r: r.get("alarm_state")},
    "audit": {"when": lambda r: r.get("seq"), "who": lambda r: r.get("actor"),
              "role": lambda r: r.get("role"), "action": lambda r: r.get("action"),
              "target": lambda r: r.get("target"), "ok": lambda r: r.get("ok"),
              "reason": lambda r: r.get("reason"), "node": lambda r: r.get("node")},
    "faults": {"id": lambda r: _fault_number(r.get("id")), "target": lambda r: r.get("target"),
               "kind": lambda r: r.get("kind"), "remaining": lambda r: r.get("remaining"),
               "triggered": lambda r: r.get("triggered"),
               "created": lambda r: r.get("created_ms")},
    # the fleet's nodes (server/fleet_view.py): down ones first, then by id
    "nodes": {"state": lambda r: (bool(r.get("up")), r.get("node_id")),
              "node": lambda r: r.get("node_id"), "address": lambda r: r.get("address"),
              "shards": lambda r: r.get("shards"), "renewed": lambda r: r.get("renewed_ms")},
}
# The order each listing has when no sort is asked for (what storage pages by).
DEFAULT_SORT = {"alarms": "state", "executions": "status", "objects": "object",
                "audit": "when", "faults": "id", "nodes": "state"}
# Sorts an index serves: listing -> sort -> the storage order (a `keys.SHAPES` name).
KEYED = {"alarms": {"state": "urgency", "object": "object"},
         "executions": {"status": "urgency"}, "objects": {"object": "object"},
         "audit": {"when": "seq"}}
DEFAULT_DESC = {"audit": True}  # the newest audit row first


def _fault_number(fid: Any) -> Any:
    """Fault ids are f1, f2, ...: f10 after f9, not after f1."""
    text = str(fid or "")
    return int(text[1:]) if text[1:].isdigit() else text


class ListingError(ValueError):
    """A listing that cannot be given as asked; the message says what to ask instead."""


def check_sort(listing: str, sort: str | None) -> str:
    """The sort key to use for `listing` (its default for None), or `ListingError`."""
    keys = SORTS[listing]
    if sort is None:
        return DEFAULT_SORT[listing]
    if sort not in keys:
        raise ListingError(f"{listing}: sort is one of {', '.join(keys)}, not {sort!r}")
    return sort


def is_default(listing: str, sort: str | None, desc: bool | None) -> bool:
    """Whether (`sort`, `desc`) is the order storage pages `listing` in already."""
    return (sort is None or sort == DEFAULT_SORT[listing]) and bool(desc) == DEFAULT_DESC.get(
        listing, False)


def check_scan(listing: str, total: int, why: str) -> None:
    """Refuse a full sort or scan of more than `MAX_SCAN` rows, saying what to do."""
    if total > MAX_SCAN:
        raise ListingError(
            f"{listing}: {why} goes through every one of {total:,} rows, and the server "
            f"does that for at most {MAX_SCAN:,}; narrow it with a filter (or a state) first")


def sort_rows(listing: str, rows: Sequence[Row], sort: str, desc: bool) -> list[Row]:
    """`rows` by the real value of `sort`; rows without a value last either way; ties
    keep the order storage gave them (a stable sort)."""
    key = SORTS[listing][sort]
    present = [r for r in rows if key(r) is not None]
    missing = [r for r in rows if key(r) is None]
    return sorted(present, key=key, reverse=desc) + missing


def contains(text: str | None, *fields: Any) -> bool:
    """Whether any of `fields` contains `text` (no text: all do). Case matters, as it
    does in the alarm index's filter: one filter means the same in every view."""
    if not text:
        return True
    return any(text in str(f) for f in fields if f is not None)


def window(rows: Sequence[T], offset: int, limit: int) -> list[T]:
    return list(rows[offset:offset + limit])


def keyed_order(listing: str, sort: str) -> str | None:
    """The storage order that serves `sort` of `listing` by key, or None (bounded)."""
    return KEYED.get(listing, {}).get(sort)


class CountCache:
    """Totals that cost a walk of the rows (a text filter over many alarms): kept for
    `max_age_s` while rows change, and for as long as nothing changed at all.

    A total is exact when nothing was committed since it was counted (`version`, the
    storage counters' snapshot, is the same object); otherwise it is reused while
    younger than `max_age_s`, so a console refreshing a filtered page twice a second
    over a million alarms walks them at most that often. Small listings are counted
    every time (`cheap`): their walk costs less than being a second out of date.
    """

    def __init__(self, max_age_s: float = 2.0, cheap: int = MAX_SCAN, size: int = 64) -> None:
        self.max_age_s, self.cheap, self.size = max_age_s, cheap, size
        self._seen: dict[tuple[Any, ...], tuple[object, float, int]] = {}

    def get(self, key: tuple[Any, ...], version: object, rows: int, now: float) -> int | None:
        if rows <= self.cheap:
            return None
        hit = self._seen.get(key)
        if hit is None:
            return None
        seen_version, at, total = hit
        if seen_version is version or now - at <= self.max_age_s:
            return total
        return None

    def put(self, key: tuple[Any, ...], version: object, now: float, total: int) -> None:
        if len(self._seen) >= self.size:
            self._seen.pop(next(iter(self._seen)))
        self._seen[key] = (version, now, total)


Key2 = tuple[str, str]


def resident_in_page(page: Sequence[Key2], residents: Sequence[Key2], after: Key2 | None,
                     limit: int, desc: bool) -> list[Key2]:
    """Resident objects storage does not list (woken, nothing kept yet) that belong to
    a page of `limit` listed keys after `after`: those between `after` and the page's
    last key (or past it, when the page is the last), not in the page.

    Storage lists what it keeps; an object in memory with nothing stored (an RPC that
    wrote nothing, sockets open) is shown too, merged in by key."""
    listed = set(page)
    last = page[-1] if len(page) >= limit and page else None

    def inside(key: Key2) -> bool:
        if after is not None and (key <= after if not desc else key >= after):
            return False
        return last is None or (key <= last if not desc else key >= last)

    return [k for k in residents if k not in listed and inside(k)]
