"""Every object's alarm row on PostgreSQL, and the index of the objects the runtime knows.

`PgAlarmRowWriter` is the runtime database's layout (`database.PgLayout`): how a
batch's alarm rows are written (each with its shard, which fences it) and the
counters read back after commits (kept by triggers in the transaction of each write,
schema.py: the counters migration), so that `counters()` costs no I/O.
`PgAlarmRows` reads them on pooled connections; the scheduler's reads see only the
shards this node holds (`owned`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from alarmtop.core.model.alarm_policy import AlarmKey, AlarmRecord, AlarmState
from alarmtop.core.model.keys import Cursor
from alarmtop.core.model.storage_values import Counts, ObjectEntry
from alarmtop.core.storage.alarm_rows import AlarmRowsBase
from alarmtop.core.storage.counters import parse_counters
from alarmtop.core.storage.postgres import reads
from alarmtop.core.storage.postgres.database import PgDatabase, PgWrite
from alarmtop.core.storage.postgres.schema import SCHEMA
from alarmtop.core.storage.rows import ALARM_COLUMNS, alarm_record, alarm_values

if TYPE_CHECKING:
    from alarmtop.core.storage.postgres.database import PgConn

COLUMNS = ALARM_COLUMNS
_UPSERT = (f"INSERT INTO {SCHEMA}.alarms ({COLUMNS}, due_ms, shard) VALUES "
           "($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17) "
           "ON CONFLICT (object_class, object_name) DO UPDATE SET "
           + ", ".join(f"{c} = EXCLUDED.{c}" for c in
                       [*COLUMNS.split(", ")[2:], "due_ms", "shard"]))


def to_row(rec: AlarmRecord, shard: int) -> tuple[Any, ...]:
    return (*alarm_values(rec, rec.in_file), shard)


from_row = alarm_record


class PgAlarmRowWriter:
    """The runtime database's layout on PostgreSQL: its alarm rows and its counters."""

    def __init__(self, shard_of: Callable[[AlarmKey], int]) -> None:
        self.shard_of = shard_of
        self._counts = Counts(dict.fromkeys((s.value for s in AlarmState), 0))

    def row_values(self, final: Mapping[AlarmKey, AlarmRecord | None]
                   ) -> tuple[list[tuple[Any, ...]], list[AlarmKey]]:
        rows = [to_row(v, self.shard_of(k)) for k, v in final.items() if v is not None]
        return rows, [k for k, v in final.items() if v is None]

    async def write_rows(self, conn: PgConn, rows: Sequence[tuple[Any, ...]],
                         deletes: Sequence[AlarmKey]) -> None:
        if deletes:
            await conn.executemany(f"DELETE FROM {SCHEMA}.alarms WHERE object_class = $1 "
                                   "AND object_name = $2", deletes)
        if rows:
            await conn.executemany(_UPSERT, rows)

    async def read_back(self, conn: PgConn) -> None:
        self._counts = parse_counters(await conn.fetch(reads.COUNTERS_SQL))

    def counters(self) -> Counts:
        return self._counts


class PgAlarmRows(AlarmRowsBase):
    """`AlarmRows` on the PostgreSQL runtime database."""

    def __init__(self, db: PgDatabase, writer: PgAlarmRowWriter,
                 owned: Callable[[], Sequence[int]] | None = None) -> None:
        self._db = db
        self._writer = writer
        self._owned = owned  # the shards this node runs (None: all)

    def mine(self) -> list[int] | None:
        """The shards this node runs (None: all of them)."""
        return None if self._owned is None else list(self._owned())

    async def get(self, key: AlarmKey) -> AlarmRecord | None:
        rows = await self._db.fetch(f"SELECT {COLUMNS} FROM {SCHEMA}.alarms WHERE "
                                    "object_class = $1 AND object_name = $2", *key)
        return from_row(rows[0]) if rows else None

    async def due_after(self, after_ms: float, limit: int) -> tuple[list[AlarmRecord], bool]:
        """Live alarms of the shards this node holds due after `after_ms`, soonest first:
        at least `limit` of them when there are that many (ties included)."""
        shards = self.mine()
        after = -(2**62) if after_ms == float("-inf") else int(after_ms)
        where, extra = _shards_where(shards, 3)
        base = f"SELECT {COLUMNS} FROM {SCHEMA}.alarms WHERE due_ms > $1 {where}"
        rows = [from_row(r) for r in await self._db.fetch(
            base + " ORDER BY due_ms LIMIT $2", after, limit, *extra)]
        if len(rows) < limit:
            return rows, True
        last = rows[-1].due_ms
        where2, extra2 = _shards_where(shards, 3)
        ties = [from_row(r) for r in await self._db.fetch(
            f"SELECT {COLUMNS} FROM {SCHEMA}.alarms WHERE due_ms = $1 AND due_ms > $2 {where2} "
            "ORDER BY object_class, object_name", last, after, *extra2)]
        seen = {r.key for r in rows}
        rows.extend(r for r in ties if r.key not in seen)
        return rows, False

    async def in_state(self, state: str, limit: int, offset: int = 0, *,
                       mine: bool = False) -> list[AlarmRecord]:
        where, extra = _shards_where(self.mine() if mine else None, 4)
        return [from_row(r) for r in await self._db.fetch(
            f"SELECT {COLUMNS} FROM {SCHEMA}.alarms WHERE state = $1 {where} ORDER BY "
            "object_class, object_name LIMIT $2 OFFSET $3", state, _limit(limit), offset,
            *extra)]

    async def overdue(self, before_ms: int, limit: int) -> list[AlarmRecord]:
        where, extra = _shards_where(self.mine(), 3)
        return [from_row(r) for r in await self._db.fetch(
            f"SELECT {COLUMNS} FROM {SCHEMA}.alarms WHERE due_ms < $1 {where} ORDER BY due_ms "
            "LIMIT $2", before_ms, limit, *extra)]

    async def alarm_page(self, after: Cursor | None = None, limit: int = 50, *,
                         offset: int = 0, state: str | None = None,
                         contains: str | None = None, order: str = "urgency",
                         desc: bool = False) -> list[AlarmRecord]:
        sql, params = reads.alarm_page(COLUMNS, after, limit, offset=offset, state=state,
                                       contains=contains, order=order, desc=desc)
        return [from_row(r) for r in await self._db.fetch(sql, *params)]

    def counters(self) -> Counts:
        return self._writer.counters()

    async def recount(self) -> Counts:
        async def read(conn: PgConn) -> Counts:
            q = reads.RECOUNT
            alarms = dict.fromkeys((s.value for s in AlarmState), 0)
            alarms.update({r[0]: int(r[1]) for r in await conn.fetch(q["alarms"])})
            retries = {(r[0], int(r[1])): int(r[2]) for r in await conn.fetch(q["retries"])}
            executions = {r[0]: int(r[1]) for r in await conn.fetch(q["executions"])}
            return Counts(alarms, retries, executions, int(await conn.fetchval(q["stored"])),
                          int(await conn.fetchval(q["known"])))
        return await self._db.read(read)

    async def count_matching(self, state: str | None, contains: str) -> int:
        sql, params = reads.alarm_count(state, contains)
        return int((await self._db.fetch(sql, *params))[0][0])

    async def known_matching(self, contains: str) -> int:
        sql, params = reads.known_count(contains)
        return int((await self._db.fetch(sql, *params))[0][0])

    async def object_page(self, after: Cursor | None = None, limit: int = 50, *,
                          offset: int = 0, contains: str | None = None,
                          desc: bool = False) -> list[ObjectEntry]:
        sql, params = reads.object_page(after, limit, offset=offset, contains=contains,
                                        desc=desc)
        return [ObjectEntry(r[0], r[1], bool(r[2] & 1), bool(r[2] & 4), r[3],
                            None if r[3] == "dead" else r[4], r[5] is not None)
                for r in await self._db.fetch(sql, *params)]

    async def known_among(self, keys: Sequence[AlarmKey]) -> set[AlarmKey]:
        wanted = list(keys)
        if not wanted:
            return set()
        rows = await self._db.fetch(reads.KNOWN_AMONG, [k[0] for k in wanted],
                                    [k[1] for k in wanted])
        return {(r[0], r[1]) for r in rows}

    # -- objects that have storage --------------------------------------------------------

    @staticmethod
    def object_write(key: AlarmKey, file: str, at_ms: int) -> PgWrite:
        async def write(conn: PgConn) -> None:
            await conn.execute(f"INSERT INTO {SCHEMA}.objects (object_class, object_name, file, "
                               "created_ms) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                               key[0], key[1], file, at_ms)
        return write

    async def object_classes(self) -> list[str]:
        rows = await self._db.fetch(f"SELECT DISTINCT object_class FROM {SCHEMA}.objects")
        return sorted(r[0] for r in rows)

    async def list_objects(self, limit: int, offset: int = 0,
                           contains: str | None = None) -> list[tuple[str, str]]:
        where, params = "", []
        if contains:
            where, params = "WHERE strpos(object_class || '/' || object_name, $1) > 0", [contains]
        n = len(params)
        rows = await self._db.fetch(
            f"SELECT object_class, object_name FROM {SCHEMA}.objects {where} ORDER BY "
            f"object_class, object_name LIMIT ${n + 1} OFFSET ${n + 2}", *params, limit, offset)
        return [(r[0], r[1]) for r in rows]


def _limit(limit: int) -> int | None:
    return None if limit < 0 else limit


def _shards_where(shards: Sequence[int] | None, n: int) -> tuple[str, list[Any]]:
    if shards is None:
        return "", []
    return f"AND shard = ANY(${n}::int[])", [list(shards)]
