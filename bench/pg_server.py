"""PostgreSQL for the benchmarks: the server given (`--postgres DSN`) or a throwaway
cluster from the machine's binaries (the tests' own, fsync on, durable commits),
a fresh database per run, and the server's physical limit: single-client
committed one-row inserts per second (synchronous_commit on, fsync on), what any
durable step on it needs at least once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_names = itertools.count(1)


@contextlib.contextmanager
def server(dsn: str | None) -> Iterator[str]:
    """A DSN of a maintenance database on the server to use."""
    if dsn:
        yield dsn
        return
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests import pg
    with pg.cluster() as cluster:
        yield cluster.dsn


def _with_db(dsn: str, db: str) -> str:
    base, _, _ = dsn.rpartition("/")
    return f"{base}/{db}"


def fresh_database(dsn: str, prefix: str = "bench") -> str:
    """A new empty database on the server of `dsn`; its DSN."""
    import asyncpg
    name = f"{prefix}_{int(time.time())}_{next(_names)}"

    async def make() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
    asyncio.run(make())
    return _with_db(dsn, name)


def drop_database(dsn: str, db_dsn: str) -> None:
    import asyncpg
    name = db_dsn.rpartition("/")[2]

    async def drop() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()
    asyncio.run(drop())


def commit_limit(dsn: str, seconds: float = 3.0) -> dict[str, Any]:
    """One client inserting one row per transaction for `seconds`: commits/s."""
    import asyncpg

    async def run() -> dict[str, Any]:
        conn = await asyncpg.connect(dsn)
        try:
            settings = {k: await conn.fetchval(f"SHOW {k}") for k in
                        ("fsync", "synchronous_commit", "wal_sync_method")}
            await conn.execute("CREATE TABLE IF NOT EXISTS limit_probe (i BIGINT)")
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                await conn.execute("INSERT INTO limit_probe VALUES ($1)", n)
                n += 1
            return {"commits_per_s": n / (time.perf_counter() - t0), **settings}
        finally:
            await conn.close()
    return asyncio.run(run())
