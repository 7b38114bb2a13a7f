"""Keyed pages, the objects index and the counters, on every backend (SQLite and
PostgreSQL, through a started runtime): each page follows `keys.py`'s order, a cursor
means the same row everywhere, and the counters equal a recount."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from alarmtop.core import PostgresBackend, Runtime, VirtualClock
from alarmtop.core.model import keys
from alarmtop.core.model.alarm_policy import AlarmRecord, AlarmState
from alarmtop.core.model.operations import ExecutionRecord, ExecutionStatus
from alarmtop.core.storage.postgres.backend import shard_of
from alarmtop.core.storage.postgres.schema import MIGRATIONS, SCHEMA, statements
from tests.conftest import START_MS, RuntimeFactory

PAGE = 7


def mixed_alarms(n: int = 150, seed: int = 3) -> list[AlarmRecord]:
    """Every state, retries 0-7, ties on the next attempt, names that share text and
    that byte order and a dictionary order would sort apart ('B' < 'a' < 'ä')."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        state = rng.choice([AlarmState.PENDING] * 3 + [AlarmState.RUNNING, AlarmState.RETRYING,
                                                        AlarmState.DEAD])
        retries = 0 if state is AlarmState.PENDING else rng.randint(0, 7)
        nxt = None if state is AlarmState.DEAD else START_MS + 1000 * rng.randint(0, 4)
        cls = rng.choice(["Lease", "Flaky", "flaky"])
        name = rng.choice(["B", "a", "ä", "t1", "t2-x"]) + f"-{i:03d}"
        out.append(AlarmRecord(cls, name, START_MS, state, retries, nxt,
                               "boom" if retries else None,
                               started_ms=START_MS if state is AlarmState.RUNNING else None))
    return out


def urgency_key(rec: AlarmRecord) -> tuple[Any, ...]:
    return (keys.alarm_urgency(rec.state.value, rec.retry_count, rec.next_attempt_ms),
            rec.object_class, rec.object_name)


async def every_page(fetch: Callable[[Any], Awaitable[list[Any]]],
                     cursor_of: Callable[[Any], Any]) -> list[Any]:
    rows: list[Any] = []
    after = None
    while True:
        page = await fetch(after)
        assert len(page) <= PAGE
        if not page:
            return rows
        rows += page
        after = cursor_of(page[-1])


@pytest.mark.parametrize(("state", "text"), [
    (None, None), ("pending", None), ("retrying", None), ("dead", None), (None, "t1"),
    ("running", "a-"), (None, "nobody")])
async def test_alarm_pages_by_key_in_both_orders_and_directions(
        make_runtime: RuntimeFactory, state: str | None, text: str | None) -> None:
    rt = await make_runtime()
    db, rows = rt.backend.database, rt.backend.alarm_rows
    alarms = mixed_alarms()
    await db.write(alarms[:80])
    await db.write(alarms[80:])
    kept = [r for r in alarms if (state is None or r.state.value == state)
            and (text is None or text in f"{r.object_class}/{r.object_name}")]
    for order, key in (("urgency", urgency_key), ("object", lambda r: r.key)):
        expected = [r.key for r in sorted(kept, key=key)]
        for desc in (False, True):
            got = await every_page(lambda after, o=order, d=desc: rows.alarm_page(
                after, PAGE, state=state, contains=text, order=o, desc=d), key)
            assert [r.key for r in got] == (expected[::-1] if desc else expected), (order, desc)
    assert await rows.count(state, text) == len(kept)
    if kept:
        first = sorted(kept, key=urgency_key)
        skipped = await rows.alarm_page(urgency_key(first[0]), 3, offset=2, state=state,
                                         contains=text)
        assert [r.key for r in skipped] == [r.key for r in first[3:6]]


async def test_counters_are_a_recount_and_objects_are_known_by_any_source(
        make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime()
    db, rows, store = rt.backend.database, rt.backend.alarm_rows, rt.backend.execution_log
    alarms = mixed_alarms(60)
    await db.write(alarms)
    await db.write([], [alarms[0].key, alarms[1].key])
    changed = [AlarmRecord(r.object_class, r.object_name, START_MS, AlarmState.RETRYING, 3,
                           START_MS + 5) for r in alarms[2:12]]
    await db.write(changed)
    for i, status in enumerate([ExecutionStatus.RUNNING, ExecutionStatus.NEEDS_HUMAN,
                                ExecutionStatus.RUNNING]):
        rec = ExecutionRecord(f"e{i}", "job", "1", status, "{}", START_MS, START_MS + i)
        await store.checkpoint(rec.id, rec)
    done = ExecutionRecord("e0", "job", "1", ExecutionStatus.SUCCEEDED, "{}", START_MS,
                           START_MS + 9)
    await store.checkpoint("e0", done)
    counts = rows.counters()
    assert counts == await rows.recount()
    assert dict(counts.executions) == {"running": 1, "needs_human": 1, "succeeded": 1}
    assert counts.alarms["retrying"] >= 10
    assert await store.count() == 3 and await store.count("running") == 1
    assert await store.count(None, "job/e1") == 1

    live = {r.key for r in alarms[2:]}
    expected = sorted(live | {("Execution", f"e{i}") for i in range(3)})
    got = await every_page(lambda after: rows.object_page(after, PAGE),
                           lambda e: (e.object_class, e.object_name))
    assert [(e.object_class, e.object_name) for e in got] == expected
    assert counts.known == len(expected) == await rows.count_known()
    assert [e.execution for e in got] == [k[0] == "Execution" for k in expected]
    assert await rows.known_among([alarms[0].key, alarms[5].key, ("Execution", "e2")]) == {
        alarms[5].key, ("Execution", "e2")}

    pages = await every_page(lambda after: store.page(after, PAGE),
                             lambda r: (keys.execution_urgency(r.status.value, r.updated_ms),
                                        r.id))
    assert [r.id for r in pages] == ["e1", "e2", "e0"]  # needs a human, running, done


async def test_audit_pages_by_seq_both_ways(make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime()
    store = rt.backend.audit_rows
    for i in range(12):
        await store.audit_append({"at_ms": START_MS + i, "actor": "t", "action": f"a{i}",
                                  "ok": True, "detail": {"i": i}})
    newest = await every_page(lambda after: store.audit_page(after, PAGE), lambda r: (r["seq"],))
    oldest = await every_page(lambda after: store.audit_page(after, PAGE, desc=False),
                              lambda r: (r["seq"],))
    assert [r["action"] for r in newest] == [f"a{i}" for i in range(11, -1, -1)]
    assert oldest == newest[::-1] and newest[0]["detail"] == {"i": 11}


async def test_a_postgres_schema_of_the_version_before_is_counted_when_migrated(
        pg_dsn: str, clock: VirtualClock, data_dir: Path) -> None:
    """A fleet database made before the counters (the schema version before), with rows of every
    kind: the migration counts them, indexes them by key, and the counters then
    follow the writes of two nodes at once."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(f"CREATE SCHEMA {SCHEMA}")
        await conn.execute(f"CREATE TABLE {SCHEMA}.meta (key TEXT PRIMARY KEY, value TEXT "
                           "NOT NULL)")
        before = next(i for i, m in enumerate(MIGRATIONS) if ".counters" in m)
        for script in MIGRATIONS[:before]:
            for stmt in statements(script):
                await conn.execute(stmt)
        await conn.execute(f"INSERT INTO {SCHEMA}.meta VALUES ('schema', $1)", str(before))
        await conn.executemany(
            f"INSERT INTO {SCHEMA}.alarms (object_class, object_name, shard, scheduled_ms, "
            "state, retry_count, next_attempt_ms, due_ms) VALUES ($1,$2,$3,$4,$5,$6,$7,$7)",
            [(c, n, shard_of((c, n), 8), START_MS, state, retries, nxt)
             for c, n, state, retries, nxt in [
                 ("A", "p1", "pending", 0, START_MS + 5), ("A", "r1", "retrying", 3,
                                                           START_MS + 9),
                 ("B", "d1", "dead", 6, None), ("B", "s1", "pending", 0, START_MS + 1)]])
        await conn.execute(f"INSERT INTO {SCHEMA}.objects VALUES ('B', 's1', 's1', 0), "
                           "('C', 'only-file', 'o', 0)")
        await conn.execute(f"INSERT INTO {SCHEMA}.executions VALUES ('e1', 'job', '1', "
                           "'needs_human', 0, 0, '{{}}')")
    finally:
        await conn.close()
    nodes = [Runtime(data_dir / n, clock=clock, backend=PostgresBackend(pg_dsn, n, shards=8))
             for n in ("n1", "n2")]
    for rt in nodes:
        await rt.start()
    try:
        rows = nodes[0].backend.alarm_rows
        counts = rows.counters()
        assert counts == await rows.recount()
        assert counts.alarms == {"pending": 2, "retrying": 1, "running": 0, "dead": 1}
        assert dict(counts.retries) == {("A", 3): 1}
        assert dict(counts.executions) == {"needs_human": 1}
        assert (counts.stored, counts.known) == (2, 6)  # 4 alarms + 1 file only + e1
        assert [r.object_name for r in await rows.alarm_page(None, 10)] == [
            "d1", "r1", "s1", "p1"]
        # Each node writes the alarms of the shards it holds, at the same time.
        backends = [rt.backend for rt in nodes]
        assert all(isinstance(b, PostgresBackend) for b in backends)
        for _ in range(4):  # lease rounds, until the shards are shared out
            for b in backends:
                await b.keep_leases_once()
        assert all(b.owned_shards() for b in backends)
        writes = [b.database.write([r]) for r in mixed_alarms(120) for b in backends
                  if b.shard_of(r.key) in b.owned_shards()]
        await asyncio.gather(*writes)
        await nodes[1].backend.database.write([])  # reads the counters back
        assert nodes[1].backend.alarm_rows.counters() == await rows.recount()
    finally:
        for rt in nodes:
            await rt.stop()
