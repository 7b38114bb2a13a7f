"""SQLite's failures in alarmtop's terms: damage, a full disk, a lock held too long."""

from __future__ import annotations

import sqlite3

from alarmtop.core.model.errors import CorruptDatabase, DiskFull, StorageError

_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6
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


def runtime_database_error(path: str, doing: str, exc: BaseException) -> StorageError:
    """An alarmtop error naming the runtime database, for a SQLite error met while
    `doing` (reading, writing, opening...)."""
    if is_corruption(exc):
        return CorruptDatabase(
            f"the runtime database is damaged ({exc}) while {doing} it. alarmtop will not "
            "run over it: the alarms and execution logs in it would be lost. Stop the "
            "runtime and restore runtime.sqlite (with its -wal file) from a backup; or "
            "start with SqliteBackend(data_dir, on_corrupt_index='quarantine') to move it "
            "to <data>/quarantine/, salvage what is readable and carry on", path)
    if is_disk_full(exc):
        return DiskFull(f"the disk is full: {doing} the runtime database failed and "
                        "nothing of that write was kept; free space", path)
    return StorageError(f"{doing} the runtime database failed: {exc}", path)
