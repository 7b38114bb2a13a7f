"""Listings of the runtime database on a read connection of their own, paged by key.

The writer (`sqlite_index`) commits on one database thread; a page query run there
waits for the commits queued before it and holds back every commit queued after
it. In WAL mode a second connection reads a snapshot of the last commit without
taking any lock the writer needs, so listings run here, on a thread of their own:
they never wait for a commit and never delay one.

What runs here sees every write whose future has completed: a writer's future is
completed on the event loop only after its COMMIT returned, and a read transaction
that starts after a commit sees it. It may not see a write still queued, which is
why the scheduler's own reads (`get`, `due_after`, `in_state`, `overdue`) and the
execution engine's (a replay must see its own checkpoints) stay on the writer
thread, ordered with the writes. Everything here is for people: listings, counts
by filter, the objects index, recounts in tests.

Pages are by key (`keys.py`): `WHERE (key...) > (cursor...) ORDER BY key LIMIT n`
on an index of that key, so a page deep in a million rows costs what the first
does. A text filter cannot be served by an index: the rows are walked in key order
from the cursor and each one's `Class/name` looked at, on the index alone (no table
row is read for a row that does not match), until the page is full.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from alarmtop.core.model import keys
from alarmtop.core.model.aws_listing import LIVE, StatusFilter
from alarmtop.core.model.keys import Cursor
from alarmtop.core.model.storage_values import Counts, ObjectEntry

T = TypeVar("T")
Row = tuple[Any, ...]

_ALARM_KEY = {"urgency": ("urgency", "object_class", "object_name"),
              "object": ("object_class", "object_name")}
_ALARM_TEXT = "instr(object_class || '/' || object_name, ?) > 0"
_COUNTER_SQL = "SELECT kind, name, num, n FROM counters"




def read_counters(conn: sqlite3.Connection) -> list[Row]:
    return conn.execute(_COUNTER_SQL).fetchall()


class ReadConnection:
    """A read-only connection to the runtime database, on its own thread."""

    def __init__(self, path: Path, busy_timeout_s: float,
                 error: Callable[[str, BaseException], Exception]) -> None:
        self.path = path
        self.busy_timeout_s = busy_timeout_s
        self._error = error
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None

    def _connect(self) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                               timeout=self.busy_timeout_s)
        conn.execute("PRAGMA query_only = ON")  # a listing bug must not write
        self._conn = conn

    async def open(self) -> None:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1,
                                                thread_name_prefix="runtime-db-read")
        await self.run(lambda _: None, connect=True)

    async def close(self) -> None:
        executor, self._executor = self._executor, None
        if executor is None:
            return
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await asyncio.get_running_loop().run_in_executor(executor, conn.close)
        executor.shutdown(wait=True)

    async def run(self, fn: Callable[[sqlite3.Connection], T], *, connect: bool = False) -> T:
        """`fn(connection)` on the read thread."""
        def call() -> T:
            if connect:
                self._connect()
            if self._conn is None:
                raise sqlite3.OperationalError("the read connection is closed")
            return fn(self._conn)
        if self._executor is None:
            raise self._error("reading", sqlite3.OperationalError("the database is not open"))
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, call)
        except sqlite3.Error as exc:
            raise self._error("reading", exc) from exc


# -- the pieces of a keyed page ----------------------------------------------------------


def _after(key: Sequence[str], cursor: Cursor | None, desc: bool) -> tuple[list[str], list[Any]]:
    if cursor is None:
        return [], []
    marks = ", ".join("?" * len(key))
    return [f"({', '.join(key)}) {'<' if desc else '>'} ({marks})"], list(cursor)


def _order(key: Sequence[str], desc: bool) -> str:
    return ", ".join(f"{k} DESC" if desc else k for k in key)


def _where(terms: Sequence[str]) -> str:
    return "WHERE " + " AND ".join(terms) if terms else ""


def keyed(table: str, columns: str, key: Sequence[str], terms: list[str],
          params: list[Any], *, text: str | None, text_sql: str, pk: Sequence[str],
          after: Cursor | None, desc: bool, limit: int, offset: int) -> tuple[str, list[Any]]:
    """The SQL of a keyed page: `terms` and the cursor bound the index range; a text
    is looked at on the index entries first (a subquery that reads no table row),
    and only the rows of the page are read whole."""
    more, more_params = _after(key, after, desc)
    order = _order(key, desc)
    if not text:
        sql = (f"SELECT {columns} FROM {table} {_where([*terms, *more])} ORDER BY {order} "
               "LIMIT ? OFFSET ?")
        return sql, [*params, *more_params, limit, offset]
    pks = ", ".join(pk)
    inner = (f"SELECT {pks} FROM {table} {_where([*terms, *more, text_sql])} "
             f"ORDER BY {order} LIMIT ? OFFSET ?")
    sql = f"SELECT {columns} FROM {table} WHERE ({pks}) IN ({inner}) ORDER BY {order}"
    return sql, [*params, *more_params, text, limit, offset]


# -- alarms ---------------------------------------------------------------------------------


def alarm_page(conn: sqlite3.Connection, columns: str, after: Cursor | None, limit: int, *,
               offset: int, state: str | None, contains: str | None, order: str,
               desc: bool) -> list[Row]:
    key = _ALARM_KEY[order]
    terms: list[str] = []
    params: list[Any] = []
    if state in keys.ALARM_RANK and order == "urgency":
        # A state is one rank: a range of the urgency index, not a filter of its rows
        # (which would read each row from the table where the index alone answers).
        bounds = rank_bounds(keys.alarm_rank_range(state), after, desc)
        if bounds is None:
            return []
        after, more_terms, more_params = bounds
        terms += more_terms
        params += more_params
    elif state:
        terms.append("state = ?")  # the state index is (state, class, name): it serves this
        params.append(state)
    sql, args = keyed("alarms", columns, key, terms, params, text=contains,
                      text_sql=_ALARM_TEXT, pk=("object_class", "object_name"), after=after,
                      desc=desc, limit=limit, offset=offset)
    return conn.execute(sql, args).fetchall()


def rank_bounds(rank: tuple[int, int], after: Cursor | None, desc: bool
                ) -> tuple[Cursor | None, list[str], list[Any]] | None:
    """The terms that keep a page inside one rank's range of urgencies: the cursor
    bounds the side the page starts from, the range the other (SQLite seeks by one
    range term per side: given both a cursor and the range's start on one side, it
    would take the range's start and walk every row up to the cursor). None: the
    cursor is past the range, the page is empty."""
    low, high = rank
    if after is not None and not low <= after[0] < high:
        if (after[0] < low) != desc:
            after = None  # the cursor is before the range: from its start
        else:
            return None
    if after is None:
        return None, ["urgency >= ?", "urgency < ?"], [low, high]
    return after, (["urgency >= ?"] if desc else ["urgency < ?"]), [low if desc else high]


def alarm_count(conn: sqlite3.Connection, state: str | None, contains: str) -> int:
    """Alarms whose `Class/name` contains a text (in a state): a walk of an index."""
    terms: list[str] = [_ALARM_TEXT]
    params: list[Any] = [contains]
    if state in keys.ALARM_RANK:
        low, high = keys.alarm_rank_range(state)
        terms = ["urgency >= ?", "urgency < ?", *terms]
        params = [low, high, contains]
    elif state:
        terms, params = ["state = ?", *terms], [state, contains]
    row = conn.execute(f"SELECT count(*) FROM alarms {_where(terms)}", params).fetchone()
    return int(row[0])


# -- objects known --------------------------------------------------------------------------

_OBJECT_COLUMNS = ("k.object_class, k.object_name, k.sources, a.state, a.next_attempt_ms, "
                   "a.paused_ms")
_OBJECT_TEXT = "instr(k.object_class || '/' || k.object_name, ?) > 0"


def object_page(conn: sqlite3.Connection, after: Cursor | None, limit: int, *, offset: int,
                contains: str | None, desc: bool) -> list[ObjectEntry]:
    key = ("k.object_class", "k.object_name")
    terms: list[str] = []
    params: list[Any] = []
    more, more_params = _after(key, after, desc)
    terms += more
    params += more_params
    if contains:
        terms.append(_OBJECT_TEXT)
        params.append(contains)
    sql = (f"SELECT {_OBJECT_COLUMNS} FROM known k LEFT JOIN alarms a ON "
           "a.object_class = k.object_class AND a.object_name = k.object_name "
           f"{_where(terms)} ORDER BY {_order(key, desc)} LIMIT ? OFFSET ?")
    rows = conn.execute(sql, [*params, limit, offset]).fetchall()
    return [ObjectEntry(cls, name, bool(src & 1), bool(src & 4), state,
                        None if state == "dead" else nxt, paused is not None)
            for cls, name, src, state, nxt, paused in rows]


def known_among(conn: sqlite3.Connection, keys: Sequence[tuple[str, str]]
                ) -> set[tuple[str, str]]:
    """Which of `keys` the objects index holds (in chunks under SQLite's variable cap)."""
    out: set[tuple[str, str]] = set()
    for lo in range(0, len(keys), 400):
        chunk = keys[lo:lo + 400]
        marks = ", ".join("(?, ?)" for _ in chunk)
        # A join: `(class, name) IN (VALUES ...)` would scan the whole table.
        rows = conn.execute(f"SELECT n.object_class, n.object_name FROM (VALUES {marks}) AS k "
                            "JOIN known n ON n.object_class = k.column1 AND "
                            "n.object_name = k.column2",
                            [v for key in chunk for v in key]).fetchall()
        out.update((c, n) for c, n in rows)
    return out


def known_count(conn: sqlite3.Connection, contains: str) -> int:
    row = conn.execute("SELECT count(*) FROM known k WHERE " + _OBJECT_TEXT,
                       (contains,)).fetchone()
    return int(row[0])


# -- executions -------------------------------------------------------------------------------

_EXECUTION_KEY = ("urgency", "id")
_EXECUTION_TEXT = "instr(name || '/' || id, ?) > 0"


def execution_page(conn: sqlite3.Connection, after: Cursor | None, limit: int, *, offset: int,
                   status: str | None, contains: str | None, desc: bool) -> list[dict[str, Any]]:
    terms, params = (["status = ?"], [status]) if status else ([], [])
    # With a status: the (status, urgency) index serves the range; without: (urgency).
    sql, args = keyed("executions", "data", _EXECUTION_KEY, terms, params, text=contains,
                      text_sql=_EXECUTION_TEXT, pk=("id",), after=after, desc=desc,
                      limit=limit, offset=offset)
    return [json.loads(r[0]) for r in conn.execute(sql, args).fetchall()]


def execution_count(conn: sqlite3.Connection, status: str | None, contains: str) -> int:
    terms: list[str] = [_EXECUTION_TEXT]
    params: list[Any] = [contains]
    if status:
        terms, params = ["status = ?", *terms], [status, contains]
    row = conn.execute(f"SELECT count(*) FROM executions {_where(terms)}", params).fetchone()
    return int(row[0])


def executions_by_function(conn: sqlite3.Connection, function: str, *,
                           statuses: StatusFilter | None, started_from_ms: int | None,
                           started_to_ms: int | None, version: str | None,
                           execution_id: str | None, after: tuple[int, str] | None,
                           limit: int, desc: bool) -> list[dict[str, Any]]:
    """A Lambda-style function's executions by (start, id), on the function index."""
    terms = ["name = ?", "json_extract(data, '$.aws') IS NOT NULL"]
    params: list[Any] = [function]
    for term, value in (("created_ms >= ?", started_from_ms), ("created_ms <= ?", started_to_ms),
                        ("version = ?", version), ("id = ?", execution_id)):
        if value is not None:
            terms.append(term)
            params.append(value)
    if after is not None:
        terms.append(f"(created_ms, id) {'<' if desc else '>'} (?, ?)")
        params += list(after)
    if statuses is not None:
        term, more = status_terms(statuses, "json_extract(data, '$.paused')")
        terms.append(term)
        params += more
    way = "DESC" if desc else "ASC"
    sql = (f"SELECT data FROM executions {_where(terms)} ORDER BY created_ms {way}, id {way} "
           "LIMIT ?")
    return [json.loads(r[0]) for r in conn.execute(sql, [*params, limit]).fetchall()]


def status_terms(statuses: StatusFilter, paused: str) -> tuple[str, list[Any]]:
    """SQL keeping the executions of `statuses` (`paused`: the record's paused field)."""
    live = ", ".join("?" * len(LIVE))
    parts: list[str] = []
    params: list[Any] = []
    if statuses.finished:
        parts.append(f"status IN ({', '.join('?' * len(statuses.finished))})")
        params += statuses.finished
    if statuses.running:
        parts.append(f"(status IN ({live}) AND {paused} IS NULL)")
        params += LIVE
    if statuses.paused:
        parts.append(f"(status IN ({live}) AND {paused} IS NOT NULL)")
        params += LIVE
    return f"({' OR '.join(parts) or 'false'})", params


# -- audit ------------------------------------------------------------------------------------

AUDIT_COLUMNS = ("seq", "at_ms", "actor", "role", "action", "target", "reason", "ok", "detail",
                 "node")


def audit_page(conn: sqlite3.Connection, after: Cursor | None, limit: int, *, offset: int,
               desc: bool) -> list[dict[str, Any]]:
    sql, args = keyed("audit", ", ".join(AUDIT_COLUMNS), ("seq",), [], [], text=None,
                      text_sql="", pk=("seq",), after=after, desc=desc, limit=limit,
                      offset=offset)
    return audit_rows(conn.execute(sql, args).fetchall())


def audit_rows(rows: Sequence[Row]) -> list[dict[str, Any]]:
    out = [dict(zip(AUDIT_COLUMNS, r, strict=True)) for r in rows]
    for d in out:
        d["ok"], d["detail"] = bool(d["ok"]), json.loads(d["detail"])
    return out


# -- recounts (tests and checks) ----------------------------------------------------------------


def recount(conn: sqlite3.Connection) -> Counts:
    """Every count from the rows themselves: what the counters must equal."""
    alarms = {s: 0 for s in keys.ALARM_RANK}
    alarms.update(dict(conn.execute("SELECT state, count(*) FROM alarms GROUP BY state")))
    retries = {(c, r): n for c, r, n in conn.execute(
        "SELECT object_class, retry_count, count(*) FROM alarms WHERE retry_count > 0 "
        "AND state IN ('retrying', 'running') GROUP BY object_class, retry_count")}
    executions = dict(conn.execute("SELECT status, count(*) FROM executions GROUP BY status"))
    stored = conn.execute("SELECT count(*) FROM objects").fetchone()[0]
    known = conn.execute(
        "SELECT count(*) FROM (SELECT object_class, object_name FROM objects UNION "
        "SELECT object_class, object_name FROM alarms UNION "
        "SELECT 'Execution', id FROM executions)").fetchone()[0]
    return Counts(alarms, retries, executions, int(stored), int(known))
