"""Ordered schema migrations with a version row.

Each list entry is one migration; a database records how many it has applied and
gets the rest, in order, in one transaction each. Never edit a released entry:
append a new one.
"""

from __future__ import annotations

import sqlite3

from alarmtop.core.storage.tables import bulk_tables

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
    """ + bulk_tables("", "INTEGER", " WITHOUT ROWID"),
    # Listings served by indexes, counts kept with the writes (DESIGN section 12).
    #
    # `alarms.urgency` is the alarm's place in the console's order as one integer
    # (core/storage/keys.py `alarm_urgency`, which the writer computes for every row;
    # the UPDATE below is the same function in SQL, for the rows already there). An
    # execution's is a generated column: its rows are written by the execution store,
    # whose writes stay as they are.
    #
    # `known` is every object the runtime knows of, with where it is known from
    # (`sources`: 1 it has a database, 2 it has an alarm row, 4 it is an execution),
    # for the objects listing; an object known only by its alarm leaves with it.
    #
    # `counters` holds the counts the header and /metrics show, kept in the
    # transaction of the write that changes them, so they are exact after any crash:
    # alarms by state; alarms retrying or running a retry by class and retry count
    # (`num`), from which near exhaustion follows under each class's policy;
    # executions by status; objects with a database and objects known.
    #
    # Alarm rows are written by the alarm index alone, which counts each batch's
    # changes itself (sqlite_counts.py: a trigger per row cost more). The other
    # tables' counts are kept by triggers. Execution rows are written by INSERT OR
    # REPLACE (and never deleted): their trigger runs BEFORE INSERT, while the row
    # replaced can still be read.
    """
    ALTER TABLE alarms ADD COLUMN urgency INTEGER NOT NULL DEFAULT 0;
    UPDATE alarms SET urgency =
        (CASE state WHEN 'dead' THEN 0 WHEN 'retrying' THEN 1 WHEN 'running' THEN 2
         ELSE 3 END) * 1152921504606846976
        + (16383 - min(max(retry_count, 0), 16383)) * 70368744177664
        + (CASE WHEN next_attempt_ms IS NULL THEN 0
           ELSE min(max(next_attempt_ms + 35184372088832, 1), 70368744177663) END);
    CREATE INDEX alarms_urgency ON alarms (urgency);
    ALTER TABLE executions ADD COLUMN urgency INTEGER GENERATED ALWAYS AS (
        (CASE status WHEN 'needs_human' THEN 0 WHEN 'failed' THEN 1 WHEN 'running' THEN 2
         WHEN 'suspended' THEN 3 ELSE 4 END) * 1152921504606846976
        + (70368744177663 - min(max(updated_ms + 35184372088832, 1), 70368744177663))
    ) VIRTUAL;
    CREATE INDEX executions_urgency ON executions (urgency);
    CREATE INDEX executions_status_urgency ON executions (status, urgency);
    DROP INDEX executions_status;

    CREATE TABLE known (
        object_class TEXT NOT NULL,
        object_name TEXT NOT NULL,
        sources INTEGER NOT NULL,
        PRIMARY KEY (object_class, object_name)
    ) WITHOUT ROWID;
    INSERT INTO known SELECT object_class, object_name, 1 FROM objects WHERE true
        ON CONFLICT DO UPDATE SET sources = sources | 1;
    INSERT INTO known SELECT object_class, object_name, 2 FROM alarms WHERE true
        ON CONFLICT DO UPDATE SET sources = sources | 2;
    INSERT INTO known SELECT 'Execution', id, 4 FROM executions WHERE true
        ON CONFLICT DO UPDATE SET sources = sources | 4;

    CREATE TABLE counters (
        kind TEXT NOT NULL,
        name TEXT NOT NULL,
        num INTEGER NOT NULL,
        n INTEGER NOT NULL,
        PRIMARY KEY (kind, name, num)
    ) WITHOUT ROWID;
    INSERT INTO counters VALUES ('alarms', 'pending', 0, 0), ('alarms', 'running', 0, 0),
        ('alarms', 'retrying', 0, 0), ('alarms', 'dead', 0, 0);
    INSERT INTO counters SELECT 'alarms', state, 0, count(*) FROM alarms GROUP BY state
        ON CONFLICT DO UPDATE SET n = excluded.n;
    INSERT INTO counters SELECT 'retries', object_class, retry_count, count(*) FROM alarms
        WHERE retry_count > 0 AND state IN ('retrying', 'running')
        GROUP BY object_class, retry_count;
    INSERT INTO counters SELECT 'executions', status, 0, count(*) FROM executions
        GROUP BY status;
    INSERT INTO counters VALUES ('objects', 'stored', 0, (SELECT count(*) FROM objects)),
        ('objects', 'known', 0, (SELECT count(*) FROM known));

    CREATE TRIGGER objects_insert_counted AFTER INSERT ON objects BEGIN
        UPDATE counters SET n = n + 1 WHERE kind = 'objects' AND name = 'stored' AND num = 0;
        INSERT INTO known VALUES (NEW.object_class, NEW.object_name, 1)
            ON CONFLICT DO UPDATE SET sources = sources | 1;
    END;
    CREATE TRIGGER known_insert_counted AFTER INSERT ON known BEGIN
        UPDATE counters SET n = n + 1 WHERE kind = 'objects' AND name = 'known' AND num = 0;
    END;
    CREATE TRIGGER known_delete_counted AFTER DELETE ON known BEGIN
        UPDATE counters SET n = n - 1 WHERE kind = 'objects' AND name = 'known' AND num = 0;
    END;

    CREATE TRIGGER executions_status_counted BEFORE INSERT ON executions
        WHEN (SELECT status FROM executions WHERE id = NEW.id) IS NOT NEW.status BEGIN
        UPDATE counters SET n = n - 1 WHERE kind = 'executions' AND num = 0
            AND name = (SELECT status FROM executions WHERE id = NEW.id);
        INSERT INTO counters VALUES ('executions', NEW.status, 0, 1)
            ON CONFLICT DO UPDATE SET n = n + 1;
    END;
    CREATE TRIGGER executions_known BEFORE INSERT ON executions
        WHEN NOT EXISTS (SELECT 1 FROM executions WHERE id = NEW.id) BEGIN
        INSERT INTO known VALUES ('Execution', NEW.id, 4)
            ON CONFLICT DO UPDATE SET sources = sources | 4;
    END;
    """,
    # A cancel's reason, kept with the batch: in a fleet the node that takes the
    # command may not be the one that runs the batch and writes its end.
    """
    ALTER TABLE bulk_batches ADD COLUMN cancel_reason TEXT;
    """,
    # Whether the database was closed cleanly (index_check.py): after a start that
    # finds it was not, the alarm index is checked against the objects' own files.
    """
    CREATE TABLE runtime_state (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
    """,
    # The Lambda API (DESIGN section 15): executions listed by function, newest first,
    # paged by key on an index (ListDurableExecutionsByFunction); and an execution
    # deleted with its data (DeleteDurableExecution), its counts and its place among
    # the objects known going with it.
    """
    CREATE INDEX executions_function ON executions (name, created_ms, id);
    CREATE TRIGGER executions_delete_counted AFTER DELETE ON executions BEGIN
        UPDATE counters SET n = n - 1 WHERE kind = 'executions' AND num = 0
            AND name = OLD.status;
        DELETE FROM known WHERE object_class = 'Execution' AND object_name = OLD.id
            AND sources = 4;
        UPDATE known SET sources = sources & ~4
            WHERE object_class = 'Execution' AND object_name = OLD.id;
    END;
    """,
]

def statements(script: str) -> list[str]:
    """The statements of a script, each whole: a trigger's body holds semicolons of its
    own, so pieces are joined until SQLite calls the statement complete."""
    out, pending = [], ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                out.append(pending)
            pending = ""
    if pending.strip(" \n;"):
        out.append(pending)
    return out


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
            for stmt in statements(script):
                conn.execute(stmt)
            conn.execute("UPDATE _alarmtop_schema SET version = ?", (number,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
