"""Tables both backends define alike, written once: the dialects differ only in the
schema that holds them, the type of an epoch in milliseconds, and how a keyed table
ends (SQLite's `WITHOUT ROWID`)."""

from __future__ import annotations


def bulk_tables(schema: str, ms: str, keyed: str) -> str:
    """The bulk batches and their items (`schema`: "" or "alarmtop." before each name)."""
    return f"""
    CREATE TABLE {schema}bulk_batches (
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
        created_ms {ms} NOT NULL,
        updated_ms {ms} NOT NULL,
        ended_ms {ms},
        node TEXT,
        prep_after TEXT
    ){keyed};
    CREATE INDEX bulk_batches_status ON {schema}bulk_batches (status);
    CREATE TABLE {schema}bulk_items (
        batch_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        key TEXT NOT NULL,
        status TEXT NOT NULL,
        error TEXT,
        detail TEXT,
        PRIMARY KEY (batch_id, seq)
    ){keyed};
    CREATE INDEX bulk_items_status ON {schema}bulk_items (batch_id, status, seq);
    """
