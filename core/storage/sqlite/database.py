"""The alarm index on SQLite: one table, one writer thread, group commit.

Concurrent writers hand their changes to one committer; it applies everything
queued in one transaction and one fsync, then wakes all of them. One commit per
alarm would cap firing at the fsync rate; a shared commit does not.

The committer runs on the database thread itself and takes the queue from there:
no task on the event loop relays between writers and the thread, so a lone writer
(a sequential execution, one step after another) pays one thread hop each way.

The counts an operator watches (alarms by state, retries, executions by status,
objects) are kept in the transaction of each write (`sqlite_counts` for the alarm
rows, the counters migration's triggers for the rest) and read back after each
commit: `counters()` costs no I/O. Listings run on a second, read-only connection
(`sqlite_reads`), never on this thread.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from alarmtop.core.model.alarm_policy import AlarmKey, AlarmRecord, AlarmState, Attempt
from alarmtop.core.model.errors import CorruptDatabase, DiskFull, StorageError
from alarmtop.core.model.keys import Cursor
from alarmtop.core.ports import Counts, ObjectEntry
from alarmtop.core.storage.batches import coalesce
from alarmtop.core.storage.faultpoints import FAULT_POINTS
from alarmtop.core.storage.sqlite import counters, reads
from alarmtop.core.storage.sqlite.files import create_private, make_dirs
from alarmtop.core.storage.sqlite.schema import RUNTIME_MIGRATIONS, migrate

T = TypeVar("T")
WriteFn = Callable[[sqlite3.Connection], None]
_Entry = tuple[Sequence[AlarmRecord], Sequence[AlarmKey], WriteFn | None, "asyncio.Future[None]"]

_COLUMNS = ("object_class, object_name, scheduled_ms, state, retry_count, next_attempt_ms, "
            "last_error, attempts, started_ms, gen, hint_ms, hint_gen, in_file, attempt_count, "
            "paused_ms")
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
# are the writer's, `sqlite_counts`), so a replace is safe, and it costs a little less
# than an UPSERT of every column.
_UPSERT = (f"INSERT OR REPLACE INTO alarms ({_COLUMNS}, due_ms, urgency) VALUES ("
           + ", ".join(f"?{i}" for i in range(1, 17)) + ", "
           + _URGENCY.format(state="?4", retries="?5", next="?6") + ")")
MAX_BATCH = 20_000
BUSY_TIMEOUT_S = 5.0  # how long a write waits for a lock another connection holds
_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6
SALVAGE_TABLES = ("alarms", "executions", "operations", "history", "ledger", "audit")

_SQLITE_CORRUPT, _SQLITE_FULL, _SQLITE_NOTADB = 11, 13, 26


def sqlite_code(exc: BaseException) -> int | None:
    """SQLite's primary result code of an error (None when it carries none)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else int(code) & 0xFF


def is_corruption(exc: BaseException) -> bool:
    """The file is damaged or is not a database at all."""
    return sqlite_code(exc) in (_SQLITE_CORRUPT, _SQLITE_NOTADB)


def is_disk_full(exc: BaseException) -> bool:
    return sqlite_code(exc) == _SQLITE_FULL


def is_locked(exc: BaseException) -> bool:
    """Another connection held the lock past the busy timeout (a backup, a shell)."""
    return sqlite_code(exc) in (_SQLITE_BUSY, _SQLITE_LOCKED) or (
        isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc))


def _refused(entry: _Entry) -> None:
    """On the database thread, before the next batch: tell a write that it was not made
    (writes that depend on it, as an execution's log does, then refuse too)."""
    refused = getattr(entry[2], "refused", None)
    if refused is not None:
        refused()


def _to_row(rec: AlarmRecord) -> tuple[Any, ...]:
    attempts = json.dumps([a.to_dict() for a in rec.attempts]) if rec.attempts else None
    return (rec.object_class, rec.object_name, rec.scheduled_ms, rec.state.value,
            rec.retry_count, rec.next_attempt_ms, rec.last_error, attempts, rec.started_ms,
            rec.gen, rec.hint_ms, rec.hint_gen, 1 if rec.in_file else 0, rec.attempt_count,
            rec.paused_ms, rec.due_ms)


def _from_row(row: sqlite3.Row | tuple[Any, ...]) -> AlarmRecord:
    attempts = tuple(Attempt.from_dict(a) for a in json.loads(row[7])) if row[7] else ()
    return AlarmRecord(row[0], row[1], row[2], AlarmState(row[3]), row[4], row[5], row[6],
                       attempts, row[8], row[9], row[10], row[11], bool(row[12]), row[13],
                       row[14])


# For the operator tools' own queries of the same table (`sqlite_operator`).
ROW_COLUMNS = _COLUMNS
record_of_row = _from_row


class SqliteAlarmIndex:
    """`AlarmIndex` on one SQLite file in WAL mode with synchronous=FULL."""

    def __init__(self, path: Path, check: bool = True,
                 busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self.path = path
        self.check = check  # quick_check the file when opening it
        self.busy_timeout_s = busy_timeout_s
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="alarm-index")
        self._conn: sqlite3.Connection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # set while writes are taken
        # Shared with the database thread, under the lock: writes not yet taken, and
        # whether a drain job is queued or running (at most one is).
        self._lock = threading.Lock()
        self._queue: list[_Entry] = []
        self._draining = False
        # The counters table as of the last commit (replaced whole by the database
        # thread after each one), and its parse (made on demand, on the loop).
        self._counter_rows: list[tuple[Any, ...]] = []
        self._parsed: tuple[list[tuple[Any, ...]], Counts] | None = None
        self._reader = reads.ReadConnection(path, busy_timeout_s, self._error)
        self._states = counters.StateCache()  # on the database thread only

    async def _run(self, fn: Callable[..., T], *args: Any, doing: str = "reading") -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, fn, *args)
        except sqlite3.Error as exc:
            raise self._error(doing, exc) from exc

    def _error(self, doing: str, exc: BaseException) -> StorageError:
        """An alarmtop error naming the file, for a SQLite error met while `doing`."""
        if is_corruption(exc):
            return CorruptDatabase(
                f"the runtime database is damaged ({exc}) while {doing} it. alarmtop will not "
                "run over it: the alarms and execution logs in it would be lost. Stop the "
                "runtime and restore runtime.sqlite (with its -wal file) from a backup; or "
                "start with SqliteBackend(data_dir, on_corrupt_index='quarantine') to move it "
                "to <data>/quarantine/, salvage what is readable and carry on", str(self.path))
        if is_disk_full(exc):
            return DiskFull(f"the disk is full: {doing} the runtime database failed and "
                            "nothing of that write was kept; free space", str(self.path))
        return StorageError(f"{doing} the runtime database failed: {exc}", str(self.path))

    def _connect(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            if not self.path.exists():
                create_private(self.path)  # audit log, inputs, results: the owner's only
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                   timeout=self.busy_timeout_s)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            if self.check:
                verdict = [r[0] for r in conn.execute("PRAGMA quick_check").fetchall()]
                if verdict != ["ok"]:
                    raise CorruptDatabase(
                        f"the runtime database fails SQLite's quick_check "
                        f"({'; '.join(map(str, verdict[:3]))}). alarmtop will not run over it. "
                        "Restore runtime.sqlite from a backup, or start with "
                        "SqliteBackend(data_dir, on_corrupt_index='quarantine') to move it "
                        "aside, salvage what is readable and carry on", str(self.path))
            migrate(conn, RUNTIME_MIGRATIONS)
            self._counter_rows = reads.read_counters(conn)
        except (sqlite3.DatabaseError, StorageError) as exc:
            if conn is not None:
                conn.close()
            if isinstance(exc, StorageError):
                raise
            if is_corruption(exc) or is_disk_full(exc):
                raise self._error("opening", exc) from exc
            raise StorageError(f"cannot open the runtime database: {exc}", str(self.path)) from exc
        self._conn = conn

    def _salvage(self, source: Path) -> dict[str, Any]:
        """Copy every row that can still be read from `source` (a quarantined copy)."""
        out: dict[str, Any] = {}
        try:
            old = sqlite3.connect(f"file:{quote(str(source))}?mode=ro", uri=True)
        except sqlite3.Error as exc:
            return {"error": f"unreadable: {exc}"}
        conn = self.conn
        try:
            for table in SALVAGE_TABLES:
                rows: list[tuple[Any, ...]] = []
                try:
                    columns = self._salvaged_columns(old, table)
                    cur = old.execute(f"SELECT {', '.join(columns)} FROM {table}")
                    for row in cur:  # keep what was read before a damaged page
                        rows.append(tuple(row))
                except sqlite3.Error as exc:
                    out[f"{table}_error"] = str(exc)
                    if not rows:
                        out[table] = 0
                        continue
                marks = ",".join("?" * len(columns))
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.executemany(f"INSERT OR IGNORE INTO {table} ({', '.join(columns)}) "
                                     f"VALUES ({marks})", rows)
                    conn.execute("COMMIT")
                except sqlite3.Error as exc:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    out[f"{table}_error"] = str(exc)
                    rows = []
                out[table] = len(rows)
            # Rows from a file older than the urgency column came without it, and the
            # alarm rows were copied in behind the counters: count them again.
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(f"UPDATE alarms SET urgency = {URGENCY_SQL}")
                counters.rebuild(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            self._states.clear()
            self._counter_rows = reads.read_counters(conn)
        finally:
            old.close()
        return out

    def _salvaged_columns(self, old: sqlite3.Connection, table: str) -> list[str]:
        """The columns of `table` in the damaged file that this one can take: a column
        this file computes itself (generated) or does not have is left out."""
        have = [d[0] for d in old.execute(f"SELECT * FROM {table} LIMIT 0").description]
        # table_xinfo's `hidden`: 0 a column, 2 and 3 generated (virtual, stored).
        writable = {r[1] for r in self.conn.execute(f"PRAGMA table_xinfo({table})")
                    if r[6] == 0}
        return [c for c in have if c in writable]

    async def salvage_from(self, source: Path) -> dict[str, Any]:
        """Salvage the readable rows of a quarantined runtime database into this one
        (before the runtime starts using it); returns rows kept per table."""
        return await self._run(self._salvage, source, doing="salvaging into")

    async def open(self) -> None:
        await asyncio.to_thread(make_dirs, self.path.parent)
        await self._run(self._connect)
        await self._reader.open()
        self._loop = asyncio.get_running_loop()

    async def close(self) -> None:
        self._loop = None  # later writes fail at once instead of waiting for no writer
        with self._lock:
            dropped, self._queue = self._queue, []
        # Writes not taken yet are not made: they learn it. A batch being committed
        # finishes first (the thread runs one job at a time) and reports as usual.
        for *_, fut in dropped:
            if not fut.done():
                fut.set_exception(StorageError("the runtime database was closed before this "
                                               "write was made", str(self.path)))
        await self._reader.close()
        if self._conn is not None:
            await self._run(self._conn.close)
            self._conn = None
        self._executor.shutdown(wait=True)

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StorageError("the alarm index is not open", str(self.path))
        return self._conn

    async def write(self, puts: Sequence[AlarmRecord], deletes: Sequence[AlarmKey] = (),
                    extra: WriteFn | None = None) -> None:
        """Store records, remove keys and run `extra` (other tables of the runtime
        database), durably, sharing one commit with every concurrent writer."""
        await self.submit(puts, deletes, extra)

    def submit(self, puts: Sequence[AlarmRecord] = (), deletes: Sequence[AlarmKey] = (),
               extra: WriteFn | None = None) -> asyncio.Future[None]:
        """Queue a write now (its order among writes is fixed here); await it for durability."""
        loop = self._loop
        if loop is None:
            raise StorageError("the runtime database is not open (or already closed)",
                               str(self.path))
        fut: asyncio.Future[None] = loop.create_future()
        with self._lock:
            self._queue.append((puts, deletes, extra, fut))
            start, self._draining = not self._draining, True
        if start:
            self._executor.submit(self._drain, loop)
        return fut

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run a read on the database thread (it sees every completed write)."""
        return await self._run(lambda: fn(self.conn))

    def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the database thread: commit what is queued as one batch."""
        with self._lock:
            batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
        outcome = self._commit(batch) if batch else None
        with self._lock:
            more = self._draining = bool(self._queue)
        if more:
            # A new job rather than a loop here: reads queued meanwhile go first.
            self._executor.submit(self._drain, loop)
        if batch:
            try:
                loop.call_soon_threadsafe(self._settle, batch, outcome)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass

    def _commit(self, batch: list[_Entry]) -> list[BaseException | None] | None:
        """Apply the batch in one transaction: None when it committed, else the outcome
        of each write (one bad write must not fail its neighbours: each is retried alone)."""
        try:
            self._apply_entries(batch)
            return None
        except Exception as exc:
            if len(batch) == 1 or is_locked(exc) or is_disk_full(exc):
                # The whole database refused (locked, full): every write fails alike, and
                # trying each alone would wait out the busy timeout once per write.
                for entry in batch:
                    _refused(entry)
                return [exc] * len(batch)
        outcome: list[BaseException | None] = []
        for entry in batch:
            try:
                self._apply_entries([entry])
            except Exception as one:
                _refused(entry)
                outcome.append(one)
            else:
                outcome.append(None)
        return outcome

    def _apply_entries(self, batch: list[_Entry]) -> None:
        final, extras = coalesce(batch)
        self._apply(final, extras)

    def _settle(self, batch: list[_Entry], outcome: list[BaseException | None] | None) -> None:
        """On the event loop: tell each writer of the batch how its write went."""
        for i, (*_, fut) in enumerate(batch):
            if fut.done():
                continue
            exc = None if outcome is None else outcome[i]
            if exc is None:
                fut.set_result(None)
            else:
                fut.set_exception(exc if isinstance(exc, StorageError)
                                  else self._error("writing", exc))

    def _apply(self, final: dict[AlarmKey, AlarmRecord | None],
               extras: Sequence[WriteFn] = ()) -> None:
        conn = self.conn
        if FAULT_POINTS.active:
            FAULT_POINTS.hit("index.commit.before", keys=list(final), extras=len(extras))
        conn.execute("BEGIN IMMEDIATE")
        try:
            new = counters.new_states(final)
            if final:
                old = self._states.old_states(conn, final)
                counters.write_tally(conn, *counters.tally(old, new))
            dels = [k for k, v in final.items() if v is None]
            if dels:
                conn.executemany(
                    "DELETE FROM alarms WHERE object_class=? AND object_name=?", dels)
            puts = [_to_row(v) for v in final.values() if v is not None]
            if puts:
                conn.executemany(_UPSERT, puts)
            for fn in extras:
                fn(conn)
            conn.execute("COMMIT")
            self._states.committed(new)
            # Read back what the triggers counted (a page of a few dozen rows): readers
            # of `counters()` then see every write whose future has completed.
            self._counter_rows = reads.read_counters(conn)
        except BaseException:
            # A failed COMMIT (disk full) may already have rolled back: a second
            # ROLLBACK would replace the real error with "no transaction is active".
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if FAULT_POINTS.active:
            FAULT_POINTS.hit("index.commit.after", keys=list(final), extras=len(extras))

    def _query(self, sql: str, params: Sequence[Any]) -> list[AlarmRecord]:
        return [_from_row(r) for r in self.conn.execute(sql, params).fetchall()]

    async def get(self, key: AlarmKey) -> AlarmRecord | None:
        rows = await self._run(self._query, f"SELECT {_COLUMNS} FROM alarms "
                               "WHERE object_class=? AND object_name=?", key)
        return rows[0] if rows else None

    def _due_after(self, after_ms: float, limit: int) -> tuple[list[AlarmRecord], bool]:
        after = -(2**62) if after_ms == float("-inf") else int(after_ms)
        base = f"SELECT {_COLUMNS} FROM alarms WHERE due_ms > ?"
        rows = self._query(base + " ORDER BY due_ms LIMIT ?", (after, limit))
        if len(rows) < limit:
            return rows, True
        last = rows[-1].due_ms
        ties = self._query(base + " AND due_ms = ? ORDER BY object_class, object_name",
                           (after, last))
        seen = {r.key for r in rows}
        rows.extend(r for r in ties if r.key not in seen)
        return rows, False

    async def due_after(self, after_ms: float, limit: int) -> tuple[list[AlarmRecord], bool]:
        return await self._run(self._due_after, after_ms, limit)

    async def in_state(self, state: str, limit: int, offset: int = 0, *,
                       mine: bool = False) -> list[AlarmRecord]:
        return await self._run(self._query, f"SELECT {_COLUMNS} FROM alarms WHERE state=? "
                               "ORDER BY object_class, object_name LIMIT ? OFFSET ?",
                               (state, limit, offset))

    async def overdue(self, before_ms: int, limit: int) -> list[AlarmRecord]:
        return await self._run(self._query, f"SELECT {_COLUMNS} FROM alarms WHERE "
                               "due_ms < ? ORDER BY due_ms LIMIT ?", (before_ms, limit))

    async def page(self, limit: int, offset: int = 0, state: str | None = None,
                   contains: str | None = None) -> list[AlarmRecord]:
        return await self.alarm_page(None, limit, offset=offset, state=state,
                                     contains=contains)

    async def alarm_page(self, after: Cursor | None = None, limit: int = 50, *,
                         offset: int = 0, state: str | None = None,
                         contains: str | None = None, order: str = "urgency",
                         desc: bool = False) -> list[AlarmRecord]:
        rows = await self._reader.run(lambda conn: reads.alarm_page(
            conn, _COLUMNS, after, limit, offset=offset, state=state, contains=contains,
            order=order, desc=desc))
        return [_from_row(r) for r in rows]

    async def count(self, state: str | None = None, contains: str | None = None) -> int:
        if contains:
            return await self._reader.run(lambda conn: reads.alarm_count(conn, state, contains))
        alarms = self.counters().alarms
        return alarms.get(state, 0) if state else sum(alarms.values())

    def counters(self) -> Counts:
        rows, parsed = self._counter_rows, self._parsed
        if parsed is None or parsed[0] is not rows:
            parsed = self._parsed = (rows, reads.parse_counters(rows))
        return parsed[1]

    async def recount(self) -> Counts:
        return await self._reader.run(reads.recount)

    async def counts(self) -> dict[str, int]:
        return self.counters().by_state()

    async def retry_counts(self) -> list[tuple[str, int, int]]:
        return self.counters().retry_rows()

    async def object_page(self, after: Cursor | None = None, limit: int = 50, *,
                          offset: int = 0, contains: str | None = None,
                          desc: bool = False) -> list[ObjectEntry]:
        return await self._reader.run(lambda conn: reads.object_page(
            conn, after, limit, offset=offset, contains=contains, desc=desc))

    async def count_known(self, contains: str | None = None) -> int:
        if contains:
            return await self._reader.run(lambda conn: reads.known_count(conn, contains))
        return self.counters().known

    async def known_among(self, keys: Sequence[AlarmKey]) -> set[AlarmKey]:
        keys = list(keys)
        if not keys:
            return set()
        return await self._reader.run(lambda conn: reads.known_among(conn, keys))

    async def read_only(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run a listing on the read connection (never the writer's thread)."""
        return await self._reader.run(fn)

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
        def read(conn: sqlite3.Connection) -> list[str]:
            listed = {r[0] for r in conn.execute("SELECT DISTINCT object_class FROM objects")}
            root = self.path.parent / "objects"
            if root.is_dir():
                listed.update(p.name for p in root.iterdir() if p.is_dir())
            return sorted(listed)
        return await self.read(read)

    async def count_objects(self) -> int:
        return self.counters().stored

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
        return await self.read_only(read)

    # -- one-off upgrades of data written by older versions --------------------------------

    async def upgrade_pending(self, name: str) -> bool:
        def read(conn: sqlite3.Connection) -> bool:
            return conn.execute("SELECT 1 FROM upgrades WHERE name = ? AND at_ms IS NULL",
                                (name,)).fetchone() is not None
        return await self.read(read)

    async def run_upgrade(self, name: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` on the database thread in one transaction that also marks the
        upgrade done (`fn` may touch files first: it must be safe to run again)."""
        def run(conn: sqlite3.Connection) -> T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                out = fn(conn)
                conn.execute("UPDATE upgrades SET at_ms = ? WHERE name = ?",
                             (time.time_ns() // 1_000_000, name))
                conn.execute("COMMIT")
                self._counter_rows = reads.read_counters(conn)
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return out
        return await self._run(lambda: run(self.conn), doing="upgrading")

