"""Per-object SQLite databases on aiosqlite, and the SQLite storage backend.

Each object gets its own file, opened only when the object first touches its
storage and closed when it hibernates, so a sleeping object holds no file or
thread. Files are WAL with synchronous=FULL: a commit is on disk when it returns.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import aiosqlite

from alarmtop.core.errors import SqlError, StorageError
from alarmtop.core.storage.interface import ExecResult
from alarmtop.core.storage.sqlite_index import SqliteAlarmIndex

_KV_TABLE = ("CREATE TABLE IF NOT EXISTS _alarmtop_kv "
             "(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID")


def object_file_name(object_name: str) -> str:
    """A file name that keeps every object name apart (and never escapes the folder).

    Names whose encoding would pass the 255-byte limit of file names keep a
    readable prefix and end in a digest of the whole name."""
    encoded = quote(object_name, safe="").replace(".", "%2E")
    if len(encoded) > 180:
        digest = hashlib.sha256(object_name.encode()).hexdigest()
        encoded = f"{encoded[:100]}~{digest}"
    return encoded + ".sqlite"


class SqliteObjectStore:
    """`ObjectStore` for one object's file."""

    def __init__(self, path: Path, conn: aiosqlite.Connection) -> None:
        self.path = str(path)
        self._conn = conn

    @classmethod
    async def open(cls, path: Path) -> SqliteObjectStore:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = await aiosqlite.connect(path, isolation_level=None)
            conn.row_factory = sqlite3.Row
            await conn.execute("PRAGMA journal_mode=WAL")
            await conn.execute("PRAGMA synchronous=FULL")
            await conn.execute(_KV_TABLE)
        except sqlite3.DatabaseError as exc:
            raise StorageError(f"cannot open object database: {exc}", str(path)) from exc
        return cls(path, conn)

    async def exec(self, sql: str, params: Sequence[Any]) -> ExecResult:
        before = self._conn.total_changes
        try:
            cursor = await self._conn.execute(sql, tuple(params))
            rows = await cursor.fetchall()
        except sqlite3.Error as exc:
            raise SqlError(f"{exc} (in: {sql[:200]})", self.path) from exc
        changed = self._conn.total_changes - before
        dict_rows = [dict(r) for r in rows]
        # The description names the columns even when no row came back.
        columns = tuple(d[0] for d in cursor.description or ())
        return ExecResult(columns, dict_rows, changed)

    async def kv_get(self, keys: Sequence[str]) -> dict[str, str]:
        marks = ",".join("?" * len(keys))
        rows = await self._conn.execute_fetchall(
            f"SELECT key, value FROM _alarmtop_kv WHERE key IN ({marks})", tuple(keys))
        return {r[0]: r[1] for r in rows}

    async def kv_put(self, items: Sequence[tuple[str, str]]) -> None:
        await self._conn.executemany(
            "INSERT OR REPLACE INTO _alarmtop_kv (key, value) VALUES (?, ?)", items)

    async def kv_delete(self, keys: Sequence[str]) -> int:
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
        rows = await self._conn.execute_fetchall(sql, params)
        return [(r[0], r[1]) for r in rows]

    async def begin(self) -> None:
        if not self._conn.in_transaction:
            await self._conn.execute("BEGIN")

    async def savepoint(self, name: str) -> None:
        await self._conn.execute(f"SAVEPOINT {name}")

    async def release(self, name: str) -> None:
        await self._conn.execute(f"RELEASE {name}")

    async def rollback_to(self, name: str) -> None:
        await self._conn.execute(f"ROLLBACK TO {name}")
        await self._conn.execute(f"RELEASE {name}")

    async def commit(self) -> None:
        if self._conn.in_transaction:
            try:
                await self._conn.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                raise StorageError(f"commit failed: {exc}", self.path) from exc

    async def destroy(self) -> None:
        rows = await self._conn.execute_fetchall(
            "SELECT type, name FROM sqlite_master WHERE type IN ('table', 'view') "
            "AND name NOT LIKE 'sqlite_%'")
        for kind, name in rows:
            await self._conn.execute(f'DROP {kind.upper()} IF EXISTS "{name}"')
        await self._conn.execute(_KV_TABLE)

    async def close(self) -> None:
        await self._conn.close()


class SqliteBackend:
    """The embedded default: `runtime.sqlite` for the alarm index, a file per object."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._index = SqliteAlarmIndex(data_dir / "runtime.sqlite")

    @property
    def alarm_index(self) -> SqliteAlarmIndex:
        return self._index

    async def open(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        await self._index.open()

    async def close(self) -> None:
        await self._index.close()

    def object_path(self, object_class: str, object_name: str) -> Path:
        return self.data_dir / "objects" / object_class / object_file_name(object_name)

    async def open_object(self, object_class: str, object_name: str) -> SqliteObjectStore:
        return await SqliteObjectStore.open(self.object_path(object_class, object_name))

    async def count_objects(self) -> int:
        return await asyncio.to_thread(self._count_objects)

    async def list_objects(self, limit: int, offset: int = 0,
                           contains: str | None = None) -> list[tuple[str, str]]:
        return await asyncio.to_thread(self._list_objects, limit, offset, contains)

    def _list_objects(self, limit: int, offset: int,
                      contains: str | None) -> list[tuple[str, str]]:
        root = self.data_dir / "objects"
        if not root.exists():
            return []
        found: list[tuple[str, str]] = []
        for cls_dir in sorted(p for p in root.iterdir() if p.is_dir()):
            for entry in os.scandir(cls_dir):
                if entry.name.endswith(".sqlite"):
                    name = unquote(entry.name[:-len(".sqlite")])
                    if contains is None or contains in f"{cls_dir.name}/{name}":
                        found.append((cls_dir.name, name))
        found.sort()
        return found[offset:offset + limit]

    def _count_objects(self) -> int:
        root = self.data_dir / "objects"
        if not root.exists():
            return 0
        return sum(1 for _ in root.glob("*/*.sqlite"))
