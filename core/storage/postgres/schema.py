"""The PostgreSQL schema of alarmtop, as ordered migrations with a version row.

Everything lives in the schema `alarmtop` (an object's own SQL runs in a schema of
its own, made on first use): alarm rows, execution logs, history, the ledger, the
audit log, object key-values and intents, and the fleet's shard leases and nodes.
Epoch milliseconds are BIGINT. Never edit a released entry: append one.
"""

from __future__ import annotations

SCHEMA = "alarmtop"

MIGRATIONS: list[str] = [
    f"""
    CREATE TABLE {SCHEMA}.alarms (
        object_class TEXT NOT NULL,
        object_name TEXT NOT NULL,
        shard INTEGER NOT NULL,
        scheduled_ms BIGINT NOT NULL,
        state TEXT NOT NULL,
        retry_count INTEGER NOT NULL,
        next_attempt_ms BIGINT,
        last_error TEXT,
        attempts TEXT,
        started_ms BIGINT,
        gen BIGINT NOT NULL DEFAULT 0,
        hint_ms BIGINT,
        hint_gen BIGINT NOT NULL DEFAULT 0,
        in_file BOOLEAN NOT NULL DEFAULT FALSE,
        attempt_count INTEGER NOT NULL DEFAULT 0,
        due_ms BIGINT,
        PRIMARY KEY (object_class, object_name)
    );
    CREATE INDEX alarms_due ON {SCHEMA}.alarms (shard, due_ms) WHERE due_ms IS NOT NULL;
    CREATE INDEX alarms_state ON {SCHEMA}.alarms (state);
    CREATE TABLE {SCHEMA}.objects (
        object_class TEXT NOT NULL,
        object_name TEXT NOT NULL,
        file TEXT NOT NULL,
        created_ms BIGINT NOT NULL,
        PRIMARY KEY (object_class, object_name)
    );
    CREATE TABLE {SCHEMA}.object_kv (
        object_class TEXT NOT NULL,
        object_name TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (object_class, object_name, key)
    );
    CREATE TABLE {SCHEMA}.object_intents (
        object_class TEXT NOT NULL,
        object_name TEXT NOT NULL,
        gen BIGINT NOT NULL,
        at_ms BIGINT,
        PRIMARY KEY (object_class, object_name)
    );
    CREATE TABLE {SCHEMA}.executions (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        version TEXT NOT NULL,
        status TEXT NOT NULL,
        created_ms BIGINT NOT NULL,
        updated_ms BIGINT NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX executions_status ON {SCHEMA}.executions (status, updated_ms);
    CREATE TABLE {SCHEMA}.operations (
        execution_id TEXT NOT NULL,
        op_id TEXT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (execution_id, op_id)
    );
    CREATE TABLE {SCHEMA}.history (
        execution_id TEXT NOT NULL,
        event_id INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (execution_id, event_id)
    );
    CREATE TABLE {SCHEMA}.ledger (
        key TEXT PRIMARY KEY,
        value TEXT,
        at_ms BIGINT NOT NULL,
        deliveries INTEGER NOT NULL
    );
    CREATE TABLE {SCHEMA}.audit (
        seq BIGSERIAL PRIMARY KEY,
        at_ms BIGINT NOT NULL,
        actor TEXT NOT NULL,
        role TEXT,
        action TEXT NOT NULL,
        target TEXT,
        reason TEXT,
        ok BOOLEAN NOT NULL,
        detail TEXT,
        node TEXT
    );
    CREATE TABLE {SCHEMA}.shards (
        shard INTEGER PRIMARY KEY,
        owner TEXT,
        epoch BIGINT NOT NULL DEFAULT 0,
        expires_ms BIGINT NOT NULL DEFAULT 0,
        offered_to TEXT  -- handed over to this node: others wait until expires_ms
    );
    CREATE TABLE {SCHEMA}.nodes (
        node_id TEXT PRIMARY KEY,
        address TEXT,
        started_ms BIGINT NOT NULL,
        renewed_ms BIGINT NOT NULL,
        stopped_ms BIGINT
    );
    CREATE TABLE {SCHEMA}.leases (
        name TEXT PRIMARY KEY,
        owner TEXT,
        epoch BIGINT NOT NULL DEFAULT 0,
        expires_ms BIGINT NOT NULL DEFAULT 0
    );
    """,
    # The values ctx.now()/ctx.random() gave an execution, and every pending timer of
    # every execution, written with each checkpoint (as on SQLite).
    f"""
    CREATE TABLE {SCHEMA}.execution_marks (
        execution_id TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (execution_id, key)
    );
    CREATE TABLE {SCHEMA}.execution_timers (
        execution_id TEXT NOT NULL,
        op_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        due_ms BIGINT NOT NULL,
        name TEXT,
        PRIMARY KEY (execution_id, op_id, kind)
    );
    CREATE INDEX execution_timers_due ON {SCHEMA}.execution_timers
        (due_ms, execution_id, op_id, kind);
    """,
    # Work the fleet does once, not once per node (a cron fire, the dead-letter
    # reminder): the first node to insert the row runs it.
    f"""
    CREATE TABLE {SCHEMA}.fleet_once (
        name TEXT NOT NULL,
        at_ms BIGINT NOT NULL,
        node_id TEXT NOT NULL,
        PRIMARY KEY (name, at_ms)
    );
    CREATE TABLE {SCHEMA}.faults (
        fault_id TEXT PRIMARY KEY,
        node_id TEXT NOT NULL,
        data TEXT NOT NULL
    );
    """,
    # Operator tools (as on SQLite): an alarm's pause, the timers board's order over
    # every shard (the due index leads with the shard), and bulk batches with their
    # items.
    f"""
    ALTER TABLE {SCHEMA}.alarms ADD COLUMN paused_ms BIGINT;
    CREATE INDEX alarms_board ON {SCHEMA}.alarms (due_ms, object_class, object_name)
        WHERE due_ms IS NOT NULL;
    CREATE INDEX alarms_paused ON {SCHEMA}.alarms (next_attempt_ms, object_class, object_name)
        WHERE paused_ms IS NOT NULL;
    CREATE TABLE {SCHEMA}.bulk_batches (
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
        created_ms BIGINT NOT NULL,
        updated_ms BIGINT NOT NULL,
        ended_ms BIGINT,
        node TEXT,
        prep_after TEXT
    );
    CREATE INDEX bulk_batches_status ON {SCHEMA}.bulk_batches (status);
    CREATE TABLE {SCHEMA}.bulk_items (
        batch_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        key TEXT NOT NULL,
        status TEXT NOT NULL,
        error TEXT,
        detail TEXT,
        PRIMARY KEY (batch_id, seq)
    );
    CREATE INDEX bulk_items_status ON {SCHEMA}.bulk_items (batch_id, status, seq);
    """,
]


def statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]
