"""The alarm counters, kept by the writer in the transaction of each batch.

A batch knows the new state of every alarm row it writes; the counts change by
what each row was before. Triggers could see that too, but they ran once per row
and cost more than the write itself added elsewhere (a burst fired 13% slower), so
the writer keeps the (state, retry count) of recently written rows in memory
(`StateCache`, only ever what is committed), reads the others in one statement per
batch, and adds up the batch's changes (`tally`) into a handful of UPSERTs of the
counters table in the same transaction: exact after any crash, as the rows are.

Rows of the other tables (executions, objects) are written by other modules: their
counts are kept by triggers (the counters migration, migrations.py).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence

from alarmtop.core.model.alarm_policy import AlarmKey, AlarmRecord
from alarmtop.core.storage.sqlite.schema import statements

Old = tuple[str, int] | None  # (state, retry count) of a row, None: no row
RETRYING = ("retrying", "running")
CHUNK = 400  # keys per lookup (two variables each, far under SQLite's limit)


class StateCache:
    """The committed (state, retry count) of recently written alarm rows, on the
    writer's thread only. Bounded: when full it starts again (a miss costs a read)."""

    def __init__(self, size: int = 50_000) -> None:
        self.size = size
        self._states: dict[AlarmKey, Old] = {}

    def old_states(self, conn: sqlite3.Connection, keys: Iterable[AlarmKey]) -> dict[AlarmKey, Old]:
        states = self._states
        out: dict[AlarmKey, Old] = {}
        missing: list[AlarmKey] = []
        for key in keys:
            if key in states:
                out[key] = states[key]
            else:
                missing.append(key)
        for lo in range(0, len(missing), CHUNK):
            chunk = missing[lo:lo + CHUNK]
            # A join, not `(class, name) IN (VALUES ...)`: SQLite answers that by
            # scanning the whole table.
            found = {(c, n): (s, r) for c, n, s, r in conn.execute(
                "SELECT a.object_class, a.object_name, a.state, a.retry_count FROM (VALUES "
                f"{', '.join(['(?, ?)'] * len(chunk))}) AS k JOIN alarms a ON "
                "a.object_class = k.column1 AND a.object_name = k.column2",
                [v for key in chunk for v in key])}
            for key in chunk:
                out[key] = found.get(key)
        return out

    def committed(self, new: Mapping[AlarmKey, Old]) -> None:
        """The batch's rows are durable: remember them."""
        if len(self._states) + len(new) > self.size:
            self._states = {}
        self._states.update(new)

    def clear(self) -> None:
        """Rows changed behind the writer (a salvage): forget everything."""
        self._states = {}


def new_states(final: Mapping[AlarmKey, AlarmRecord | None]) -> dict[AlarmKey, Old]:
    # The state's text, not the enum member: a tuple of plain values is one the
    # garbage collector stops tracking, and the cache keeps tens of thousands of them
    # (an enum member inside kept every one of them in each full collection's scan).
    return {key: None if rec is None else (rec.state.value, rec.retry_count)
            for key, rec in final.items()}


def tally(old: Mapping[AlarmKey, Old], new: Mapping[AlarmKey, Old]
          ) -> tuple[list[tuple[str, str, int, int]], list[AlarmKey], list[AlarmKey]]:
    """What a batch changes: counter rows to add (kind, name, num, delta), keys that
    gain an alarm row, keys that lose theirs. Pure; run for every row written, so
    spelled out rather than composed."""
    states: dict[str, int] = {}
    retries: dict[tuple[str, int], int] = {}
    gained, lost = [], []
    for key, now in new.items():
        before = old.get(key)
        if before == now:
            continue
        if before is None:
            gained.append(key)
        else:
            state, count = before
            states[state] = states.get(state, 0) - 1
            if count > 0 and state in RETRYING:
                retries[(key[0], count)] = retries.get((key[0], count), 0) - 1
        if now is None:
            lost.append(key)
        else:
            state, count = now
            states[state] = states.get(state, 0) + 1
            if count > 0 and state in RETRYING:
                retries[(key[0], count)] = retries.get((key[0], count), 0) + 1
    rows = [("alarms", str(state), 0, d) for state, d in states.items() if d]
    rows += [("retries", cls, count, d) for (cls, count), d in retries.items() if d]
    return rows, gained, lost


def write_tally(conn: sqlite3.Connection, rows: Sequence[tuple[str, str, int, int]],
                gained: Sequence[AlarmKey], lost: Sequence[AlarmKey]) -> None:
    """Apply a batch's `tally` in the open transaction."""
    if rows:
        conn.executemany("INSERT INTO counters (kind, name, num, n) VALUES (?, ?, ?, ?) "
                         "ON CONFLICT DO UPDATE SET n = n + excluded.n", rows)
    if gained:
        conn.executemany("INSERT INTO known (object_class, object_name, sources) "
                         "VALUES (?, ?, 2) ON CONFLICT DO UPDATE SET sources = sources | 2",
                         gained)
    if lost:
        conn.executemany("UPDATE known SET sources = sources & ~2 WHERE object_class = ? "
                         "AND object_name = ?", lost)
        conn.executemany("DELETE FROM known WHERE object_class = ? AND object_name = ? AND "
                         "sources = 0", lost)


REBUILD = """
DELETE FROM counters WHERE kind IN ('alarms', 'retries');
INSERT INTO counters VALUES ('alarms', 'pending', 0, 0), ('alarms', 'running', 0, 0),
    ('alarms', 'retrying', 0, 0), ('alarms', 'dead', 0, 0);
INSERT INTO counters SELECT 'alarms', state, 0, count(*) FROM alarms GROUP BY state
    ON CONFLICT DO UPDATE SET n = excluded.n;
INSERT INTO counters SELECT 'retries', object_class, retry_count, count(*) FROM alarms
    WHERE retry_count > 0 AND state IN ('retrying', 'running')
    GROUP BY object_class, retry_count;
UPDATE known SET sources = sources & ~2;
INSERT INTO known SELECT object_class, object_name, 2 FROM alarms WHERE true
    ON CONFLICT DO UPDATE SET sources = sources | 2;
DELETE FROM known WHERE sources = 0;
"""


def rebuild(conn: sqlite3.Connection) -> None:
    """Count the alarm rows again from scratch, in the open transaction (after rows were
    copied in behind the writer's back: a salvage)."""
    for stmt in statements(REBUILD):
        conn.execute(stmt)
