"""Rows saved from a damaged runtime database into a fresh one.

Chosen by an operator (`SqliteBackend(on_corrupt_index="quarantine")`): the damaged
file is moved to quarantine first, then every row that can still be read is copied
into the new one, table by table, before the runtime starts using it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote

from alarmtop.core.storage.sqlite import counters
from alarmtop.core.storage.sqlite.alarm_rows import URGENCY_SQL, AlarmRowWriter
from alarmtop.core.storage.sqlite.database import SqliteDatabase

SALVAGE_TABLES = ("alarms", "executions", "operations", "history", "ledger", "audit")


def _salvaged_columns(conn: sqlite3.Connection, old: sqlite3.Connection,
                      table: str) -> list[str]:
    """The columns of `table` in the damaged file that this one can take: a column
    this file computes itself (generated) or does not have is left out."""
    have = [d[0] for d in old.execute(f"SELECT * FROM {table} LIMIT 0").description]
    # table_xinfo's `hidden`: 0 a column, 2 and 3 generated (virtual, stored).
    writable = {r[1] for r in conn.execute(f"PRAGMA table_xinfo({table})") if r[6] == 0}
    return [c for c in have if c in writable]


def _copy_table(conn: sqlite3.Connection, old: sqlite3.Connection, table: str,
                out: dict[str, Any]) -> None:
    rows: list[tuple[Any, ...]] = []
    try:
        columns = _salvaged_columns(conn, old, table)
        cur = old.execute(f"SELECT {', '.join(columns)} FROM {table}")
        for row in cur:  # keep what was read before a damaged page
            rows.append(tuple(row))
    except sqlite3.Error as exc:
        out[f"{table}_error"] = str(exc)
        if not rows:
            out[table] = 0
            return
    marks = ",".join("?" * len(columns))
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.executemany(f"INSERT OR IGNORE INTO {table} ({', '.join(columns)}) "
                         f"VALUES ({marks})", rows)
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        out[f"{table}_error"] = str(exc)
        rows = []
    out[table] = len(rows)


def _salvage(conn: sqlite3.Connection, writer: AlarmRowWriter, source: Path) -> dict[str, Any]:
    """Copy every row that can still be read from `source` (a quarantined copy)."""
    out: dict[str, Any] = {}
    try:
        old = sqlite3.connect(f"file:{quote(str(source))}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        return {"error": f"unreadable: {exc}"}
    try:
        for table in SALVAGE_TABLES:
            _copy_table(conn, old, table, out)
        # Rows from a file older than the urgency column came without it, and the
        # alarm rows were copied in behind the counters: count them again.
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(f"UPDATE alarms SET urgency = {URGENCY_SQL}")
            counters.rebuild(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        writer.states.clear()
        writer.committed(conn)
    finally:
        old.close()
    return out


async def salvage_into(db: SqliteDatabase, writer: AlarmRowWriter,
                       source: Path) -> dict[str, Any]:
    """Salvage the readable rows of a quarantined runtime database into `db` (before the
    runtime starts using it); returns rows kept per table."""
    return await db.run(lambda: _salvage(db.conn, writer, source), doing="salvaging into")
