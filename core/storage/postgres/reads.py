"""The listings of the runtime database on PostgreSQL, paged by key (as on SQLite).

The SQL of each page is built here; `PgAlarmIndex` and `PgExecutionStore` run it on
a pooled connection, so a listing never waits for the committer nor delays it.
Pages are by key (core/storage/keys.py): `WHERE (key...) > (cursor...) ORDER BY
key LIMIT n` on an index of that key, so a page deep in a million rows costs what
the first does. Names are compared byte by byte (their columns are `COLLATE "C"`,
schema.py's counters migration), the order SQLite and Python use, so a cursor means one order on
every backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from alarmtop.core.model import keys
from alarmtop.core.model.aws_listing import LIVE, StatusFilter
from alarmtop.core.model.keys import Cursor
from alarmtop.core.storage.postgres.schema import SCHEMA

_ALARM_KEY = {"urgency": ("urgency", "object_class", "object_name"),
              "object": ("object_class", "object_name")}
COUNTERS_SQL = (f"SELECT kind, name, num, sum(n)::BIGINT FROM {SCHEMA}.counters "
                "GROUP BY kind, name, num")


class Params:
    """Numbered placeholders, in the order their values are added."""

    def __init__(self) -> None:
        self.values: list[Any] = []

    def __call__(self, value: Any) -> str:
        self.values.append(value)
        return f"${len(self.values)}"


def _limit(limit: int) -> int | None:
    return None if limit < 0 else limit


def _where(terms: Sequence[str]) -> str:
    return "WHERE " + " AND ".join(terms) if terms else ""


def _after(key: Sequence[str], cursor: Cursor | None, desc: bool, p: Params) -> list[str]:
    if cursor is None:
        return []
    marks = ", ".join(p(v) for v in cursor)
    return [f"({', '.join(key)}) {'<' if desc else '>'} ({marks})"]


def _order(key: Sequence[str], desc: bool) -> str:
    return ", ".join(f"{k} DESC" if desc else k for k in key)


def _text(columns: str, text: str, p: Params) -> str:
    # strpos rather than LIKE: '%' and '_' in a filter are plain characters.
    return f"strpos({columns}, {p(text)}) > 0"


def alarm_page(columns: str, after: Cursor | None, limit: int, *, offset: int,
               state: str | None, contains: str | None, order: str,
               desc: bool) -> tuple[str, list[Any]]:
    key = _ALARM_KEY[order]
    p = Params()
    terms: list[str] = []
    if state in keys.ALARM_RANK and order == "urgency":
        low, high = keys.alarm_rank_range(state)  # a state is one range of the urgency index
        terms += [f"urgency >= {p(low)}", f"urgency < {p(high)}"]
    elif state:
        terms.append(f"state = {p(state)}")  # the (state, class, name) index serves this
    terms += _after(key, after, desc, p)
    if contains:
        terms.append(_text("object_class || '/' || object_name", contains, p))
    sql = (f"SELECT {columns} FROM {SCHEMA}.alarms {_where(terms)} ORDER BY "
           f"{_order(key, desc)} LIMIT {p(_limit(limit))} OFFSET {p(offset)}")
    return sql, p.values


def alarm_count(state: str | None, contains: str) -> tuple[str, list[Any]]:
    p = Params()
    terms = [f"state = {p(state)}"] if state else []
    terms.append(_text("object_class || '/' || object_name", contains, p))
    return f"SELECT count(*) FROM {SCHEMA}.alarms {_where(terms)}", p.values


def object_page(after: Cursor | None, limit: int, *, offset: int, contains: str | None,
                desc: bool) -> tuple[str, list[Any]]:
    key = ("k.object_class", "k.object_name")
    p = Params()
    terms = _after(key, after, desc, p)
    if contains:
        terms.append(_text("k.object_class || '/' || k.object_name", contains, p))
    sql = (f"SELECT k.object_class, k.object_name, k.sources, a.state, a.next_attempt_ms, "
           "a.paused_ms "
           f"FROM {SCHEMA}.known k LEFT JOIN {SCHEMA}.alarms a ON "
           "a.object_class = k.object_class AND a.object_name = k.object_name "
           f"{_where(terms)} ORDER BY {_order(key, desc)} LIMIT {p(_limit(limit))} "
           f"OFFSET {p(offset)}")
    return sql, p.values


def known_count(contains: str) -> tuple[str, list[Any]]:
    p = Params()
    return (f"SELECT count(*) FROM {SCHEMA}.known k WHERE "
            + _text("k.object_class || '/' || k.object_name", contains, p), p.values)


KNOWN_AMONG = (f"SELECT n.object_class, n.object_name FROM unnest($1::TEXT[], $2::TEXT[]) "
               f"AS k(c, nm) JOIN {SCHEMA}.known n ON n.object_class = k.c AND "
               "n.object_name = k.nm")


def execution_page(after: Cursor | None, limit: int, *, offset: int, status: str | None,
                   contains: str | None, desc: bool) -> tuple[str, list[Any]]:
    key = ("urgency", "id")
    p = Params()
    terms = [f"status = {p(status)}"] if status else []
    terms += _after(key, after, desc, p)
    if contains:
        terms.append(_text("name || '/' || id", contains, p))
    sql = (f"SELECT data FROM {SCHEMA}.executions {_where(terms)} ORDER BY "
           f"{_order(key, desc)} LIMIT {p(_limit(limit))} OFFSET {p(offset)}")
    return sql, p.values


def executions_by_function(function: str, *, statuses: StatusFilter | None,
                           started_from_ms: int | None, started_to_ms: int | None,
                           version: str | None, execution_id: str | None,
                           after: tuple[int, str] | None, limit: int,
                           desc: bool) -> tuple[str, list[Any]]:
    """A Lambda-style function's executions by (start, id), on the function index."""
    p = Params()
    terms = [f"name = {p(function)}", "(data::jsonb ->> 'aws') IS NOT NULL"]
    for column, op, value in (("created_ms", ">=", started_from_ms),
                              ("created_ms", "<=", started_to_ms), ("version", "=", version),
                              ("id", "=", execution_id)):
        if value is not None:
            terms.append(f"{column} {op} {p(value)}")
    if after is not None:
        terms.append(f"(created_ms, id) {'<' if desc else '>'} ({p(after[0])}, {p(after[1])})")
    if statuses is not None:
        live = ", ".join(p(s) for s in LIVE) if statuses.running or statuses.paused else ""
        parts = []
        if statuses.finished:
            parts.append(f"status IN ({', '.join(p(s) for s in statuses.finished)})")
        if statuses.running:
            parts.append(f"(status IN ({live}) AND (data::jsonb ->> 'paused') IS NULL)")
        if statuses.paused:
            parts.append(f"(status IN ({live}) AND (data::jsonb ->> 'paused') IS NOT NULL)")
        terms.append(f"({' OR '.join(parts) or 'false'})")
    way = "DESC" if desc else "ASC"
    sql = (f"SELECT data FROM {SCHEMA}.executions {_where(terms)} ORDER BY created_ms {way}, "
           f"id {way} LIMIT {p(limit)}")
    return sql, p.values


def execution_count(status: str | None, contains: str) -> tuple[str, list[Any]]:
    p = Params()
    terms = [f"status = {p(status)}"] if status else []
    terms.append(_text("name || '/' || id", contains, p))
    return f"SELECT count(*) FROM {SCHEMA}.executions {_where(terms)}", p.values


AUDIT_COLUMNS = ("seq", "at_ms", "actor", "role", "action", "target", "reason", "ok", "detail",
                 "node")


def audit_page(after: Cursor | None, limit: int, *, offset: int,
               desc: bool) -> tuple[str, list[Any]]:
    p = Params()
    terms = _after(("seq",), after, desc, p)
    sql = (f"SELECT {', '.join(AUDIT_COLUMNS)} FROM {SCHEMA}.audit {_where(terms)} "
           f"ORDER BY {_order(('seq',), desc)} LIMIT {p(_limit(limit))} OFFSET {p(offset)}")
    return sql, p.values




RECOUNT = {
    "alarms": f"SELECT state, count(*) FROM {SCHEMA}.alarms GROUP BY state",
    "retries": f"SELECT object_class, retry_count, count(*) FROM {SCHEMA}.alarms WHERE "
               "retry_count > 0 AND state IN ('retrying', 'running') "
               "GROUP BY object_class, retry_count",
    "executions": f"SELECT status, count(*) FROM {SCHEMA}.executions GROUP BY status",
    "stored": f"SELECT count(*) FROM {SCHEMA}.objects",
    "known": f"SELECT count(*) FROM (SELECT object_class, object_name FROM {SCHEMA}.objects "
             f"UNION SELECT object_class, object_name FROM {SCHEMA}.alarms "
             f"UNION SELECT 'Execution', id FROM {SCHEMA}.executions) AS k",
}
