"""`SqliteBackend`: the embedded default. `runtime.sqlite` holds the runtime database
(alarm rows, execution logs, audit, bulk batches); each object has a file of its own.

`runtime.sqlite` is checked at start: when it is damaged, or missing while the
folder holds alarmtop data, `open()` refuses with `CorruptDatabase` unless the
backend was built with `on_corrupt_index="quarantine"` (move it aside, salvage the
readable rows into a fresh one, carry on).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from alarmtop.core.model.errors import CorruptDatabase, InvalidArgument
from alarmtop.core.model.log_records import log_event
from alarmtop.core.model.object_names import (
    DIGEST_NAME,
    legacy_object_file_name,
    name_of_file,
    object_file_name,
)
from alarmtop.core.storage.backend_stores import BackendStores
from alarmtop.core.storage.sqlite import index_check
from alarmtop.core.storage.sqlite.alarm_rows import AlarmRowWriter, SqliteAlarmRows
from alarmtop.core.storage.sqlite.audit_rows import SqliteAuditRows
from alarmtop.core.storage.sqlite.database import BUSY_TIMEOUT_S, SqliteDatabase
from alarmtop.core.storage.sqlite.execution_log import SqliteExecutionLog
from alarmtop.core.storage.sqlite.files import fsync_dir, make_dirs
from alarmtop.core.storage.sqlite.folder_lock import FolderLock
from alarmtop.core.storage.sqlite.objects import SqliteObjectStore
from alarmtop.core.storage.sqlite.operator_rows import SqliteOperatorRows
from alarmtop.core.storage.sqlite.quarantine import STORAGE_LOG, Quarantine, wall_ms
from alarmtop.core.storage.sqlite.salvage import salvage_into
from alarmtop.core.storage.sqlite.upgrades import run_upgrade, upgrade_pending

MARKER = ".alarmtop"  # in the data folder: "this folder holds alarmtop data"
CORRUPT_INDEX_MODES = ("fail", "quarantine")


class SqliteBackend(BackendStores):
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
        self.quarantine = Quarantine(self.data_dir, now_ms or wall_ms)
        self.node_id = node_id or f"{socket.gethostname()}-{os.getpid()}"
        self._writer = AlarmRowWriter()
        self._db = SqliteDatabase(self.data_dir / "runtime.sqlite", self._writer,
                                  check=check_on_open, busy_timeout_s=busy_timeout_s)
        self._alarm_rows = SqliteAlarmRows(self._db, self._writer)
        self._executions = SqliteExecutionLog(self._db, self._writer.counters)
        self._audit = SqliteAuditRows(self._db, self.node_id)
        self._operator = SqliteOperatorRows(self._db, self.node_id)
        super().__init__(self._db, self._alarm_rows, self._executions, self._audit,
                         self._operator)
        self.salvaged: dict[str, Any] | None = None  # what a quarantine-and-continue kept
        self.restored: dict[str, Any] | None = None  # what the check after an unclean stop found
        self._lock = FolderLock(self.data_dir)  # held while open: one runtime per folder


    async def open(self) -> None:
        await asyncio.to_thread(make_dirs, self.data_dir)
        # Before anything is read: a second runtime on the folder changes nothing.
        await asyncio.to_thread(self._lock.take)
        try:
            await self._open()
        except BaseException:
            self._lock.release()
            raise

    async def _open(self) -> None:
        quarantined: Path | None = None
        try:
            await asyncio.to_thread(self._check_index_file)
            await self._db.open()
        except CorruptDatabase as exc:
            if self.on_corrupt_index != "quarantine":
                raise
            # The error's advice (restore, or choose quarantine) is moot here: say the cause.
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            log_event(STORAGE_LOG, logging.ERROR, f"the runtime database {self._db.file} "
                      f"cannot be used ({cause}); quarantining it and salvaging what can be "
                      "read, as on_corrupt_index='quarantine' asks",
                      event="storage.index_damaged", file=str(self._db.file), error=str(exc))
            if self._db.file.exists():
                quarantined = await asyncio.to_thread(
                    self.quarantine.move, self._db.file, str(cause), "runtime database")
            await self._db.open()
        if quarantined is not None:
            self.salvaged = await salvage_into(self._db, self._writer, quarantined)
            kept = ", ".join(f"{k}: {v}" for k, v in self.salvaged.items())
            log_event(STORAGE_LOG, logging.WARNING, "rows salvaged from the quarantined runtime "
                      f"database {quarantined}, per table: {kept}",
                      event="storage.salvaged", source=str(quarantined),
                      **self.salvaged)
        await asyncio.to_thread(self._write_marker)
        if await upgrade_pending(self._db, "object-files-v2"):
            upgraded = await run_upgrade(self._db, "object-files-v2", self._upgrade_files)
            if upgraded["listed"] or upgraded["renamed"] or upgraded["unknown_names"]:
                log_event(STORAGE_LOG, logging.INFO, f"object files upgraded: "
                          f"{upgraded['renamed']} renamed, {upgraded['listed']} listed",
                          event="storage.upgraded", **upgraded)
        # Not closed cleanly (a crash, a copy taken while running, a lost -wal file): the
        # index is checked against the objects' files before anything reads it.
        if not await self._db.run(lambda: index_check.was_clean(self._db.conn)):
            self.restored = await index_check.restore_lost(self._db, self.data_dir)
        await self._db.run(lambda: index_check.mark(self._db.conn, clean=False))

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
        path = self._db.file
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
        try:
            try:
                await self._db.run(lambda: index_check.mark(self._db.conn, clean=True))
            except Exception as exc:  # the next start checks the index: nothing is lost
                log_event(STORAGE_LOG, logging.WARNING, f"the runtime database could not be "
                          f"marked as closed cleanly ({exc}); the next start checks the "
                          "alarm index against the objects' files", event="storage.unclean")
            await self._db.close()
        finally:
            self._lock.release()

    def object_path(self, object_class: str, object_name: str) -> Path:
        return self.data_dir / "objects" / object_class / object_file_name(object_name)

    async def open_object(self, object_class: str, object_name: str, create: bool = True,
                          intent: tuple[int, int | None] = (0, None), epoch: int | None = None
                          ) -> SqliteObjectStore | None:
        """The object's database; None when it has none and `create` is false (one
        node alone: no lease `epoch` to fence by)."""
        return await SqliteObjectStore.open(self.object_path(object_class, object_name),
                                            self.quarantine, key=(object_class, object_name),
                                            check=self.check_on_open, create=create,
                                            intent=intent, busy_timeout_s=self.busy_timeout_s)

    async def count_objects(self) -> int:
        return await self._alarm_rows.count_objects()

    async def list_objects(self, limit: int, offset: int = 0,
                           contains: str | None = None) -> list[tuple[str, str]]:
        return await self._alarm_rows.list_objects(limit, offset, contains)

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
        now = wall_ms()
        conn.executemany("INSERT OR IGNORE INTO objects (object_class, object_name, file, "
                         "created_ms) VALUES (?, ?, ?, ?)",
                         [(c, n, f, now) for c, n, f in listed])
        conn.executemany("UPDATE alarms SET in_file = 1 WHERE object_class = ? AND "
                         "object_name = ?", [(c, n) for c, n, _ in listed])
        return {"renamed": renamed, "listed": len(listed), "unknown_names": unknown}
