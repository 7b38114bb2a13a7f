from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from alarmtop.core import PostgresBackend, Runtime, VirtualClock
from alarmtop.testing import START_MS
from tests import pg, watchdog

__all__ = ["START_MS", "RuntimeFactory"]  # the tests import both from here
# The behaviour suites that run on both backends (a test marked `sqlite_only` reaches
# into SQLite files and runs on SQLite alone).
BOTH_BACKENDS = ("tests/kernel/", "tests/storage/", "tests/ops/", "tests/conformance/",
                 "tests/testing/")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "sqlite_only: the test reads or damages SQLite files "
                            "itself: it runs on the SQLite backend only")
    config.addinivalue_line("markers", "slow: an end-to-end test of real processes (a terminal, "
                            "a browser, a fleet, a fresh install) that takes seconds to a "
                            "minute: CI runs them, `pytest -m 'not slow'` leaves them out")
    # Before any test starts a daemon: what the run starts dies with it (tests/watchdog.py).
    watchdog.install()


# The end-to-end tests of real processes (a terminal, a browser, fleets of processes, a
# fresh install, kills and chaos runs): seconds to a minute each. `make test` (what CI
# runs) runs them; `make quick` (`pytest -m "not slow"`) leaves them out.
SLOW = (
    "tests/test_install.py", "tests/test_killed_run.py", "tests/tui/test_tmux.py",
    "tests/tui/test_web.py", "tests/testing/test_user_project.py",
    "tests/chaos/test_chaos.py", "tests/chaos/test_chaos_fleet.py",
    "tests/chaos/test_crash_windows.py", "tests/chaos/test_corruption.py",
    "tests/chaos/test_fuzz_ops.py", "tests/chaos/test_properties.py",
    "tests/storage/test_commit_kills.py", "tests/storage/test_counters.py",
    "tests/fleet/test_nodes_processes.py", "tests/fleet/test_fleet_sockets_processes.py",
    "tests/fleet/test_postgres_outage.py", "tests/fleet/test_serve_postgres.py",
    "tests/server/test_lambda_http.py", "tests/server/test_lambda_http_wire.py",
    "tests/server/test_lambda_endpoint.py", "tests/tui/test_tmux_aws.py",
    "tests/chaos/test_aws_chaos.py",
)


# Modules whose fixtures outlive a test (a wheel built and installed, a chaos run, a
# fuzz server): in a parallel run each goes to one worker, which sets them up once.
WHOLE = ("tests/test_install.py", "tests/chaos/test_chaos.py",
         "tests/chaos/test_chaos_fleet.py", "tests/chaos/test_fuzz_ops.py",
         "tests/tui/test_cli_mistakes.py")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (--dist loadgroup)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the slow modules, and run them first: in parallel runs a long test left for
    the end keeps one worker busy while the others are done."""
    for item in items:
        module = item.nodeid.split("::")[0]
        if module in SLOW:
            item.add_marker(pytest.mark.slow)
        if module in WHOLE:
            item.add_marker(pytest.mark.xdist_group(module))
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable


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
