"""One-off upgrades of data written by older versions, each done once and recorded
(the `upgrades` table of the runtime database)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import TypeVar

from alarmtop.core.storage.sqlite.database import SqliteDatabase

T = TypeVar("T")


async def upgrade_pending(db: SqliteDatabase, name: str) -> bool:
    def read(conn: sqlite3.Connection) -> bool:
        return conn.execute("SELECT 1 FROM upgrades WHERE name = ? AND at_ms IS NULL",
                            (name,)).fetchone() is not None
    return await db.read(read)


async def run_upgrade(db: SqliteDatabase, name: str,
                      fn: Callable[[sqlite3.Connection], T]) -> T:
    """Run `fn` on the database thread in one transaction that also marks the upgrade
    done (`fn` may touch files first: it must be safe to run again)."""
    def run(conn: sqlite3.Connection) -> T:
        out = fn(conn)
        # Wall time: people read it beside file times; the runtime's clock may be virtual.
        conn.execute("UPDATE upgrades SET at_ms = ? WHERE name = ?",
                     (time.time_ns() // 1_000_000, name))
        return out
    return await db.transaction(run, doing="upgrading")
