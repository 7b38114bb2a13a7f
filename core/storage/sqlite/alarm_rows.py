"""Every object's alarm row on SQLite, and the index of the objects the runtime knows.

`AlarmRowWriter` is the runtime database's layout (`database.SqliteLayout`): the
schema, how a batch's alarm rows are written with the counters they move (kept by
the writer in the same transaction, `counters`), and the counters read back after
each commit, so that `counters()` costs no I/O. `SqliteAlarmRows` reads them: the
scheduler's own reads on the writer's thread (ordered with the writes), listings
on the read connection.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from alarmtop.core.model.alarm_policy import AlarmKey, AlarmRecord
from alarmtop.core.model.keys import Cursor
from alarmtop.core.model.storage_values import Counts, ObjectEntry
from alarmtop.core.storage.alarm_rows import AlarmRowsBase
from alarmtop.core.storage.counters import parse_counters
from alarmtop.core.storage.rows import ALARM_COLUMNS, alarm_record, alarm_values
from alarmtop.core.storage.sqlite import counters, reads
from alarmtop.core.storage.sqlite.database import SqliteDatabase, WriteFn
from alarmtop.core.storage.sqlite.schema import RUNTIME_MIGRATIONS, migrate

COLUMNS = ALARM_COLUMNS
# keys.alarm_urgency in SQL, over the row's columns (`{state}` and so on are the names
# of its inputs): what the console's listing orders by.
_URGENCY = ("(CASE {state} WHEN 'dead' THEN 0 WHEN 'retrying' THEN 1 WHEN 'running' THEN 2 "
            "ELSE 3 END) * 1152921504606846976 "
            "+ (16383 - min(max({retries}, 0), 16383)) * 70368744177664 "
            "+ (CASE WHEN {next} IS NULL THEN 0 "
            "ELSE min(max({next} + 35184372088832, 1), 70368744177663) END)")
URGENCY_SQL = _URGENCY.format(state="state", retries="retry_count", next="next_attempt_ms")
# `due_ms` is written with every row (the record's `due_ms`): what the due index orders;
# `urgency` is computed by SQLite from the row's own parameters (?4 state, ?5 retry
# count, ?6 next attempt): on the database thread without the GIL, where Python would
# hold it for every row of every firing. No trigger watches the alarm rows (their counts
# are the writer's, `counters`), so a replace is safe, and it costs a little less
# than an UPSERT of every column.
_UPSERT = (f"INSERT OR REPLACE INTO alarms ({COLUMNS}, due_ms, urgency) VALUES ("
           + ", ".join(f"?{i}" for i in range(1, 17)) + ", "
           + _URGENCY.format(state="?4", retries="?5", next="?6") + ")")


def row_of(rec: AlarmRecord) -> tuple[Any, ...]:
    return alarm_values(rec, 1 if rec.in_file else 0)


record_of_row = alarm_record


class AlarmRowWriter:
    """The runtime database's layout: its schema, its alarm rows, its counters.

    Runs on the database's writer thread (its `StateCache` is that thread's alone);
    `counters()` is read on the event loop from the rows read back after the last
    commit (replaced whole, never changed in place)."""

    def __init__(self) -> None:
        self.states = counters.StateCache()
        self._counter_rows: list[tuple[Any, ...]] = []
        self._parsed: tuple[list[tuple[Any, ...]], Counts] | None = None

    def migrate(self, conn: sqlite3.Connection) -> None:
        migrate(conn, RUNTIME_MIGRATIONS)

    def write_rows(self, conn: sqlite3.Connection,
                   final: Mapping[AlarmKey, AlarmRecord | None]) -> Callable[[], None]:
        new = counters.new_states(final)
        old = self.states.old_states(conn, final)
        counters.write_tally(conn, *counters.tally(old, new))
        dels = [k for k, v in final.items() if v is None]
        if dels:
            conn.executemany("DELETE FROM alarms WHERE object_class=? AND object_name=?", dels)
        puts = [row_of(v) for v in final.values() if v is not None]
        if puts:
            conn.executemany(_UPSERT, puts)
        return lambda: self.states.committed(new)

    def committed(self, conn: sqlite3.Connection) -> None:
        # A page of a few dozen rows: readers of `counters()` then see every write
        # whose future has completed.
        self._counter_rows = reads.read_counters(conn)

    def counters(self) -> Counts:
        rows, parsed = self._counter_rows, self._parsed
        if parsed is None or parsed[0] is not rows:
            parsed = self._parsed = (rows, parse_counters(rows))
        return parsed[1]


class SqliteAlarmRows(AlarmRowsBase):
    """`AlarmRows` on the SQLite runtime database."""

    def __init__(self, db: SqliteDatabase, writer: AlarmRowWriter) -> None:
        self._db = db
        self._writer = writer

    def _query(self, conn: sqlite3.Connection, sql: str,
               params: Sequence[Any]) -> list[AlarmRecord]:
        return [record_of_row(r) for r in conn.execute(sql, params).fetchall()]

    async def _records(self, sql: str, params: Sequence[Any]) -> list[AlarmRecord]:
        return await self._db.read(lambda conn: self._query(conn, sql, params))

    async def get(self, key: AlarmKey) -> AlarmRecord | None:
        rows = await self._records(f"SELECT {COLUMNS} FROM alarms "
                                   "WHERE object_class=? AND object_name=?", key)
        return rows[0] if rows else None

    def _due_after(self, conn: sqlite3.Connection, after_ms: float,
                   limit: int) -> tuple[list[AlarmRecord], bool]:
        after = -(2**62) if after_ms == float("-inf") else int(after_ms)
        base = f"SELECT {COLUMNS} FROM alarms WHERE due_ms > ?"
        rows = self._query(conn, base + " ORDER BY due_ms LIMIT ?", (after, limit))
        if len(rows) < limit:
            return rows, True
        last = rows[-1].due_ms
        ties = self._query(conn, base + " AND due_ms = ? ORDER BY object_class, object_name",
                           (after, last))
        seen = {r.key for r in rows}
        rows.extend(r for r in ties if r.key not in seen)
        return rows, False

    async def due_after(self, after_ms: float, limit: int) -> tuple[list[AlarmRecord], bool]:
        return await self._db.read(lambda conn: self._due_after(conn, after_ms, limit))

    async def in_state(self, state: str, limit: int, offset: int = 0, *,
                       mine: bool = False) -> list[AlarmRecord]:
        return await self._records(f"SELECT {COLUMNS} FROM alarms WHERE state=? "
                                   "ORDER BY object_class, object_name LIMIT ? OFFSET ?",
                                   (state, limit, offset))

    async def overdue(self, before_ms: int, limit: int) -> list[AlarmRecord]:
        return await self._records(f"SELECT {COLUMNS} FROM alarms WHERE "
                                   "due_ms < ? ORDER BY due_ms LIMIT ?", (before_ms, limit))

    async def alarm_page(self, after: Cursor | None = None, limit: int = 50, *,
                         offset: int = 0, state: str | None = None,
                         contains: str | None = None, order: str = "urgency",
                         desc: bool = False) -> list[AlarmRecord]:
        rows = await self._db.read_only(lambda conn: reads.alarm_page(
            conn, COLUMNS, after, limit, offset=offset, state=state, contains=contains,
            order=order, desc=desc))
        return [record_of_row(r) for r in rows]

    def counters(self) -> Counts:
        return self._writer.counters()

    async def recount(self) -> Counts:
        return await self._db.read_only(reads.recount)

    async def count_matching(self, state: str | None, contains: str) -> int:
        return await self._db.read_only(lambda conn: reads.alarm_count(conn, state, contains))

    async def known_matching(self, contains: str) -> int:
        return await self._db.read_only(lambda conn: reads.known_count(conn, contains))

    async def object_page(self, after: Cursor | None = None, limit: int = 50, *,
                          offset: int = 0, contains: str | None = None,
                          desc: bool = False) -> list[ObjectEntry]:
        return await self._db.read_only(lambda conn: reads.object_page(
            conn, after, limit, offset=offset, contains=contains, desc=desc))

    async def known_among(self, keys: Sequence[AlarmKey]) -> set[AlarmKey]:
        wanted = list(keys)
        if not wanted:
            return set()
        return await self._db.read_only(lambda conn: reads.known_among(conn, wanted))

    # -- objects that have a database -----------------------------------------------------

    @staticmethod
    def object_write(key: AlarmKey, file: str, at_ms: int) -> WriteFn:
        """List an object that is about to get a database (its real name, its file)."""
        def write(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT OR IGNORE INTO objects (object_class, object_name, file, "
                         "created_ms) VALUES (?, ?, ?, ?)", (key[0], key[1], file, at_ms))
        return write

    async def object_classes(self) -> list[str]:
        """The classes with at least one object that has a database: those listed, and
        any with a folder of object files (a file the upgrade could not name counts)."""
        root = self._db.file.parent / "objects"

        def read(conn: sqlite3.Connection) -> list[str]:
            listed = {r[0] for r in conn.execute("SELECT DISTINCT object_class FROM objects")}
            if root.is_dir():
                listed.update(p.name for p in root.iterdir() if p.is_dir())
            return sorted(listed)
        return await self._db.read(read)

    async def list_objects(self, limit: int, offset: int = 0,
                           contains: str | None = None) -> list[tuple[str, str]]:
        def read(conn: sqlite3.Connection) -> list[tuple[str, str]]:
            where, params = "", []
            if contains:
                where = "WHERE instr(object_class || '/' || object_name, ?) > 0"
                params.append(contains)
            rows = conn.execute(f"SELECT object_class, object_name FROM objects {where} "
                                "ORDER BY object_class, object_name LIMIT ? OFFSET ?",
                                (*params, limit, offset)).fetchall()
            return [(r[0], r[1]) for r in rows]
        return await self._db.read_only(read)
