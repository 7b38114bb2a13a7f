from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from alarmtop.core import PostgresBackend, Runtime, VirtualClock
from tests import pg

START_MS = 1_800_000_000_000
# The behaviour suites that run on both backends (a test marked `sqlite_only` reaches
# into SQLite files and runs on SQLite alone).
BOTH_BACKENDS = ("tests/core/", "tests/durable/", "tests/conformance/")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "sqlite_only: the test reads or damages SQLite files "
                            "itself: it runs on the SQLite backend only")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests of the behaviour suites that start runtimes run once per backend."""
    if "backend_kind" not in metafunc.fixturenames:
        return
    path = str(metafunc.definition.path).replace("\\", "/")
    both = any(part in path for part in BOTH_BACKENDS) and \
        metafunc.definition.get_closest_marker("sqlite_only") is None
    metafunc.parametrize("backend_kind", ["sqlite", "postgres"] if both else ["sqlite"],
                         indirect=True)


@pytest.fixture
def backend_kind(request: pytest.FixtureRequest) -> str:
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[pg.Cluster]:
    """One throwaway PostgreSQL for the session (each test gets it empty)."""
    with pg.cluster() as cluster:
        yield cluster


@pytest.fixture
def pg_dsn(request: pytest.FixtureRequest) -> str:
    """The DSN of an empty alarmtop database on the session's PostgreSQL."""
    cluster: pg.Cluster = request.getfixturevalue("pg_cluster")
    cluster.run(str(cluster.bin / "psql"), "-h", "127.0.0.1", "-p", str(cluster.port), "-U",
                "postgres", "-q", "-v", "ON_ERROR_STOP=1", "-c", RESET_SQL)
    return cluster.dsn


# Drops alarmtop's schema and every object's own schema: the next runtime starts empty.
RESET_SQL = """
DO $$ DECLARE s text;
BEGIN
  FOR s IN SELECT nspname FROM pg_namespace WHERE nspname = 'alarmtop'
           OR nspname LIKE 'obj\\_%' LOOP
    EXECUTE format('DROP SCHEMA %I CASCADE', s);
  END LOOP;
END $$;
"""


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(start_ms=START_MS)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


RuntimeFactory = Callable[..., Awaitable[Runtime]]


@pytest.fixture
async def make_runtime(data_dir: Path, clock: VirtualClock, backend_kind: str,
                       request: pytest.FixtureRequest) -> AsyncIterator[RuntimeFactory]:
    """Start runtimes on the test's clock and data dir (or the test's PostgreSQL
    database, for the postgres run of the behaviour suites); all are stopped afterwards.
    Runtimes made in one test share their storage, as a restart would."""
    started: list[Runtime] = []
    dsn = request.getfixturevalue("pg_dsn") if backend_kind == "postgres" else None

    async def make(*classes: type, **options: Any) -> Runtime:
        policies = options.pop("policies", {})
        if dsn is not None and "backend" not in options:
            options["backend"] = PostgresBackend(dsn, shards=8)
        rt = Runtime(data_dir, clock=clock, **options)
        for cls in classes:
            rt.register(cls, retry_policy=policies.get(cls.__name__))
        await rt.start()
        started.append(rt)
        return rt

    yield make
    for rt in reversed(started):
        await rt.stop()
    # Collect now, so a database left open is reported against the test that left it.
    gc.collect()
