"""The operator tools' storage on SQLite: paused alarms, the timers board, bulk batches.

Tables of `runtime.sqlite` (migration 5): the alarm rows' `paused_ms` and its index,
`bulk_batches` and `bulk_items`. Writes are functions run inside the alarm index's
group-commit transaction (`ports.OperatorRows` says why); reads run on its thread.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from alarmtop.core.model.alarm_policy import AlarmKey, AlarmRecord
from alarmtop.core.model.bulk_items import BATCH_OPEN, PREP_CHUNK, ItemOutcome
from alarmtop.core.model.selection import Selection
from alarmtop.core.storage.audit_rows import AUDIT_INSERT_COLUMNS, audit_rows_of
from alarmtop.core.storage.sqlite.alarm_rows import COLUMNS as ROW_COLUMNS
from alarmtop.core.storage.sqlite.alarm_rows import record_of_row
from alarmtop.core.storage.sqlite.database import SqliteDatabase, WriteFn

_dumps = json.JSONEncoder(separators=(",", ":")).encode
_BATCH_COLUMNS = ("id", "action", "kind", "status", "actor", "role", "reason", "note",
                  "throttle", "params", "total", "done", "failed", "cancelled", "created_ms",
                  "updated_ms", "ended_ms", "node", "prep_after", "cancel_reason")
_BOARD_STATES = "state IN ('pending', 'retrying')"


def selection_sql(sel: Selection) -> tuple[str, str, str, str, list[Any]]:
    """(table, key expression, key order, WHERE terms joined, params) of a selection,
    in SQLite's dialect: the table's rows `sel` matches, by key."""
    terms: list[str] = []
    params: list[Any] = []

    def term(sql: str, *values: Any) -> None:
        terms.append(sql)
        params.extend(values)

    if sel.kind == "alarms":
        if sel.state == "paused":
            term("paused_ms IS NOT NULL")
        elif sel.state is not None:
            term("state = ? AND paused_ms IS NULL", sel.state)
        if sel.cls is not None:
            term("object_class = ?", sel.cls)
        if sel.name is not None:
            term("instr(object_name, ?) > 0", sel.name)  # text, not a LIKE pattern
        if sel.error is not None:
            term("instr(last_error, ?) > 0", sel.error)
        if sel.due_from_ms is not None:
            term("next_attempt_ms >= ?", sel.due_from_ms)
        if sel.due_to_ms is not None:
            term("next_attempt_ms <= ?", sel.due_to_ms)
        last = "json_extract(attempts, '$[#-1].start_ms')"
        if sel.updated_from_ms is not None:
            term(f"{last} >= ?", sel.updated_from_ms)
        if sel.updated_to_ms is not None:
            term(f"{last} <= ?", sel.updated_to_ms)
        return "alarms", "object_class || '/' || object_name", "object_class, object_name", \
            _where(terms), params
    if sel.status is not None:
        term("status = ?", sel.status)
    if sel.cls is not None:
        term("name = ?", sel.cls)
    if sel.name is not None:
        term("instr(id, ?) > 0", sel.name)
    if sel.error is not None:
        term("instr(json_extract(data, '$.error.ErrorMessage'), ?) > 0", sel.error)
    if sel.updated_from_ms is not None:
        term("updated_ms >= ?", sel.updated_from_ms)
    if sel.updated_to_ms is not None:
        term("updated_ms <= ?", sel.updated_to_ms)
    return "executions", "id", "id", _where(terms), params


def _where(terms: list[str]) -> str:
    return " AND ".join(terms) if terms else "1"


def _after_sql(sel: Selection, after: str | None) -> tuple[str, list[Any]]:
    if after is None:
        return "", []
    if sel.kind == "alarms":
        cls, _, name = after.partition("/")
        return " AND (object_class, object_name) > (?, ?)", [cls, name]
    return " AND id > ?", [after]


def batch_of_row(row: Sequence[Any]) -> dict[str, Any]:
    out = dict(zip(_BATCH_COLUMNS, row, strict=True))
    out["params"] = json.loads(out["params"] or "{}")
    return out


class SqliteOperatorRows:
    """`OperatorRows` on the runtime database of the SQLite backend."""

    def __init__(self, db: SqliteDatabase, node_id: str | None = None) -> None:
        self._db = db
        self.node_id = node_id  # in every audit row it writes, as the execution store does

    # -- alarms ---------------------------------------------------------------------------

    async def paused(self, mine: bool = True) -> list[tuple[AlarmKey, int]]:
        def read(conn: sqlite3.Connection) -> list[tuple[AlarmKey, int]]:
            rows = conn.execute("SELECT object_class, object_name, paused_ms FROM alarms "
                                "WHERE paused_ms IS NOT NULL").fetchall()
            return [((r[0], r[1]), int(r[2])) for r in rows]
        return await self._db.read(read)

    async def get_many(self, keys: Sequence[AlarmKey]) -> dict[AlarmKey, AlarmRecord]:
        wanted = list(keys)

        def read(conn: sqlite3.Connection) -> dict[AlarmKey, AlarmRecord]:
            out: dict[AlarmKey, AlarmRecord] = {}
            sql = f"SELECT {ROW_COLUMNS} FROM alarms WHERE object_class = ? AND object_name = ?"
            for key in wanted:  # point lookups on the primary key, in one thread hop
                row = conn.execute(sql, key).fetchone()
                if row is not None:
                    out[key] = record_of_row(row)
            return out
        return await self._db.read(read)

    async def board_alarms(self, limit: int, after: tuple[int, str, str] | None, *,
                           paused: bool, until_ms: int | None,
                           skip_class: str) -> list[AlarmRecord]:
        due = "next_attempt_ms" if paused else "due_ms"
        terms = [f"{due} IS NOT NULL", "paused_ms IS NOT NULL" if paused else
                 "paused_ms IS NULL", _BOARD_STATES, "object_class != ?"]
        params: list[Any] = [skip_class]
        if after is not None:
            terms.append(f"({due}, object_class, object_name) > (?, ?, ?)")
            params += list(after)
        if until_ms is not None:
            terms.append(f"{due} <= ?")
            params.append(until_ms)
        # Served by `alarms_due` (or `alarms_paused`): the row value walks the index.
        sql = (f"SELECT {ROW_COLUMNS} FROM alarms WHERE "
               f"{' AND '.join(terms)} ORDER BY {due}, object_class, object_name LIMIT ?")

        def read(conn: sqlite3.Connection) -> list[AlarmRecord]:
            return [record_of_row(r) for r in conn.execute(sql, [*params, limit]).fetchall()]
        return await self._db.read(read)

    # -- selections -----------------------------------------------------------------------

    async def count_selected(self, sel: Selection) -> int:
        table, _, _, where, params = selection_sql(sel)

        def read(conn: sqlite3.Connection) -> int:
            return int(conn.execute(f"SELECT count(*) FROM {table} WHERE {where}",
                                    params).fetchone()[0])
        return await self._db.read(read)

    async def sample_selected(self, sel: Selection, limit: int) -> list[str]:
        table, key, order, where, params = selection_sql(sel)

        def read(conn: sqlite3.Connection) -> list[str]:
            return [r[0] for r in conn.execute(
                f"SELECT {key} FROM {table} WHERE {where} ORDER BY {order} LIMIT ?",
                [*params, limit]).fetchall()]
        return await self._db.read(read)

    # -- batches --------------------------------------------------------------------------

    async def create_batch(self, row: dict[str, Any], keys: Sequence[str] | None) -> None:
        values = [row.get(c) for c in _BATCH_COLUMNS]
        values[_BATCH_COLUMNS.index("params")] = _dumps(row.get("params") or {})
        items = [(row["id"], i, key, "pending") for i, key in enumerate(keys or (), 1)]

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(f"INSERT INTO bulk_batches ({', '.join(_BATCH_COLUMNS)}) VALUES "
                         f"({', '.join('?' * len(_BATCH_COLUMNS))})", values)
            conn.executemany("INSERT INTO bulk_items (batch_id, seq, key, status) VALUES "
                             "(?, ?, ?, ?)", items)
        await self._db.submit(extra=write)

    async def prepare_step(self, batch_id: str, sel: Selection, after: str | None,
                           limit: int = PREP_CHUNK) -> tuple[int, str | None]:
        table, key, order, where, params = selection_sql(sel)
        after_sql, after_params = _after_sql(sel, after)
        out: list[tuple[int, str | None]] = []

        def write(conn: sqlite3.Connection) -> None:
            found = conn.execute("SELECT status FROM bulk_batches WHERE id = ?",
                                 (batch_id,)).fetchone()
            if found is None or found[0] not in BATCH_OPEN:  # cancelled meanwhile
                out.append((0, None))
                return
            keys = [r[0] for r in conn.execute(
                f"SELECT {key} FROM {table} WHERE {where}{after_sql} ORDER BY {order} "
                "LIMIT ?", [*params, *after_params, limit]).fetchall()]
            total = int(conn.execute("SELECT total FROM bulk_batches WHERE id = ?",
                                     (batch_id,)).fetchone()[0])
            conn.executemany("INSERT INTO bulk_items (batch_id, seq, key, status) VALUES "
                             "(?, ?, ?, 'pending')",
                             [(batch_id, total + i, k) for i, k in enumerate(keys, 1)])
            last = keys[-1] if len(keys) == limit else None
            conn.execute("UPDATE bulk_batches SET total = total + ?, prep_after = ?, "
                         "status = CASE WHEN ? IS NULL AND status = 'preparing' THEN "
                         "'running' ELSE status END WHERE id = ?",
                         (len(keys), last, last, batch_id))
            out.append((len(keys), last))
        await self._db.submit(extra=write)
        return out[0]

    async def open_items(self, batch_id: str, after_seq: int,
                         limit: int) -> list[tuple[int, str, str, dict[str, Any] | None]]:
        def read(conn: sqlite3.Connection) -> list[tuple[int, str, str, dict[str, Any] | None]]:
            rows = conn.execute(
                "SELECT seq, key, status, detail FROM bulk_items WHERE batch_id = ? AND "
                "status IN ('pending', 'running') AND seq > ? ORDER BY seq LIMIT ?",
                (batch_id, after_seq, limit)).fetchall()
            return [(int(r[0]), r[1], r[2], json.loads(r[3]) if r[3] else None)
                    for r in rows]
        return await self._db.read(read)

    def items_write(self, batch_id: str, outcomes: Sequence[ItemOutcome], now_ms: int,
                    audit: Sequence[dict[str, Any]] = ()) -> WriteFn:
        rows = [(o.status, o.error, None if o.detail is None else _dumps(o.detail), batch_id,
                 o.seq) for o in outcomes]
        done = sum(1 for o in outcomes if o.status == "done")
        failed = sum(1 for o in outcomes if o.status == "failed")
        audit_rows = audit_rows_of(audit, self.node_id, int)

        def write(conn: sqlite3.Connection) -> None:
            conn.executemany("UPDATE bulk_items SET status = ?, error = ?, detail = ? WHERE "
                             "batch_id = ? AND seq = ?", rows)
            if done or failed:
                conn.execute("UPDATE bulk_batches SET done = done + ?, failed = failed + ?, "
                             "updated_ms = ? WHERE id = ?", (done, failed, now_ms, batch_id))
            if audit_rows:
                conn.executemany(f"INSERT INTO audit ({AUDIT_INSERT_COLUMNS}) VALUES "
                                 "(?,?,?,?,?,?,?,?,?)", audit_rows)
        return write

    def finish_write(self, batch_id: str, status: str, now_ms: int,
                     cancel_left: bool = False, audit: Sequence[dict[str, Any]] = (),
                     cancel_reason: str | None = None) -> WriteFn:
        ended = None if status in BATCH_OPEN else now_ms
        with_audit = self.items_write(batch_id, (), now_ms, audit)

        def write(conn: sqlite3.Connection) -> None:
            with_audit(conn)
            n = 0
            if cancel_left:
                n = conn.execute("UPDATE bulk_items SET status = 'cancelled' WHERE batch_id = "
                                 "? AND status = 'pending'", (batch_id,)).rowcount
            # A mark of an open status never reopens a batch that has just ended.
            open_only = "" if ended is not None else \
                f" AND status IN ({', '.join('?' * len(BATCH_OPEN))})"
            conn.execute("UPDATE bulk_batches SET status = ?, ended_ms = ?, updated_ms = ?, "
                         "cancelled = cancelled + ?, cancel_reason = coalesce(?, "
                         f"cancel_reason) WHERE id = ?{open_only}",
                         (status, ended, now_ms, n, cancel_reason, batch_id,
                          *(() if ended is not None else sorted(BATCH_OPEN))))
        return write

    def submit(self, write: WriteFn) -> asyncio.Future[None]:
        return self._db.submit(extra=write)

    async def get_batch(self, batch_id: str) -> dict[str, Any] | None:
        def read(conn: sqlite3.Connection) -> dict[str, Any] | None:
            row = conn.execute(f"SELECT {', '.join(_BATCH_COLUMNS)} FROM bulk_batches WHERE "
                               "id = ?", (batch_id,)).fetchone()
            return None if row is None else batch_of_row(row)
        return await self._db.read(read)

    async def failures(self, batch_id: str, after_seq: int,
                       limit: int) -> list[dict[str, Any]]:
        def read(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            rows = conn.execute("SELECT seq, key, error FROM bulk_items WHERE batch_id = ? AND "
                                "status = 'failed' AND seq > ? ORDER BY seq LIMIT ?",
                                (batch_id, after_seq, limit)).fetchall()
            return [{"seq": r[0], "key": r[1], "error": r[2]} for r in rows]
        return await self._db.read(read)

    async def list_batches(self, limit: int, after: str | None) -> list[dict[str, Any]]:
        def read(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            where, params = ("WHERE id < ?", [after]) if after is not None else ("", [])
            rows = conn.execute(f"SELECT {', '.join(_BATCH_COLUMNS)} FROM bulk_batches "
                                f"{where} ORDER BY id DESC LIMIT ?", [*params, limit])
            return [batch_of_row(r) for r in rows.fetchall()]
        return await self._db.read(read)

    async def open_batches(self) -> list[dict[str, Any]]:
        def read(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            rows = conn.execute(f"SELECT {', '.join(_BATCH_COLUMNS)} FROM bulk_batches WHERE "
                                f"status IN ({', '.join('?' * len(BATCH_OPEN))}) ORDER BY id",
                                BATCH_OPEN).fetchall()
            return [batch_of_row(r) for r in rows]
        return await self._db.read(read)

    async def claim_batch(self, batch_id: str, node: str, was: str | None) -> bool:
        return True  # one process runs everything of a SQLite data dir
