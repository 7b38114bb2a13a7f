"""A runtime database as an earlier version of alarmtop left it, for migration tests."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alarmtop.core.storage.sqlite.schema import RUNTIME_MIGRATIONS, migrate


def migration_adding(text: str) -> int:
    """The schema version before the migration whose script holds `text`."""
    return next(i for i, m in enumerate(RUNTIME_MIGRATIONS) if text in m)


def as_version(path: Path, version: int) -> None:
    """Make the runtime database at `path` one of schema `version`: a fresh file
    migrated that far, given the rows of every table it has (the later migrations
    change several tables, so dropping one migration's work and the version number
    alone would not give an older file)."""
    old = path.with_suffix(".older")
    conn = sqlite3.connect(old, isolation_level=None)
    migrate(conn, RUNTIME_MIGRATIONS[:version])
    conn.execute("ATTACH DATABASE ? AS cur", (str(path),))
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM main.sqlite_master WHERE type = 'table' AND name NOT LIKE "
        "'sqlite_%' AND name != '_alarmtop_schema'")]
    conn.execute("BEGIN")
    if "upgrades" in tables:
        conn.execute("DELETE FROM main.upgrades")  # its rows come from the current file
    for table in tables:
        cols = ", ".join(r[1] for r in conn.execute(f"PRAGMA main.table_info({table})"))
        conn.execute(f"INSERT INTO main.{table} ({cols}) SELECT {cols} FROM cur.{table}")
    conn.execute("COMMIT")
    conn.execute("DETACH DATABASE cur")
    conn.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    old.rename(path)
