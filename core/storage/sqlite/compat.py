"""Every reach into aiosqlite's internals, in one place.

1. `daemon_connection`: aiosqlite runs each connection on a non-daemon thread, so a
   script that raises after `runtime.start()` without `stop()` would never exit. A
   daemon thread dies with the process exactly as a crash would stop it, which the
   runtime recovers from. aiosqlite has no option for this; the thread is made a
   daemon before it starts (`Connection._thread`). Tested in tests/storage/sqlite/
   test_compat.py: an aiosqlite upgrade that moves it fails there.
"""

from __future__ import annotations

from pathlib import Path

import aiosqlite


def daemon_connection(path: Path, busy_timeout_s: float) -> aiosqlite.Connection:
    """An aiosqlite connection (not started yet) whose thread never holds the
    interpreter open."""
    conn = aiosqlite.connect(path, isolation_level=None, timeout=busy_timeout_s)
    thread = getattr(conn, "_thread", None)
    if thread is not None:  # an aiosqlite without it: a non-daemon thread, as before
        thread.daemon = True
    return conn
