from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from alarmtop.core import PostgresBackend, Runtime, VirtualClock
from alarmtop.testing import START_MS
from tests import pg

__all__ = ["START_MS", "RuntimeFactory"]  # the tests import both from here
# The behaviour suites that run on both backends (a test marked `sqlite_only` reaches
# into SQLite files and runs on SQLite alone).
BOTH_BACKENDS = ("tests/core/", "tests/durable/", "tests/conformance/", "tests/testing/")


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


# Drops alarmtop's schemas and every object's own schema: the next runtime starts empty.
# (The objects' roles stay: a new database id names new ones.)
RESET_SQL = """
DO $$ DECLARE s text;
BEGIN
  FOR s IN SELECT nspname FROM pg_namespace WHERE nspname IN ('alarmtop', 'alarmtop_sql')
           OR nspname LIKE 'obj\\_%' LOOP
    EXECUTE format('DROP SCHEMA %I CASCADE', s);
  END LOOP;
END $$;
"""


# The plugin alarmtop installs for its users (alarmtop.testing, entry point pytest11)
# gives the clock and the runtimes: the project's tests run on what users get.

@pytest.fixture
def clock(virtual_clock: VirtualClock) -> VirtualClock:
    return virtual_clock


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def alarmtop_data_dir(data_dir: Path) -> Path:
    return data_dir  # the plugin's runtimes keep their files where these tests look


RuntimeFactory = Callable[..., Awaitable[Runtime]]


@pytest.fixture
def alarmtop_runtime_factory(alarmtop_runtime_factory: RuntimeFactory, backend_kind: str,
                             request: pytest.FixtureRequest) -> RuntimeFactory:
    """The plugin's factory, on the test's PostgreSQL database for the postgres run of
    the behaviour suites (so the plugin's `alarmtop_runtime` runs there too)."""
    dsn = request.getfixturevalue("pg_dsn") if backend_kind == "postgres" else None
    plugin_make = alarmtop_runtime_factory

    async def make(*things: Any, **options: Any) -> Runtime:
        if dsn is not None and "backend" not in options:
            options["backend"] = PostgresBackend(dsn, shards=8)
        return await plugin_make(*things, **options)

    return make


@pytest.fixture
def make_runtime(alarmtop_runtime_factory: RuntimeFactory) -> RuntimeFactory:
    """Start runtimes on the test's clock and data dir (or the test's PostgreSQL
    database, for the postgres run of the behaviour suites); all are stopped afterwards.
    Runtimes made in one test share their storage, as a restart would."""
    return alarmtop_runtime_factory
