"""Per-object SQLite databases on aiosqlite, and the SQLite storage backend.

Each object gets its own file, opened only when the object first touches its
storage and closed when it hibernates, so a sleeping object holds no file or
thread. Files are WAL with synchronous=FULL: a commit is on disk when it returns.

Damage is never papered over. A new object's file is created under a temporary
name and renamed into place once initialised, so a file that is empty, not a
database, or fails SQLite's quick check is damaged, never "new". A damaged file
is moved to `<data>/quarantine/` (with a JSON note and a log record) and the
object refuses events (`ObjectQuarantined`) until an operator restores a good
copy or deletes the note; every other object keeps working. A full disk fails
the event that hit it (`DiskFull`), undoing that event's writes only.

`runtime.sqlite` (alarms and execution logs) is checked at start: when it is
damaged, or missing while the folder holds alarmtop data, `start()` refuses with
`CorruptDatabase` unless the backend was built with `on_corrupt_index="quarantine"`
(move it aside, salvage the readable rows into a fresh one, carry on).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import glob
import json
import logging
import os
import socket
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiosqlite

from alarmtop.core.kernel.logs import log_event
from alarmtop.core.model.errors import (
    CorruptDatabase,
    DiskFull,
    InvalidArgument,
    ObjectQuarantined,
    SqlError,
    StorageError,
)
from alarmtop.core.model.object_names import (
    DIGEST_NAME,
    legacy_object_file_name,
    name_of_file,
    object_file_name,
)
from alarmtop.core.ports import ExecResult
from alarmtop.core.storage.faultpoints import FAULT_POINTS
from alarmtop.core.storage.sqlite.database import (
    BUSY_TIMEOUT_S,
    SqliteAlarmIndex,
    is_corruption,
    is_disk_full,
    sqlite_code,
)
from alarmtop.core.storage.sqlite.execution_log import SqliteExecutionStore
from alarmtop.core.storage.sqlite.files import create_private, fsync_dir, make_dirs

STORAGE_LOG = logging.getLogger("alarmtop.storage")
_SQLITE_IOERR = 10
MARKER = ".alarmtop"  # in the data folder: "this folder holds alarmtop data"
CORRUPT_INDEX_MODES = ("fail", "quarantine")

_KV_TABLE = ("CREATE TABLE IF NOT EXISTS _alarmtop_kv "
             "(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID")
# The object's alarm intent (one row) and who the database belongs to.
_INTENT_TABLE = ("CREATE TABLE IF NOT EXISTS _alarmtop_alarm (one INTEGER PRIMARY KEY "
                 "CHECK (one = 1), gen INTEGER NOT NULL, at_ms INTEGER)")
_META_TABLE = ("CREATE TABLE IF NOT EXISTS _alarmtop_meta "
               "(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID")
_OWN_TABLES = ("_alarmtop_alarm", "_alarmtop_meta")  # kept by delete_all()
_PUT_INTENT = "INSERT OR REPLACE INTO _alarmtop_alarm (one, gen, at_ms) VALUES (1, ?, ?)"


def _wall_ms() -> int:
    # Quarantine file names are read by people next to `ls -l` and the logs, so they
    # carry wall-clock time unless the runtime passes its own clock.
    return time.time_ns() // 1_000_000


class Quarantine:
    """`<data>/quarantine/`: damaged databases moved aside, each with a JSON note.

    `records` lists what this process quarantined; `listeners` are called with each
    record (the runtime can turn them into events)."""

    def __init__(self, data_dir: Path, now_ms: Callable[[], int] = _wall_ms) -> None:
        self.data_dir = data_dir
        self.root = data_dir / "quarantine"
        self._now_ms = now_ms
        self.records: list[dict[str, Any]] = []
        self.listeners: list[Callable[[dict[str, Any]], None]] = []

    def _place(self, path: Path) -> Path:
        try:
            rel = path.relative_to(self.data_dir)
        except ValueError:
            rel = Path(path.name)
        return self.root / rel

    def move(self, path: Path, reason: str, what: str) -> Path:
        """Move `path` (and its -wal/-shm files) into quarantine; returns the new path."""
        now = self._now_ms()
        stamp = datetime.fromtimestamp(now / 1000, UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        base = self._place(path)
        dest, n = base.with_name(f"{base.name}.{stamp}"), 1
        while dest.exists() or Path(f"{dest}.json").exists():
            dest, n = base.with_name(f"{base.name}.{stamp}-{n}"), n + 1
        make_dirs(dest.parent)
        for suffix in ("", "-wal", "-shm"):
            src = Path(f"{path}{suffix}")
            if src.exists():
                os.replace(src, f"{dest}{suffix}")
        info = {"event": "storage.quarantined", "what": what, "file": str(path),
                "quarantined_to": str(dest), "reason": reason, "at_ms": now}
        note = Path(f"{dest}.json")
        create_private(note)
        with note.open("w") as f:
            json.dump(info, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(dest.parent)
        fsync_dir(path.parent)
        self.records.append(info)
        # The caller's error says what to do, but only to the caller: the log line is
        # what an operator sees, so it says it too.
        obj = what.startswith("object")
        then = (f"; the object refuses events until a good copy is restored to {path} (or "
                f"the note {dest}.json is deleted to let it start empty)" if obj else "")
        log_event(STORAGE_LOG, logging.ERROR, f"the {'database of ' if obj else ''}{what} is "
                  f"damaged ({reason}): {path} moved to {dest}{then}", **info)
        for listener in list(self.listeners):
            try:
                listener(info)
            except Exception:  # a broken listener must not hide the quarantine
                STORAGE_LOG.exception("quarantine listener failed")
        return dest

    def notes_for(self, path: Path) -> list[Path]:
        """The quarantine notes left for the database that lived at `path`."""
        place = self._place(path)
        if not place.parent.is_dir():
            return []
        return sorted(place.parent.glob(glob.escape(place.name) + ".*.json"))


class _Damaged(Exception):
    """A file found damaged by our own checks (empty, failed quick_check)."""


def _create_database(path: Path, key: tuple[str, str], intent: tuple[int, int | None]) -> None:
    """Create an object's database under a temporary name, then rename it into place:
    a file at the object's path is always an initialised database, holding the
    object's alarm intent and its real name from the start."""
    make_dirs(path.parent)
    tmp = path.with_name(path.name + ".new")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{tmp}{suffix}").unlink(missing_ok=True)
    try:
        create_private(tmp)
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("BEGIN")
            _init_tables(conn, key, intent)
            conn.execute("COMMIT")
        finally:
            conn.close()
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{tmp}{suffix}").unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def _init_tables(conn: sqlite3.Connection, key: tuple[str, str],
                 intent: tuple[int, int | None]) -> None:
    conn.execute(_KV_TABLE)
    conn.execute(_INTENT_TABLE)
    conn.execute(_META_TABLE)
    conn.execute(_PUT_INTENT, intent)
    conn.executemany("INSERT OR REPLACE INTO _alarmtop_meta (key, value) VALUES (?, ?)",
                     [("class", key[0]), ("name", key[1])])


def _prepare(path: Path, quarantine: Quarantine, key: tuple[str, str], create: bool,
             intent: tuple[int, int | None]) -> bool | None:
    """Create a new object's file (True), refuse a quarantined one, catch an empty one;
    None when there is no file and `create` is false."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        notes = quarantine.notes_for(path)
        if notes:
            raise ObjectQuarantined(key[0], key[1], str(path), [str(n) for n in notes]) from None
        if not create:
            return None
        _create_database(path, key, intent)
        return True
    if size == 0:
        raise _Damaged("the file is empty (truncated to zero bytes)")
    return False


async def _close_quietly(conn: aiosqlite.Connection | None) -> None:
    """Close a connection whatever state it is in, even while being cancelled."""
    if conn is None:
        return
    try:
        await asyncio.shield(conn.close())
    except (Exception, asyncio.CancelledError):
        conn.stop()  # at least end its thread


def _connection(path: Path, busy_timeout_s: float) -> aiosqlite.Connection:
    """An aiosqlite connection whose thread never holds the interpreter open.

    aiosqlite runs each connection on a non-daemon thread, so a script that raises
    after `runtime.start()` without `stop()` would never exit. A daemon thread
    dies with the process exactly as a crash would stop it, which the runtime
    recovers from. (aiosqlite has no option for this; the thread is set before it
    starts, the one reach into aiosqlite, tested in tests/core/test_exit.py.)"""
    conn = aiosqlite.connect(path, isolation_level=None, timeout=busy_timeout_s)
    conn._thread.daemon = True
    return conn


async def _read_intent(conn: aiosqlite.Connection) -> tuple[int, int | None] | None:
    try:
        rows = list(await conn.execute_fetchall("SELECT gen, at_ms FROM _alarmtop_alarm"))
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return None
        raise
    return (int(rows[0][0]), rows[0][1]) if rows else None


class SqliteObjectStore:
    """`ObjectStore` for one object's file."""

    def __init__(self, path: Path, conn: aiosqlite.Connection, quarantine: Quarantine,
                 key: tuple[str, str], intent: tuple[int, int | None]) -> None:
        self.path = str(path)
        self._conn = conn
        self._quarantine = quarantine
        self._key = key
        self._intent = intent  # as committed in this file
        self._broken: StorageError | None = None  # quarantined: nothing works any more
        self._failed: StorageError | None = None  # this event hit a full disk or I/O error
        self._pending_intent: tuple[int, int | None] | None = None  # written, not committed

    @property
    def _label(self) -> str:
        return f"{self._key[0]}/{self._key[1]}"

    @classmethod
    async def open(cls, path: Path, quarantine: Quarantine | None = None, *,
                   key: tuple[str, str] = ("?", "?"), check: bool = True, create: bool = True,
                   intent: tuple[int, int | None] = (0, None),
                   busy_timeout_s: float = BUSY_TIMEOUT_S) -> SqliteObjectStore | None:
        """Open (or, with `create`, create) the database at `path`; a damaged one goes to
        quarantine. None when there is none and `create` is false. `intent` is written
        into a database that holds none (a new one, or one from before intents)."""
        quarantine = quarantine or Quarantine(path.parent)
        conn: aiosqlite.Connection | None = None
        try:
            created = await asyncio.to_thread(_prepare, path, quarantine, key, create, intent)
            if created is None:
                return None
            conn = _connection(path, busy_timeout_s)
            await conn  # starts its thread and connects
            conn.row_factory = sqlite3.Row
            await conn.execute("PRAGMA journal_mode=WAL")
            await conn.execute("PRAGMA synchronous=FULL")
            if check and not created:
                rows = await conn.execute_fetchall("PRAGMA quick_check")
                verdict = [r[0] for r in rows]
                if verdict != ["ok"]:
                    raise _Damaged(f"quick_check: {'; '.join(map(str, verdict[:3]))}")
            found = await _read_intent(conn)
            if found is None:
                # Written before the intent lived here: the row's intent moves in.
                await conn.execute("BEGIN")
                await conn.execute(_KV_TABLE)
                await conn.execute(_INTENT_TABLE)
                await conn.execute(_META_TABLE)
                await conn.execute(_PUT_INTENT, intent)
                await conn.executemany(
                    "INSERT OR REPLACE INTO _alarmtop_meta (key, value) VALUES (?, ?)",
                    [("class", key[0]), ("name", key[1])])
                await conn.execute("COMMIT")
                found = intent
        except BaseException as exc:
            # Any exit, cancellation included, closes what was opened.
            await _close_quietly(conn)
            if not isinstance(exc, (_Damaged, sqlite3.DatabaseError, OSError)):
                raise
            return await cls._failed_open(exc, path, quarantine, key)
        return cls(path, conn, quarantine, key, found)

    @staticmethod
    async def _failed_open(exc: BaseException, path: Path, quarantine: Quarantine,
                           key: tuple[str, str]) -> SqliteObjectStore:
        """Raise the alarmtop error for a failed open (quarantining a damaged file)."""
        if isinstance(exc, OSError):
            kind = DiskFull if exc.errno == errno.ENOSPC else StorageError
            raise kind(f"cannot open object database: {exc}", str(path)) from exc
        if isinstance(exc, sqlite3.DatabaseError) and not is_corruption(exc):
            if is_disk_full(exc):
                raise DiskFull(f"cannot open the database of {key[0]}/{key[1]}: the disk "
                               "is full", str(path)) from exc
            raise StorageError(f"cannot open object database: {exc}", str(path)) from exc
        reason = str(exc)
        dest = await asyncio.to_thread(quarantine.move, path, reason, f"object {key[0]}/{key[1]}")
        raise CorruptDatabase(
            f"the database of {key[0]}/{key[1]} is damaged ({reason}); it was moved to "
            f"{dest}. The object refuses events until a good copy is restored to {path} "
            f"(or the note {dest}.json is deleted to let it start empty); other objects "
            "are not affected", str(path), str(dest)) from exc

    # -- errors ---------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _guard(self, doing: str, sql: str | None = None) -> AsyncIterator[None]:
        """Turn SQLite errors into alarmtop's: damage quarantines, a full disk fails the
        event (its writes undone), the rest are SQL or storage errors naming the file."""
        if self._broken is not None:
            raise self._broken
        if self._failed is not None:
            raise self._failed
        try:
            yield
        except sqlite3.Error as exc:
            raise await self._classify(exc, doing, sql) from exc

    async def _classify(self, exc: sqlite3.Error, doing: str, sql: str | None) -> StorageError:
        if is_corruption(exc):
            await _close_quietly(self._conn)
            dest = await asyncio.to_thread(self._quarantine.move, Path(self.path),
                                           f"{doing}: {exc}", f"object {self._label}")
            self._broken = CorruptDatabase(
                f"the database of {self._label} is damaged ({exc}, while {doing}); it was moved "
                f"to {dest}. The object refuses events until a good copy is restored to "
                f"{self.path}", self.path, str(dest))
            return self._broken
        if is_disk_full(exc) or sqlite_code(exc) == _SQLITE_IOERR:
            await self._rollback_quietly()
            cause = "the disk is full" if is_disk_full(exc) else f"I/O error ({exc})"
            message = (f"{cause}: {doing} for {self._label} failed; this event's writes were "
                       "undone and the event fails (earlier events are intact)")
            self._failed = (DiskFull if is_disk_full(exc) else StorageError)(message, self.path)
            return self._failed
        if sql is not None:
            return SqlError(f"{exc} (in: {sql[:200]})", self.path)
        return StorageError(f"{doing} failed: {exc}", self.path)

    async def _rollback_quietly(self) -> None:
        with contextlib.suppress(Exception):  # closed (quarantined) or already rolled back
            if self._conn.in_transaction:
                await self._conn.execute("ROLLBACK")

    # -- the ObjectStore protocol ---------------------------------------------------------

    async def exec(self, sql: str, params: Sequence[Any]) -> ExecResult:
        async with self._guard("a SQL statement", sql):
            before = self._conn.total_changes
            cursor = await self._conn.execute(sql, tuple(params))
            rows = await cursor.fetchall()
        changed = self._conn.total_changes - before
        dict_rows = [dict(r) for r in rows]
        # The description names the columns even when no row came back.
        columns = tuple(d[0] for d in cursor.description or ())
        return ExecResult(columns, dict_rows, changed)

    async def kv_get(self, keys: Sequence[str]) -> dict[str, str]:
        marks = ",".join("?" * len(keys))
        async with self._guard("reading keys"):
            rows = await self._conn.execute_fetchall(
                f"SELECT key, value FROM _alarmtop_kv WHERE key IN ({marks})", tuple(keys))
        return {r[0]: r[1] for r in rows}

    async def kv_put(self, items: Sequence[tuple[str, str]]) -> None:
        async with self._guard("writing keys"):
            await self._conn.executemany(
                "INSERT OR REPLACE INTO _alarmtop_kv (key, value) VALUES (?, ?)", items)

    async def kv_delete(self, keys: Sequence[str]) -> int:
        async with self._guard("deleting keys"):
            before = self._conn.total_changes
            await self._conn.executemany("DELETE FROM _alarmtop_kv WHERE key = ?",
                                         [(k,) for k in keys])
        return self._conn.total_changes - before

    async def kv_list(self, prefix: str, limit: int | None) -> list[tuple[str, str]]:
        # A range scan rather than LIKE: keys may contain '%' and '_'.
        sql = "SELECT key, value FROM _alarmtop_kv WHERE key >= ?"
        params: list[Any] = [prefix]
        if prefix:
            sql += " AND key < ?"
            params.append(prefix[:-1] + chr(ord(prefix[-1]) + 1))
        sql += " ORDER BY key"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        async with self._guard("listing keys"):
            rows = await self._conn.execute_fetchall(sql, params)
        return [(r[0], r[1]) for r in rows]

    async def begin(self) -> None:
        async with self._guard("beginning a transaction"):
            if not self._conn.in_transaction:
                await self._conn.execute("BEGIN")

    async def savepoint(self, name: str) -> None:
        async with self._guard("opening a transaction()"):
            await self._conn.execute(f"SAVEPOINT {name}")

    async def release(self, name: str) -> None:
        async with self._guard("ending a transaction()"):
            await self._conn.execute(f"RELEASE {name}")

    async def rollback_to(self, name: str) -> None:
        if self._broken is not None or self._failed is not None or not self._conn.in_transaction:
            return  # the event already failed and its writes were undone
        async with self._guard("undoing a transaction()"):
            await self._conn.execute(f"ROLLBACK TO {name}")
            await self._conn.execute(f"RELEASE {name}")

    async def read_intent(self) -> tuple[int, int | None]:
        """The alarm intent as committed in this database."""
        return self._intent

    async def write_intent(self, gen: int, at_ms: int | None) -> None:
        """Write the intent in the event's transaction (durable with its commit)."""
        await self.begin()
        async with self._guard("writing the alarm"):
            await self._conn.execute(_PUT_INTENT, (gen, at_ms))
        self._pending_intent = (gen, at_ms)

    async def commit(self) -> None:
        """End the event: make its writes durable, or report why they were not kept.
        Either way the next event starts clean: a failed commit rolls back."""
        failed, self._failed = self._failed, None
        pending, self._pending_intent = self._pending_intent, None
        if failed is not None:
            await self._rollback_quietly()
            raise failed
        if FAULT_POINTS.active:
            await self._fault_point("object.commit.before")
        try:
            async with self._guard("committing"):
                if self._conn.in_transaction:
                    await self._conn.execute("COMMIT")
        except BaseException:
            await self._rollback_quietly()
            raise
        finally:
            self._failed = None
        if pending is not None:
            self._intent = pending
        if FAULT_POINTS.active:
            await self._fault_point("object.commit.after")

    async def _fault_point(self, point: str) -> None:
        try:
            FAULT_POINTS.hit(point, key=self._key)
        except sqlite3.Error as exc:
            await self._rollback_quietly()
            self._pending_intent = None
            raise await self._classify(exc, "committing", None) from exc

    async def rollback(self) -> None:
        """Undo the event's writes (a write it depended on failed)."""
        self._failed = self._pending_intent = None
        await self._rollback_quietly()

    async def destroy(self) -> None:
        """Drop every table and key the object made; its alarm intent and the record of
        whose database this is stay (the alarm goes by `delete_alarm`, if at all)."""
        async with self._guard("deleting all data"):
            rows = await self._conn.execute_fetchall(
                "SELECT type, name FROM sqlite_master WHERE type IN ('table', 'view') "
                "AND name NOT LIKE 'sqlite_%'")
            for kind, name in rows:
                if name not in _OWN_TABLES:
                    await self._conn.execute(f'DROP {kind.upper()} IF EXISTS "{name}"')
            await self._conn.execute(_KV_TABLE)

    async def close(self) -> None:
        if self._broken is None:
            await self._conn.close()


class SqliteBackend:
    """The embedded default: `runtime.sqlite` for the alarm index, a file per object."""

    def __init__(self, data_dir: Path, *, on_corrupt_index: str = "fail",
                 check_on_open: bool = True, now_ms: Callable[[], int] | None = None,
                 busy_timeout_s: float = BUSY_TIMEOUT_S, node_id: str | None = None) -> None:
        """`on_corrupt_index`: what `open()` does when runtime.sqlite is damaged, or missing
        while the folder holds alarmtop data: "fail" (the default) raises
        `CorruptDatabase` and changes nothing; "quarantine" moves it to
        `<data>/quarantine/`, salvages the readable rows into a fresh one and carries
        on (an explicit operator decision: what could not be read is lost).

        `check_on_open` runs SQLite's quick_check on every database it opens, so damage
        is found before the object reads half its data. `now_ms` stamps quarantined
        files (the wall clock by default). `busy_timeout_s`: how long a write waits for a
        lock another connection holds (a backup, a `sqlite3` shell) before it fails.

        `node_id` names this runtime in the audit log's `node` column and in
        `Runtime.nodes()`: `host-pid` by default, as a fleet node's is, so rows written
        before and after a restart say which process ran each command."""
        if on_corrupt_index not in CORRUPT_INDEX_MODES:
            raise InvalidArgument(f"on_corrupt_index is one of {CORRUPT_INDEX_MODES}, not "
                                  f"{on_corrupt_index!r}")
        self.data_dir = Path(data_dir)
        self.on_corrupt_index = on_corrupt_index
        self.check_on_open = check_on_open
        self.busy_timeout_s = busy_timeout_s
        self.quarantine = Quarantine(self.data_dir, now_ms or _wall_ms)
        self._index = SqliteAlarmIndex(self.data_dir / "runtime.sqlite", check=check_on_open,
                                       busy_timeout_s=busy_timeout_s)
        self.node_id = node_id or f"{socket.gethostname()}-{os.getpid()}"
        self._executions = SqliteExecutionStore(self._index, self.node_id)
        self.salvaged: dict[str, Any] | None = None  # what a quarantine-and-continue kept

    @property
    def alarm_index(self) -> SqliteAlarmIndex:
        return self._index

    @property
    def execution_store(self) -> SqliteExecutionStore:
        return self._executions

    async def open(self) -> None:
        await asyncio.to_thread(make_dirs, self.data_dir)
        quarantined: Path | None = None
        try:
            await asyncio.to_thread(self._check_index_file)
            await self._index.open()
        except CorruptDatabase as exc:
            if self.on_corrupt_index != "quarantine":
                raise
            # The error's advice (restore, or choose quarantine) is moot here: say the cause.
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            log_event(STORAGE_LOG, logging.ERROR, f"the runtime database {self._index.path} "
                      f"cannot be used ({cause}); quarantining it and salvaging what can be "
                      "read, as on_corrupt_index='quarantine' asks",
                      event="storage.index_damaged", file=str(self._index.path), error=str(exc))
            if self._index.path.exists():
                quarantined = await asyncio.to_thread(
                    self.quarantine.move, self._index.path, str(cause), "runtime database")
            await self._index.open()
        if quarantined is not None:
            self.salvaged = await self._index.salvage_from(quarantined)
            kept = ", ".join(f"{k}: {v}" for k, v in self.salvaged.items())
            log_event(STORAGE_LOG, logging.WARNING, "rows salvaged from the quarantined runtime "
                      f"database {quarantined}, per table: {kept}",
                      event="storage.salvaged", source=str(quarantined),
                      **self.salvaged)
        await asyncio.to_thread(self._write_marker)
        if await self._index.upgrade_pending("object-files-v2"):
            upgraded = await self._index.run_upgrade("object-files-v2", self._upgrade_files)
            if upgraded["listed"] or upgraded["renamed"] or upgraded["unknown_names"]:
                log_event(STORAGE_LOG, logging.INFO, f"object files upgraded: "
                          f"{upgraded['renamed']} renamed, {upgraded['listed']} listed",
                          event="storage.upgraded", **upgraded)

    def _has_data(self) -> str | None:
        """Why the folder is known to hold alarmtop data (None: it is new)."""
        if (self.data_dir / MARKER).exists():
            return f"the marker {self.data_dir / MARKER} is there"
        root = self.data_dir / "objects"
        if root.is_dir():
            for cls_dir in root.iterdir():
                if cls_dir.is_dir() and any(p.name.endswith(".sqlite")
                                            for p in cls_dir.iterdir()):
                    return f"object databases exist under {root}"
        return None

    def _check_index_file(self) -> None:
        """Never start empty over existing data: runtime.sqlite must be there and not empty
        once the folder holds alarmtop data."""
        path = self._index.path
        size = path.stat().st_size if path.exists() else None
        if size:
            return
        why = self._has_data()
        if why is None:
            return
        state = "missing" if size is None else "empty (zero bytes)"
        raise CorruptDatabase(
            f"the runtime database {path} is {state}, but {self.data_dir} holds alarmtop data "
            f"({why}). Starting would silently lose every alarm and execution log. Restore "
            f"runtime.sqlite (with its -wal file, if any) from a backup; or, to start with an "
            f"empty alarm index and keep the object databases, open the runtime with "
            f"SqliteBackend(data_dir, on_corrupt_index='quarantine')", str(path))

    def _write_marker(self) -> None:
        marker = self.data_dir / MARKER
        if marker.exists():
            return
        tmp = marker.with_name(MARKER + ".new")
        tmp.write_text(json.dumps({"alarmtop": "data folder", "format": 1}) + "\n")
        os.replace(tmp, marker)
        fsync_dir(self.data_dir)

    async def close(self) -> None:
        await self._index.close()

    def object_path(self, object_class: str, object_name: str) -> Path:
        return self.data_dir / "objects" / object_class / object_file_name(object_name)

    async def open_object(self, object_class: str, object_name: str, create: bool = True,
                          intent: tuple[int, int | None] = (0, None)
                          ) -> SqliteObjectStore | None:
        """The object's database; None when it has none and `create` is false."""
        return await SqliteObjectStore.open(self.object_path(object_class, object_name),
                                            self.quarantine, key=(object_class, object_name),
                                            check=self.check_on_open, create=create,
                                            intent=intent, busy_timeout_s=self.busy_timeout_s)

    async def count_objects(self) -> int:
        return await self._index.count_objects()

    async def list_objects(self, limit: int, offset: int = 0,
                           contains: str | None = None) -> list[tuple[str, str]]:
        return await self._index.list_objects(limit, offset, contains)

    # -- upgrading a data dir written by alarmtop 0.1 --------------------------------------

    def _upgrade_files(self, conn: sqlite3.Connection) -> dict[str, Any]:
        """On the database thread, once: rename object files to names no two objects can
        share, list every object that has one, and mark their alarm rows `in_file`.

        Names are decoded from the files; a long name's file (ending in a digest) is
        matched against the names the runtime knows (alarms, executions). Renames are
        idempotent, so a crash halfway is finished by the next start."""
        root = self.data_dir / "objects"
        listed: list[tuple[str, str, str]] = []
        renamed = unknown = 0
        if root.is_dir():
            known: dict[str, list[str]] = {}
            for cls, name in conn.execute("SELECT object_class, object_name FROM alarms"):
                known.setdefault(cls, []).append(name)
            known.setdefault("Execution", []).extend(
                r[0] for r in conn.execute("SELECT id FROM executions"))
            for cls_dir in sorted(p for p in root.iterdir() if p.is_dir()):
                by_old = {legacy_object_file_name(n): n for n in known.get(cls_dir.name, [])}
                for entry in sorted(os.listdir(cls_dir)):
                    if not entry.endswith(".sqlite"):
                        continue
                    stem = entry[:-len(".sqlite")]
                    real = by_old.get(entry)
                    if real is None and not DIGEST_NAME.match(stem):
                        real = name_of_file(stem)
                    if real is not None:
                        new = object_file_name(real)
                    else:  # a long name nobody names any more: keep its digest, fix its prefix
                        match = DIGEST_NAME.match(stem)
                        assert match is not None
                        new = f"{match[1].replace('~', '%7E')[:100]}~{match[2]}.sqlite"
                        unknown += 1
                    if new != entry and not (cls_dir / new).exists():
                        for suffix in ("", "-wal", "-shm"):
                            src = cls_dir / f"{entry}{suffix}"
                            if src.exists():
                                os.replace(src, cls_dir / f"{new}{suffix}")
                        renamed += 1
                    if real is not None:
                        listed.append((cls_dir.name, real, new))
                fsync_dir(cls_dir)
        now = _wall_ms()
        conn.executemany("INSERT OR IGNORE INTO objects (object_class, object_name, file, "
                         "created_ms) VALUES (?, ?, ?, ?)",
                         [(c, n, f, now) for c, n, f in listed])
        conn.executemany("UPDATE alarms SET in_file = 1 WHERE object_class = ? AND "
                         "object_name = ?", [(c, n) for c, n, _ in listed])
        return {"renamed": renamed, "listed": len(listed), "unknown_names": unknown}
