"""Every reach into aiosqlite's internals, in one place.

1. `daemon_connection`: aiosqlite runs each connection on a non-daemon thread, so a
   script that raises after `runtime.start()` without `stop()` would never exit. A
   daemon thread dies with the process exactly as a crash would stop it, which the
   runtime recovers from. aiosqlite has no option for this; the thread is made a
   daemon before it starts (`Connection._thread`). Tested in tests/storage/sqlite/
   test_compat.py: an aiosqlite upgrade that moves it fails there.
2. `on_thread`: run a function of the raw `sqlite3.Connection` on the connection's
   thread, in order with its other work, in one hop (`Connection._execute` and
   `Connection._conn`): an object's statement runs there between installing its
   authorizer and removing it (`object_sql.py`), so no other statement of the
   connection is prepared under it, or without it, in between.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

T = TypeVar("T")


def daemon_connection(path: Path, busy_timeout_s: float) -> aiosqlite.Connection:
    """An aiosqlite connection (not started yet) whose thread never holds the
    interpreter open."""
    conn = aiosqlite.connect(path, isolation_level=None, timeout=busy_timeout_s)
    thread = getattr(conn, "_thread", None)
    if thread is not None:  # an aiosqlite without it: a non-daemon thread, as before
        thread.daemon = True
    return conn


async def on_thread(conn: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """`fn(raw connection)` on the connection's own thread, in order with its other work."""
    run: Any = conn._execute
    result: T = await run(lambda: fn(conn._conn))
    return result
