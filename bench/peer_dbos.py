"""DBOS (the `dbos` PyPI package) as the peer of scenario 3, on PostgreSQL (what its
documentation recommends for production) or on a SQLite system database (its
default, for development).

`launch(path, journal)` opens a fresh system database in the journal mode asked for
("default": SQLite's rollback journal, what DBOS creates; "wal": the file is switched
to WAL before DBOS opens it, and WAL mode is kept in the file) and launches DBOS.
SQLite's default `synchronous` is FULL in both modes (checked by `sqlite_settings`),
so each DBOS transaction (workflow status, each step's output) is fsync'd before
it returns: the same durability as alarmtop's group commit.

Workflows and steps must be declared with DBOS's decorators before `launch`.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

JOURNALS = ("default", "wal")


def launch(path: Path, journal: str) -> Any:
    """Create and launch DBOS on a new SQLite file at `path`; returns the DBOS class."""
    from dbos import DBOS

    if journal not in JOURNALS:
        raise SystemExit(f"journal must be one of {JOURNALS}, not {journal!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    if journal == "wal":
        conn = sqlite3.connect(path)
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        conn.close()
        if mode != "wal":
            raise SystemExit(f"could not switch {path} to WAL (got {mode})")
    DBOS(config={"name": "alarmtop-bench", "system_database_url": f"sqlite:///{path}",
                 "log_level": "WARNING"})
    DBOS.launch()
    for name in ("dbos", "dbos._logger"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return DBOS


def launch_url(url: str) -> Any:
    """Launch DBOS on its PostgreSQL system database at `url` (created if missing)."""
    from dbos import DBOS

    DBOS(config={"name": "alarmtop-bench", "system_database_url": url,
                 "log_level": "WARNING"})
    DBOS.launch()
    for name in ("dbos", "dbos._logger"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return DBOS


def engine_settings() -> dict[str, Any]:
    """The durability settings DBOS's own system-database connections have: journal
    mode and synchronous on SQLite, fsync and synchronous_commit on PostgreSQL."""
    from common import sqlite_pragmas
    from dbos._dbos import _get_dbos_instance

    engine = _get_dbos_instance()._sys_db.engine  # read only: DBOS has no public handle
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            return sqlite_pragmas(conn.connection.driver_connection)
        return {k: conn.exec_driver_sql(f"SHOW {k}").scalar()
                for k in ("fsync", "synchronous_commit")}


def recorded_sleeps() -> list[tuple[str, float]]:
    """(workflow id, wake-up time in epoch seconds) of every `DBOS.sleep` checkpoint,
    as DBOS recorded them, read through its own engine before `destroy()`."""
    import json

    from dbos._dbos import _get_dbos_instance

    engine = _get_dbos_instance()._sys_db.engine
    table = "operation_outputs" if engine.dialect.name == "sqlite" else "dbos.operation_outputs"
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(f"SELECT workflow_uuid, output FROM {table} "
                                    "WHERE function_name = 'DBOS.sleep'").fetchall()
    return [(str(wf), float(json.loads(out))) for wf, out in rows]


def sqlite_settings(path: Path) -> dict[str, Any]:
    """The journal mode and synchronous level a new connection to `path` gets."""
    conn = sqlite3.connect(path)
    try:
        return {"journal_mode": conn.execute("PRAGMA journal_mode").fetchone()[0],
                "synchronous": conn.execute("PRAGMA synchronous").fetchone()[0]}
    finally:
        conn.close()


def destroy() -> None:
    from dbos import DBOS

    DBOS.destroy(destroy_registry=True)
