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
    # One event, one commit: a row carries the intent generation it was made from, an
    # optional wake hint, whether the object's intent may live in its own database,
    # the total attempt count (only the first few and the last N attempts are kept),
    # and its due time (the earlier of its next attempt and its hint) for the index.
    # `objects` names every object that has a database file, with its real name.
    """
    ALTER TABLE alarms ADD COLUMN gen INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE alarms ADD COLUMN hint_ms INTEGER;
    ALTER TABLE alarms ADD COLUMN hint_gen INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE alarms ADD COLUMN in_file INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE alarms ADD COLUMN attempt_count INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE alarms ADD COLUMN due_ms INTEGER;
    UPDATE alarms SET due_ms = CASE WHEN state = 'dead' THEN NULL ELSE next_attempt_ms END,
        attempt_count = CASE WHEN attempts IS NULL THEN 0 ELSE json_array_length(attempts) END;
    DROP INDEX alarms_due;
    CREATE INDEX alarms_due ON alarms (due_ms) WHERE due_ms IS NOT NULL;
    CREATE TABLE objects (
        object_class TEXT NOT NULL,
        object_name TEXT NOT NULL,
        file TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        PRIMARY KEY (object_class, object_name)
    ) WITHOUT ROWID;
    CREATE TABLE upgrades (name TEXT PRIMARY KEY, at_ms INTEGER) WITHOUT ROWID;
    INSERT INTO upgrades (name) VALUES ('object-files-v2');
    """,
    # Executions made ready for operators: the values ctx.now()/ctx.random() gave (so
    # replays see them again), and every pending timer of every execution (waits,
    # retries, callback deadlines, the execution timeout), written with each
    # checkpoint, for one board of them soonest first. Running executions of an
    # earlier version get their timers from their logs here.
    """
    CREATE TABLE execution_marks (
        execution_id TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (execution_id, key)
    ) WITHOUT ROWID;
    CREATE TABLE execution_timers (
        execution_id TEXT NOT NULL,
        op_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        due_ms INTEGER NOT NULL,
        name TEXT,
        PRIMARY KEY (execution_id, op_id, kind)
    ) WITHOUT ROWID;
    CREATE INDEX execution_timers_due ON execution_timers (due_ms, execution_id, op_id, kind);
    INSERT OR IGNORE INTO execution_timers
        SELECT o.execution_id, o.op_id,
               CASE WHEN json_extract(o.data, '$.sub_type') = 'WaitForCondition' THEN 'poll'
                    ELSE 'retry' END,
               json_extract(o.data, '$.next_attempt_ms'), json_extract(o.data, '$.name')
        FROM operations o JOIN executions e ON e.id = o.execution_id
        WHERE e.status IN ('running', 'suspended', 'needs_human')
          AND json_extract(o.data, '$.status') = 'PENDING'
          AND json_extract(o.data, '$.next_attempt_ms') IS NOT NULL;
    INSERT OR IGNORE INTO execution_timers
        SELECT o.execution_id, o.op_id, 'wait', json_extract(o.data, '$.scheduled_end_ms'),
               json_extract(o.data, '$.name')
        FROM operations o JOIN executions e ON e.id = o.execution_id
        WHERE e.status IN ('running', 'suspended', 'needs_human')
          AND json_extract(o.data, '$.status') = 'STARTED'
          AND json_extract(o.data, '$.type') = 'WAIT'
          AND json_extract(o.data, '$.scheduled_end_ms') IS NOT NULL;
    INSERT OR IGNORE INTO execution_timers
        SELECT o.execution_id, o.op_id, 'callback_timeout',
               json_extract(o.data, '$.timeout_at_ms'), json_extract(o.data, '$.name')
        FROM operations o JOIN executions e ON e.id = o.execution_id
        WHERE e.status IN ('running', 'suspended', 'needs_human')
          AND json_extract(o.data, '$.status') = 'STARTED'
          AND json_extract(o.data, '$.timeout_at_ms') IS NOT NULL;
    INSERT OR IGNORE INTO execution_timers
        SELECT o.execution_id, o.op_id, 'heartbeat',
               json_extract(o.data, '$.heartbeat_at_ms'), json_extract(o.data, '$.name')
        FROM operations o JOIN executions e ON e.id = o.execution_id
        WHERE e.status IN ('running', 'suspended', 'needs_human')
          AND json_extract(o.data, '$.status') = 'STARTED'
          AND json_extract(o.data, '$.heartbeat_at_ms') IS NOT NULL;
    INSERT OR IGNORE INTO execution_timers
        SELECT id, '', 'execution_timeout',
               created_ms + json_extract(data, '$.timeout_s') * 1000, name
        FROM executions
        WHERE status IN ('running', 'suspended', 'needs_human')
          AND json_extract(data, '$.timeout_s') > 0
    """,
    # Which node ran each operator command, as the fleet's audit log on PostgreSQL
    # says. Rows from before stay without one (NULL): that node is not known.
    """
    ALTER TABLE audit ADD COLUMN node TEXT
    """,
    # Operator tools (issue 14): an operator's pause of an alarm (the alarm keeps its
    # time and retries, and is never due while paused: its `due_ms` is NULL, so the
    # paused ones get a small index of their own for the timers board), and bulk
    # actions: a batch and the items it was started with, each item's outcome written
    # in the same transaction as the change it made.
    """
    ALTER TABLE alarms ADD COLUMN paused_ms INTEGER;
    CREATE INDEX alarms_paused ON alarms (next_attempt_ms, object_class, object_name)
        WHERE paused_ms IS NOT NULL;
    CREATE TABLE bulk_batches (
        id TEXT PRIMARY KEY,
        action TEXT NOT NULL,
        kind TEXT NOT NULL,
        status TEXT NOT NULL,
        actor TEXT NOT NULL,
        role TEXT,
        reason TEXT,
        note TEXT,
        throttle INTEGER NOT NULL,
        params TEXT NOT NULL,
        total INTEGER NOT NULL DEFAULT 0,
        done INTEGER NOT NULL DEFAULT 0,
        failed INTEGER NOT NULL DEFAULT 0,
        cancelled INTEGER NOT NULL DEFAULT 0,
        created_ms INTEGER NOT NULL,
        updated_ms INTEGER NOT NULL,
        ended_ms INTEGER,
        node TEXT,
        prep_after TEXT
    ) WITHOUT ROWID;
    CREATE INDEX bulk_batches_status ON bulk_batches (status);
    CREATE TABLE bulk_items (
        batch_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        key TEXT NOT NULL,
        status TEXT NOT NULL,
        error TEXT,
        detail TEXT,
        PRIMARY KEY (batch_id, seq)
    ) WITHOUT ROWID;
    CREATE INDEX bulk_items_status ON bulk_items (batch_id, status, seq)
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
