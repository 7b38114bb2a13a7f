"""The operator tools' storage on PostgreSQL: paused alarms, the timers board, bulk
batches (as `sqlite.operator_rows` on SQLite; `ports.OperatorRows` says why writes
ride the runtime database's group commit).

Tables of its schema migration: the alarm rows' `paused_ms`, `bulk_batches` and
`bulk_items`. A batch belongs to the node that runs it (`node`); a node that starts
takes over the open batches of nodes that no longer hold a lease (`claim_batch`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from alarmtop.core.model.alarm_policy import AlarmKey, AlarmRecord
from alarmtop.core.model.bulk_items import BATCH_OPEN, PREP_CHUNK, ItemOutcome
from alarmtop.core.model.errors import StorageError
from alarmtop.core.model.selection import Selection
from alarmtop.core.storage.audit_rows import AUDIT_INSERT_COLUMNS, audit_rows_of
from alarmtop.core.storage.postgres.alarm_rows import COLUMNS, from_row
from alarmtop.core.storage.postgres.database import PgDatabase, PgWrite
from alarmtop.core.storage.postgres.reads import Params
from alarmtop.core.storage.postgres.schema import SCHEMA

if TYPE_CHECKING:
    from alarmtop.core.storage.postgres.database import PgConn

_dumps = json.JSONEncoder(separators=(",", ":")).encode
_BATCH_COLUMNS = ("id", "action", "kind", "status", "actor", "role", "reason", "note",
                  "throttle", "params", "total", "done", "failed", "cancelled", "created_ms",
                  "updated_ms", "ended_ms", "node", "prep_after", "cancel_reason")
_BATCH_SELECT = ", ".join(_BATCH_COLUMNS)
_BOARD_STATES = "state IN ('pending', 'retrying')"


class _Sql(Params):
    """WHERE terms with PostgreSQL's numbered parameters (`reads.Params`)."""

    def __init__(self) -> None:
        super().__init__()
        self.terms: list[str] = []

    @property
    def params(self) -> list[Any]:
        return self.values

    def p(self, value: Any) -> str:
        return self(value)

    def term(self, sql: str) -> None:
        self.terms.append(sql)

    def where(self) -> str:
        return " AND ".join(self.terms) if self.terms else "TRUE"


def selection_sql(sel: Selection, q: _Sql) -> tuple[str, str, str]:
    """(table, key expression, key order) of a selection; its terms go into `q`."""
    if sel.kind == "alarms":
        if sel.state == "paused":
            q.term("paused_ms IS NOT NULL")
        elif sel.state is not None:
            q.term(f"state = {q.p(sel.state)} AND paused_ms IS NULL")
        if sel.cls is not None:
            q.term(f"object_class = {q.p(sel.cls)}")
        if sel.name is not None:
            q.term(f"strpos(object_name, {q.p(sel.name)}) > 0")  # text, not a LIKE pattern
        if sel.error is not None:
            q.term(f"strpos(last_error, {q.p(sel.error)}) > 0")
        if sel.due_from_ms is not None:
            q.term(f"next_attempt_ms >= {q.p(sel.due_from_ms)}")
        if sel.due_to_ms is not None:
            q.term(f"next_attempt_ms <= {q.p(sel.due_to_ms)}")
        last = "((attempts::jsonb -> -1) ->> 'start_ms')::bigint"
        if sel.updated_from_ms is not None:
            q.term(f"{last} >= {q.p(sel.updated_from_ms)}")
        if sel.updated_to_ms is not None:
            q.term(f"{last} <= {q.p(sel.updated_to_ms)}")
        return (f"{SCHEMA}.alarms", "object_class || '/' || object_name",
                "object_class, object_name")
    if sel.status is not None:
        q.term(f"status = {q.p(sel.status)}")
    if sel.cls is not None:
        q.term(f"name = {q.p(sel.cls)}")
    if sel.name is not None:
        q.term(f"strpos(id, {q.p(sel.name)}) > 0")
    if sel.error is not None:
        q.term(f"strpos((data::jsonb -> 'error') ->> 'ErrorMessage', {q.p(sel.error)}) > 0")
    if sel.updated_from_ms is not None:
        q.term(f"updated_ms >= {q.p(sel.updated_from_ms)}")
    if sel.updated_to_ms is not None:
        q.term(f"updated_ms <= {q.p(sel.updated_to_ms)}")
    return f"{SCHEMA}.executions", "id", "id"


def _after(sel: Selection, after: str | None, q: _Sql) -> None:
    if after is None:
        return
    if sel.kind == "alarms":
        cls, _, name = after.partition("/")
        q.term(f"(object_class, object_name) > ({q.p(cls)}, {q.p(name)})")
    else:
        q.term(f"id > {q.p(after)}")


def batch_of_row(row: Any) -> dict[str, Any]:
    out = {c: row[i] for i, c in enumerate(_BATCH_COLUMNS)}
    out["params"] = json.loads(out["params"] or "{}")
    return out


class PgOperatorRows:
    """`OperatorRows` on the PostgreSQL backend's runtime schema."""

    def __init__(self, db: PgDatabase, node_id: str,
                 owned: Callable[[], Sequence[int]] | None = None) -> None:
        self._db = db
        self.node_id = node_id
        self._owned = owned  # the shards this node runs (None: all)

    def _node(self) -> str | None:
        return self.node_id

    # -- alarms ---------------------------------------------------------------------------

    async def paused(self, mine: bool = True) -> list[tuple[AlarmKey, int]]:
        q = _Sql()
        q.term("paused_ms IS NOT NULL")
        shards = None if not mine or self._owned is None else list(self._owned())
        if shards is not None:
            q.term(f"shard = ANY({q.p(list(shards))}::int[])")
        rows = await self._db.fetch(f"SELECT object_class, object_name, paused_ms FROM "
                                     f"{SCHEMA}.alarms WHERE {q.where()}", *q.params)
        return [((r[0], r[1]), int(r[2])) for r in rows]

    async def get_many(self, keys: Sequence[AlarmKey]) -> dict[AlarmKey, AlarmRecord]:
        if not keys:
            return {}
        rows = await self._db.fetch(
            f"SELECT {COLUMNS} FROM {SCHEMA}.alarms a JOIN unnest($1::text[], $2::text[]) "
            "AS k(c, n) ON a.object_class = k.c AND a.object_name = k.n",
            [k[0] for k in keys], [k[1] for k in keys])
        out = {}
        for r in rows:
            rec = from_row(r)
            out[rec.key] = rec
        return out

    async def board_alarms(self, limit: int, after: tuple[int, str, str] | None, *,
                           paused: bool, until_ms: int | None,
                           skip_class: str) -> list[AlarmRecord]:
        due = "next_attempt_ms" if paused else "due_ms"
        q = _Sql()
        q.term(f"{due} IS NOT NULL")
        q.term("paused_ms IS NOT NULL" if paused else "paused_ms IS NULL")
        q.term(_BOARD_STATES)
        q.term(f"object_class != {q.p(skip_class)}")
        if after is not None:
            q.term(f"({due}, object_class, object_name) > ({q.p(after[0])}, {q.p(after[1])}, "
                   f"{q.p(after[2])})")
        if until_ms is not None:
            q.term(f"{due} <= {q.p(until_ms)}")
        # Served by `alarms_board` (or `alarms_paused`): the row value walks the index.
        rows = await self._db.fetch(
            f"SELECT {COLUMNS} FROM {SCHEMA}.alarms WHERE {q.where()} ORDER BY {due}, "
            f"object_class, object_name LIMIT {q.p(limit)}", *q.params)
        return [from_row(r) for r in rows]

    # -- selections -----------------------------------------------------------------------

    async def count_selected(self, sel: Selection) -> int:
        q = _Sql()
        table, _, _ = selection_sql(sel, q)
        rows = await self._db.fetch(f"SELECT count(*) FROM {table} WHERE {q.where()}",
                                     *q.params)
        return int(rows[0][0])

    async def sample_selected(self, sel: Selection, limit: int) -> list[str]:
        q = _Sql()
        table, key, order = selection_sql(sel, q)
        rows = await self._db.fetch(f"SELECT {key} FROM {table} WHERE {q.where()} ORDER BY "
                                     f"{order} LIMIT {q.p(limit)}", *q.params)
        return [r[0] for r in rows]

    # -- batches --------------------------------------------------------------------------

    async def create_batch(self, row: dict[str, Any], keys: Sequence[str] | None) -> None:
        values = [row.get(c) for c in _BATCH_COLUMNS]
        values[_BATCH_COLUMNS.index("params")] = _dumps(row.get("params") or {})
        values[_BATCH_COLUMNS.index("node")] = self._node()
        items = [(row["id"], i, key, "pending") for i, key in enumerate(keys or (), 1)]
        marks = ", ".join(f"${i}" for i in range(1, len(_BATCH_COLUMNS) + 1))

        async def write(conn: PgConn) -> None:
            await conn.execute(f"INSERT INTO {SCHEMA}.bulk_batches ({_BATCH_SELECT}) VALUES "
                               f"({marks})", *values)
            if items:
                await conn.executemany(f"INSERT INTO {SCHEMA}.bulk_items (batch_id, seq, key, "
                                       "status) VALUES ($1, $2, $3, $4)", items)
        await self._db.submit(extra=write)

    async def prepare_step(self, batch_id: str, sel: Selection, after: str | None,
                           limit: int = PREP_CHUNK) -> tuple[int, str | None]:
        out: list[tuple[int, str | None]] = []

        async def write(conn: PgConn) -> None:
            # Only the batch's node records its keys, and only from where it left off:
            # a node taken for gone, still running, must not add them a second time.
            # A batch cancelled meanwhile takes no more keys.
            status = await conn.fetchval(f"SELECT status FROM {SCHEMA}.bulk_batches WHERE "
                                         "id = $1", batch_id)
            if status not in BATCH_OPEN:
                out.append((0, None))
                return
            await self._still_runs(conn, batch_id, self._node())
            if await conn.fetchval(f"SELECT prep_after IS NOT DISTINCT FROM $2::text FROM "
                                   f"{SCHEMA}.bulk_batches WHERE id = $1", batch_id,
                                   after) is not True:
                raise StorageError(f"bulk batch {batch_id}'s keys were recorded past this "
                                   "point by another run: nothing of this write was kept")
            q = _Sql()
            table, key, order = selection_sql(sel, q)
            _after(sel, after, q)
            keys = [r[0] for r in await conn.fetch(
                f"SELECT {key} FROM {table} WHERE {q.where()} ORDER BY {order} "
                f"LIMIT {q.p(limit)}", *q.params)]
            total = int(await conn.fetchval(f"SELECT total FROM {SCHEMA}.bulk_batches WHERE "
                                            "id = $1", batch_id))
            if keys:
                await conn.executemany(f"INSERT INTO {SCHEMA}.bulk_items (batch_id, seq, key, "
                                       "status) VALUES ($1, $2, $3, 'pending')",
                                       [(batch_id, total + i, k) for i, k in enumerate(keys, 1)])
            last = keys[-1] if len(keys) == limit else None
            await conn.execute(f"UPDATE {SCHEMA}.bulk_batches SET total = total + $1, "
                               "prep_after = $2::text, status = CASE WHEN $2::text IS NULL AND "
                               "status = 'preparing' THEN 'running' ELSE status END WHERE "
                               "id = $3", len(keys), last, batch_id)
            out.append((len(keys), last))
        await self._db.submit(extra=write)
        return out[0]

    async def open_items(self, batch_id: str, after_seq: int,
                         limit: int) -> list[tuple[int, str, str, dict[str, Any] | None]]:
        rows = await self._db.fetch(
            f"SELECT seq, key, status, detail FROM {SCHEMA}.bulk_items WHERE batch_id = $1 AND "
            "status IN ('pending', 'running') AND seq > $2 ORDER BY seq LIMIT $3",
            batch_id, after_seq, limit)
        return [(int(r[0]), r[1], r[2], json.loads(r[3]) if r[3] else None) for r in rows]

    def items_write(self, batch_id: str, outcomes: Sequence[ItemOutcome], now_ms: int,
                    audit: Sequence[dict[str, Any]] = ()) -> PgWrite:
        rows = [(o.status, o.error, None if o.detail is None else _dumps(o.detail), batch_id,
                 o.seq) for o in outcomes]
        done = sum(1 for o in outcomes if o.status == "done")
        failed = sum(1 for o in outcomes if o.status == "failed")
        node = self._node()
        audit_rows = audit_rows_of(audit, node)

        async def write(conn: PgConn) -> None:
            if rows:
                await self._still_runs(conn, batch_id, node)
                await conn.executemany(f"UPDATE {SCHEMA}.bulk_items SET status = $1, "
                                       "error = $2, detail = $3 WHERE batch_id = $4 AND "
                                       "seq = $5", rows)
            if done or failed:
                await conn.execute(f"UPDATE {SCHEMA}.bulk_batches SET done = done + $1, "
                                   "failed = failed + $2, updated_ms = $3 WHERE id = $4",
                                   done, failed, now_ms, batch_id)
            if audit_rows:
                await conn.executemany(
                    f"INSERT INTO {SCHEMA}.audit ({AUDIT_INSERT_COLUMNS}) VALUES "
                    "($1,$2,$3,$4,$5,$6,$7,$8,$9)", audit_rows)
        return write

    def finish_write(self, batch_id: str, status: str, now_ms: int,
                     cancel_left: bool = False, audit: Sequence[dict[str, Any]] = (),
                     cancel_reason: str | None = None) -> PgWrite:
        ended = None if status in BATCH_OPEN else now_ms
        with_audit = self.items_write(batch_id, (), now_ms, audit)

        async def write(conn: PgConn) -> None:
            if ended is not None:  # the runner's end; a "cancelling" mark may come from any node
                await self._still_runs(conn, batch_id, self._node())
            await with_audit(conn)
            n = 0
            if cancel_left:
                res = await conn.execute(f"UPDATE {SCHEMA}.bulk_items SET status = 'cancelled' "
                                         "WHERE batch_id = $1 AND status = 'pending'", batch_id)
                n = int(res.split()[-1])
            # A mark of an open status never reopens a batch that has just ended.
            await conn.execute(f"UPDATE {SCHEMA}.bulk_batches SET status = $1, ended_ms = $2, "
                               "updated_ms = $3, cancelled = cancelled + $4, cancel_reason = "
                               "coalesce($6, cancel_reason) WHERE id = $5"
                               + ("" if ended is not None else
                                  " AND status = ANY($7::text[])"),
                               status, ended, now_ms, n, batch_id, cancel_reason,
                               *(() if ended is not None else (sorted(BATCH_OPEN),)))
        return write

    @staticmethod
    async def _still_runs(conn: PgConn, batch_id: str, node: str | None) -> None:
        """In the writer's transaction: go on only while this node runs the batch. The
        row is locked, so a takeover waits for this transaction and then sees what it
        wrote; a write after a takeover keeps nothing (its alarm rows included)."""
        found = await conn.fetchrow(f"SELECT node, status FROM {SCHEMA}.bulk_batches WHERE "
                                    "id = $1 FOR UPDATE", batch_id)
        owner = None if found is None else found[0]
        if found is not None and found[1] not in BATCH_OPEN:
            raise StorageError(f"bulk batch {batch_id} has ended ({found[1]}): nothing of "
                               "this write was kept")
        if owner is not None and node is not None and owner != node:
            raise StorageError(f"bulk batch {batch_id} is run by node {owner} now, not by "
                               f"this node ({node}): nothing of this write was kept")

    def submit(self, write: PgWrite) -> asyncio.Future[None]:
        return self._db.submit(extra=write)

    async def get_batch(self, batch_id: str) -> dict[str, Any] | None:
        rows = await self._db.fetch(f"SELECT {_BATCH_SELECT} FROM {SCHEMA}.bulk_batches WHERE "
                                     "id = $1", batch_id)
        return batch_of_row(rows[0]) if rows else None

    async def failures(self, batch_id: str, after_seq: int,
                       limit: int) -> list[dict[str, Any]]:
        rows = await self._db.fetch(
            f"SELECT seq, key, error FROM {SCHEMA}.bulk_items WHERE batch_id = $1 AND "
            "status = 'failed' AND seq > $2 ORDER BY seq LIMIT $3", batch_id, after_seq, limit)
        return [{"seq": r[0], "key": r[1], "error": r[2]} for r in rows]

    async def list_batches(self, limit: int, after: str | None) -> list[dict[str, Any]]:
        if after is None:
            rows = await self._db.fetch(f"SELECT {_BATCH_SELECT} FROM {SCHEMA}.bulk_batches "
                                         "ORDER BY id DESC LIMIT $1", limit)
        else:
            rows = await self._db.fetch(f"SELECT {_BATCH_SELECT} FROM {SCHEMA}.bulk_batches "
                                         "WHERE id < $1 ORDER BY id DESC LIMIT $2", after, limit)
        return [batch_of_row(r) for r in rows]

    async def open_batches(self) -> list[dict[str, Any]]:
        rows = await self._db.fetch(f"SELECT {_BATCH_SELECT} FROM {SCHEMA}.bulk_batches WHERE "
                                     "status = ANY($1::text[]) ORDER BY id", list(BATCH_OPEN))
        return [batch_of_row(r) for r in rows]

    async def claim_batch(self, batch_id: str, node: str, was: str | None) -> bool:
        """Take a batch over from node `was` (compare-and-set: one taker wins)."""
        rows = await self._db.fetch(
            f"UPDATE {SCHEMA}.bulk_batches SET node = $1 WHERE id = $2 AND node IS NOT "
            "DISTINCT FROM $3 AND status = ANY($4::text[]) RETURNING id", node, batch_id, was,
            sorted(BATCH_OPEN))
        return bool(rows)
