"""The reaches into aiosqlite's internals (`core/storage/sqlite/compat.py`): an
aiosqlite upgrade that moves them fails here."""

from __future__ import annotations

import threading
from pathlib import Path

from alarmtop.core.storage.sqlite.compat import daemon_connection, on_thread


async def test_on_thread_runs_on_the_connections_own_thread(tmp_path: Path) -> None:
    conn = daemon_connection(tmp_path / "x.sqlite", 1.0)
    await conn
    try:
        await conn.execute("CREATE TABLE t (n INTEGER)")
        await conn.execute("INSERT INTO t VALUES (1)")
        seen = await on_thread(conn, lambda raw: (threading.current_thread(),
                                                 raw.execute("SELECT count(*) FROM t")
                                                 .fetchone()[0]))
        assert seen[0] is not threading.current_thread() and seen[0].daemon
        assert seen[1] == 1
    finally:
        await conn.close()


async def test_daemon_connection_thread_is_a_daemon(tmp_path: Path) -> None:
    conn = daemon_connection(tmp_path / "x.sqlite", 1.0)
    await conn
    try:
        assert any(t.daemon and t.is_alive() for t in threading.enumerate()
                   if t is not threading.current_thread())
    finally:
        await conn.close()
