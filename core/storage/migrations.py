"""Ordered schema migrations with a version row.

Each list entry is one migration; a database records how many it has applied and
gets the rest, in order, in one transaction each. Never edit a released entry:
append a new one.
"""

from __future__ import annotations

import sqlite3

RUNTIME_MIGRATIONS: list[str] = [
    """
    CREATE TABLE alarms (
        object_class TEXT NOT NULL,
        object_name TEXT NOT NULL,
        scheduled_ms INTEGER NOT NULL,
        state TEXT NOT NULL,
        retry_count INTEGER NOT NULL,
        next_attempt_ms INTEGER,
        last_error TEXT,
        attempts TEXT,
        started_ms INTEGER,
        PRIMARY KEY (object_class, object_name)
    ) WITHOUT ROWID;
    CREATE INDEX alarms_due ON alarms (next_attempt_ms) WHERE state != 'dead';
    CREATE INDEX alarms_state ON alarms (state);
    """,
    """
    CREATE TABLE executions (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        version TEXT NOT NULL,
        status TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        updated_ms INTEGER NOT NULL,
        data TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX executions_status ON executions (status, updated_ms);
    CREATE TABLE operations (
        execution_id TEXT NOT NULL,
        op_id TEXT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (execution_id, op_id)
    ) WITHOUT ROWID;
    CREATE TABLE history (
        execution_id TEXT NOT NULL,
        event_id INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (execution_id, event_id)
    ) WITHOUT ROWID;
    CREATE TABLE ledger (
        key TEXT PRIMARY KEY,
        value TEXT,
        at_ms INTEGER NOT NULL,
        deliveries INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE audit (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        at_ms INTEGER NOT NULL,
        actor TEXT NOT NULL,
        role TEXT,
        action TEXT NOT NULL,
        target TEXT,
        reason TEXT,
        ok INTEGER NOT NULL,
        detail TEXT
    );
    """,
]

def migrate(conn: sqlite3.Connection, migrations: list[str]) -> None:
    """Bring `conn` up to date; it must be in autocommit mode (isolation_level=None)."""
    conn.execute("CREATE TABLE IF NOT EXISTS _alarmtop_schema (version INTEGER NOT NULL)")
    row = conn.execute("SELECT version FROM _alarmtop_schema").fetchone()
    version = row[0] if row else 0
    if row is None:
        conn.execute("INSERT INTO _alarmtop_schema (version) VALUES (0)")
    if version > len(migrations):
        raise sqlite3.DatabaseError(
            f"schema version {version} is newer than this alarmtop knows "
            f"({len(migrations)}); upgrade alarmtop")
    for number, script in enumerate(migrations[version:], start=version + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            for stmt in filter(str.strip, script.split(";")):
                conn.execute(stmt)
            conn.execute("UPDATE _alarmtop_schema SET version = ?", (number,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
