"""Per-object SQLite databases on aiosqlite.

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
import os
import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiosqlite

from alarmtop.core.model.errors import (
    CorruptDatabase,
    DiskFull,
    ObjectQuarantined,
    SqlError,
    StorageError,
)
from alarmtop.core.model.storage_values import ExecResult
from alarmtop.core.storage.faultpoints import FAULT_POINTS
from alarmtop.core.storage.sqlite.compat import daemon_connection, on_thread
from alarmtop.core.storage.sqlite.database import BUSY_TIMEOUT_S
from alarmtop.core.storage.sqlite.errors import is_corruption, is_disk_full, sqlite_code
from alarmtop.core.storage.sqlite.files import create_private, fsync_dir, make_dirs
from alarmtop.core.storage.sqlite.object_sql import ObjectSqlGuard
from alarmtop.core.storage.sqlite.quarantine import Quarantine

_SQLITE_IOERR = 10

_KV_TABLE = ("CREATE TABLE IF NOT EXISTS _alarmtop_kv "
             "(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID")
# The object's alarm intent (one row) and who the database belongs to.
_INTENT_TABLE = ("CREATE TABLE IF NOT EXISTS _alarmtop_alarm (one INTEGER PRIMARY KEY "
                 "CHECK (one = 1), gen INTEGER NOT NULL, at_ms INTEGER)")
_META_TABLE = ("CREATE TABLE IF NOT EXISTS _alarmtop_meta "
               "(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID")
_OWN_TABLES = ("_alarmtop_alarm", "_alarmtop_meta")  # kept by delete_all()
_PUT_INTENT = "INSERT OR REPLACE INTO _alarmtop_alarm (one, gen, at_ms) VALUES (1, ?, ?)"



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
        self._sql_guard = ObjectSqlGuard()

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
            conn = daemon_connection(path, busy_timeout_s)
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
        """The object's own statement, behind its walls (`object_sql.py`)."""
        guard = self._sql_guard
        args = tuple(params)
        try:
            async with self._guard("a SQL statement", sql):
                rows, columns, changed = await on_thread(
                    self._conn, lambda conn: guard.run(conn, sql, args))
        except SqlError as exc:
            if guard.refused is not None:
                raise SqlError(f"{guard.refused} (in: {sql[:200]})", self.path) from exc
            raise
        # The description names the columns even when no row came back.
        return ExecResult(columns, [dict(r) for r in rows], changed)

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
