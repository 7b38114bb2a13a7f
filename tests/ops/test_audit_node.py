"""The audit log says which node ran each command, on both backends; a data dir from
before the `node` column is migrated and keeps its rows."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from alarmtop.core import PostgresBackend, Runtime
from alarmtop.core.storage.sqlite.schema import RUNTIME_MIGRATIONS
from tests.conftest import RuntimeFactory
from tests.sqlite_versions import as_version, migration_adding


def node_of(rt: Runtime) -> str:
    node = getattr(rt.backend, "node_id", None)
    assert isinstance(node, str) and node, rt.backend
    return node


async def test_every_audit_row_names_the_node_that_wrote_it(
        make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime()
    await rt.audit.record("127.0.0.1:5000", "rearm", "C/a", "by hand", role="operator")
    await rt.audit.record("127.0.0.1:5000", "abort", "x1", None, ok=False, role="viewer")
    rows = await rt.audit.list()
    assert [r["node"] for r in rows] == [node_of(rt)] * 2
    # The node the audit names is the one the fleet view lists as this runtime.
    assert node_of(rt) in {n["node_id"] for n in await rt.nodes()}


@pytest.mark.sqlite_only
async def test_on_sqlite_the_node_is_host_pid_unless_named(
        make_runtime: RuntimeFactory, data_dir: Path) -> None:
    import os
    import socket

    rt = await make_runtime()
    assert node_of(rt) == f"{socket.gethostname()}-{os.getpid()}"
    assert not isinstance(rt.backend, PostgresBackend)
    (only,) = await rt.nodes()
    assert only["node_id"] == node_of(rt) and only["up"] is True


@pytest.mark.sqlite_only
async def test_rows_from_before_the_node_column_are_kept_without_a_node(
        make_runtime: RuntimeFactory, data_dir: Path) -> None:
    """A data dir from before the node column: its audit rows survive, their node unknown
    (NULL); rows written after the upgrade have this runtime's node."""
    rt = await make_runtime()
    await rt.audit.record("127.0.0.1:1", "rearm", "C/old", None, role="operator")
    await rt.stop()
    as_version(data_dir / "runtime.sqlite", migration_adding("ALTER TABLE audit ADD COLUMN node"))
    rt2 = await make_runtime()
    await rt2.audit.record("127.0.0.1:1", "rearm", "C/new", None, role="operator")
    new, old = await rt2.audit.list()
    assert (old["target"], old["node"]) == ("C/old", None)
    assert (new["target"], new["node"]) == ("C/new", node_of(rt2))
    conn = sqlite3.connect(data_dir / "runtime.sqlite")
    try:
        version = conn.execute("SELECT version FROM _alarmtop_schema").fetchone()[0]
    finally:
        conn.close()
    assert version == len(RUNTIME_MIGRATIONS)
