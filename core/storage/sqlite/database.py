"""The runtime database on SQLite: one file, one writer thread, group commit.

Concurrent writers hand their changes to one committer; it applies everything
queued in one transaction and one fsync, then wakes all of them. One commit per
alarm would cap firing at the fsync rate; a shared commit does not.

The committer runs on the database thread itself and takes the queue from there:
no task on the event loop relays between writers and the thread, so a lone writer
(a sequential execution, one step after another) pays one thread hop each way.

This module knows no table. What a batch's keyed rows are and how they are
written, the schema, and what is read back after each commit (the counters) are
the `SqliteLayout` it is built with (`alarm_rows.AlarmRowWriter`). Listings run on
a second, read-only connection (`reads.ReadConnection`), never on this thread.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, TypeVar

from alarmtop.core.model.alarm_policy import AlarmKey, AlarmRecord
from alarmtop.core.model.errors import CorruptDatabase, StorageError
from alarmtop.core.storage.batches import coalesce, settle
from alarmtop.core.storage.faultpoints import FAULT_POINTS
from alarmtop.core.storage.sqlite.errors import (
    is_corruption,
    is_disk_full,
    is_locked,
    runtime_database_error,
)
from alarmtop.core.storage.sqlite.files import create_private, make_dirs
from alarmtop.core.storage.sqlite.reads import ReadConnection

T = TypeVar("T")
WriteFn = Callable[[sqlite3.Connection], None]
_Entry = tuple[Sequence[AlarmRecord], Sequence[AlarmKey], WriteFn | None, "asyncio.Future[None]"]
MAX_BATCH = 20_000
BUSY_TIMEOUT_S = 5.0  # how long a write waits for a lock another connection holds


class SqliteLayout(Protocol):
    """What the runtime database's tables are, for the one writer that commits them."""

    def migrate(self, conn: sqlite3.Connection) -> None:
        """Bring the schema up to date (on open, on the writer's thread)."""
        ...

    def write_rows(self, conn: sqlite3.Connection,
                   final: Mapping[AlarmKey, AlarmRecord | None]) -> Callable[[], None] | None:
        """Write a batch's keyed rows (the last change of each key) in the open
        transaction; returns what to do once it has committed (or None)."""
        ...

    def committed(self, conn: sqlite3.Connection) -> None:
        """After every commit and on open, on the writer's thread (read back what the
        commit changed that readers on the loop keep, such as the counters)."""
        ...


def _refused(entry: _Entry) -> None:
    """On the database thread, before the next batch: tell a write that it was not made
    (writes that depend on it, as an execution's log does, then refuse too)."""
    refused = getattr(entry[2], "refused", None)
    if refused is not None:
        refused()


class SqliteDatabase:
    """`RuntimeDatabase` on one SQLite file in WAL mode with synchronous=FULL."""

    def __init__(self, file: Path, layout: SqliteLayout, *, check: bool = True,
                 busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self.file = file
        self.path = str(file)
        self.layout = layout
        self.check = check  # quick_check the file when opening it
        self.busy_timeout_s = busy_timeout_s
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="runtime-db")
        self._conn: sqlite3.Connection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # set while writes are taken
        # Shared with the database thread, under the lock: writes not yet taken, and
        # whether a drain job is queued or running (at most one is).
        self._lock = threading.Lock()
        self._queue: list[_Entry] = []
        self._draining = False
        self._reader = ReadConnection(file, busy_timeout_s, self.error)

    def error(self, doing: str, exc: BaseException) -> StorageError:
        """An alarmtop error naming this database, for a SQLite error met while `doing`."""
        return runtime_database_error(self.path, doing, exc)

    async def run(self, fn: Callable[..., T], *args: Any, doing: str = "reading") -> T:
        """`fn(*args)` on the database thread, in order with the writes."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, fn, *args)
        except sqlite3.Error as exc:
            raise self.error(doing, exc) from exc

    def _connect(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            if not self.file.exists():
                create_private(self.file)  # audit log, inputs, results: the owner's only
            conn = sqlite3.connect(self.file, isolation_level=None, check_same_thread=False,
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
                        "aside, salvage what is readable and carry on", self.path)
            self.layout.migrate(conn)
            self.layout.committed(conn)
        except (sqlite3.DatabaseError, StorageError) as exc:
            if conn is not None:
                conn.close()
            if isinstance(exc, StorageError):
                raise
            if is_corruption(exc) or is_disk_full(exc):
                raise self.error("opening", exc) from exc
            raise StorageError(f"cannot open the runtime database: {exc}", self.path) from exc
        self._conn = conn

    async def open(self) -> None:
        await asyncio.to_thread(make_dirs, self.file.parent)
        await self.run(self._connect)
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
                                               "write was made", self.path))
        await self._reader.close()
        if self._conn is not None:
            await self.run(self._conn.close)
            self._conn = None
        self._executor.shutdown(wait=True)

    @property
    def conn(self) -> sqlite3.Connection:
        """The writer's connection: only ever used on the database thread."""
        if self._conn is None:
            raise StorageError("the runtime database is not open", self.path)
        return self._conn

    # -- writes ---------------------------------------------------------------------------

    async def write(self, puts: Sequence[AlarmRecord], deletes: Sequence[AlarmKey] = (),
                    extra: WriteFn | None = None) -> None:
        await self.submit(puts, deletes, extra)

    def submit(self, puts: Sequence[AlarmRecord] = (), deletes: Sequence[AlarmKey] = (),
               extra: WriteFn | None = None) -> asyncio.Future[None]:
        loop = self._loop
        if loop is None:
            raise StorageError("the runtime database is not open (or already closed)",
                               self.path)
        fut: asyncio.Future[None] = loop.create_future()
        with self._lock:
            self._queue.append((puts, deletes, extra, fut))
            start, self._draining = not self._draining, True
        if start:
            self._executor.submit(self._drain, loop)
        return fut

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
            self._apply(batch)
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
                self._apply([entry])
            except Exception as one:
                _refused(entry)
                outcome.append(one)
            else:
                outcome.append(None)
        return outcome

    def _settle(self, batch: list[_Entry], outcome: list[BaseException | None] | None) -> None:
        """On the event loop: tell each writer of the batch how its write went."""
        settle([fut for *_, fut in batch], outcome, lambda exc: self.error("writing", exc))

    def _apply(self, batch: list[_Entry]) -> None:
        final, extras = coalesce(batch)
        conn = self.conn
        if FAULT_POINTS.active:
            FAULT_POINTS.hit("index.commit.before", keys=list(final), extras=len(extras))
        conn.execute("BEGIN IMMEDIATE")
        try:
            landed = self.layout.write_rows(conn, final) if final else None
            for fn in extras:
                fn(conn)
            conn.execute("COMMIT")
            if landed is not None:
                landed()
            # Read back what readers on the loop keep (the counters): they then see
            # every write whose future has completed.
            self.layout.committed(conn)
        except BaseException:
            # A failed COMMIT (disk full) may already have rolled back: a second
            # ROLLBACK would replace the real error with "no transaction is active".
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if FAULT_POINTS.active:
            FAULT_POINTS.hit("index.commit.after", keys=list(final), extras=len(extras))

    async def transaction(self, fn: Callable[[sqlite3.Connection], T], *,
                          doing: str = "writing") -> T:
        """`fn(conn)` in one transaction of its own on the database thread, in order
        with the writes (a one-off upgrade, say)."""
        def run(conn: sqlite3.Connection) -> T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                out = fn(conn)
                conn.execute("COMMIT")
                self.layout.committed(conn)
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return out
        return await self.run(lambda: run(self.conn), doing=doing)

    # -- reads ----------------------------------------------------------------------------

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run a read on the database thread (it sees every completed write, and what
        is queued before it)."""
        return await self.run(lambda: fn(self.conn))

    async def read_only(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run a listing on the read connection (never the writer's thread)."""
        return await self._reader.run(fn)
