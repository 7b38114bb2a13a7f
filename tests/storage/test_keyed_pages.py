"""Keyed pages on real SQLite files: the rows of the old OFFSET order, page by page,
with every filter; the objects index; listings on the read connection.

The old queries are written out here as they were (ORDER BY over a CASE expression,
LIMIT/OFFSET): what the console showed before must be what it shows now.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from alarmtop.core.model import keys
from alarmtop.core.model.alarm_policy import AlarmRecord, AlarmState
from alarmtop.core.model.operations import ExecutionRecord, ExecutionStatus
from alarmtop.core.storage.sqlite.alarm_rows import URGENCY_SQL
from tests.storage.runtime_db import RuntimeDb

START_MS = 1_800_000_000_000
PAGE = 7
OLD_ALARM_ORDER = ("CASE state WHEN 'dead' THEN 0 WHEN 'retrying' THEN 1 WHEN 'running' "
                   "THEN 2 ELSE 3 END, retry_count DESC, next_attempt_ms, object_class, "
                   "object_name")
OLD_EXECUTION_ORDER = ("CASE status WHEN 'needs_human' THEN 0 WHEN 'failed' THEN 1 WHEN "
                       "'running' THEN 2 WHEN 'suspended' THEN 3 ELSE 4 END, updated_ms DESC, "
                       "id")


@pytest.fixture
async def index(tmp_path: Path) -> AsyncIterator[RuntimeDb]:
    idx = RuntimeDb(tmp_path / "runtime.sqlite")
    await idx.open()
    yield idx
    await idx.close()


def mixed_alarms(n: int = 240, seed: int = 7) -> list[AlarmRecord]:
    """Every state, retry counts from 0 to 7, many ties on the next attempt (a few
    distinct times), three classes, names that share substrings."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        state = rng.choice([AlarmState.PENDING] * 4 + [AlarmState.RUNNING, AlarmState.RETRYING,
                                                        AlarmState.DEAD])
        retries = 0 if state is AlarmState.PENDING else rng.randint(0, 7)
        nxt = None if state is AlarmState.DEAD else START_MS + 1000 * rng.randint(0, 5)
        cls = rng.choice(["Lease", "Flaky", "Clicks"])
        out.append(AlarmRecord(cls, f"t{rng.randint(0, 30)}-{i:03d}", START_MS, state, retries,
                               nxt, "boom" if retries else None,
                               started_ms=START_MS if state is AlarmState.RUNNING else None))
    return out


def old_filters(state: str | None, text: str | None) -> tuple[str, list[Any]]:
    terms, params = [], []
    if state:
        terms.append("state = ?")
        params.append(state)
    if text:
        terms.append("instr(object_class || '/' || object_name, ?) > 0")
        params.append(text)
    return ("WHERE " + " AND ".join(terms) if terms else ""), params


def old_pages(path: Path, sql: str, params: list[Any]) -> list[list[tuple[Any, ...]]]:
    """The listing by OFFSET, as the server paged it before: one query per page."""
    conn = sqlite3.connect(path)
    try:
        pages: list[list[tuple[Any, ...]]] = []
        offset = 0
        while True:
            rows = conn.execute(f"{sql} LIMIT ? OFFSET ?", [*params, PAGE, offset]).fetchall()
            if not rows:
                return pages
            pages.append(rows)
            offset += PAGE
    finally:
        conn.close()


async def keyed_pages(fetch: Callable[[Any], Awaitable[list[Any]]],
                      cursor_of: Callable[[Any], Any]) -> list[list[Any]]:
    pages: list[list[Any]] = []
    after = None
    while True:
        page = await fetch(after)
        if not page:
            return pages
        pages.append(page)
        after = cursor_of(page[-1])


def alarm_cursor(rec: AlarmRecord) -> tuple[Any, ...]:
    return (keys.alarm_urgency(rec.state.value, rec.retry_count, rec.next_attempt_ms),
            rec.object_class, rec.object_name)


@pytest.mark.parametrize(("state", "text"), [
    (None, None), ("pending", None), ("running", None), ("retrying", None), ("dead", None),
    (None, "t1"), ("retrying", "Flaky/t2"), (None, "nobody")])
async def test_keyed_alarm_pages_are_the_old_offset_pages(
        index: RuntimeDb, state: str | None, text: str | None) -> None:
    await index.write(mixed_alarms()[:120])
    await index.write(mixed_alarms()[120:])
    where, params = old_filters(state, text)
    old = old_pages(index.path, f"SELECT object_class, object_name FROM alarms {where} "
                    f"ORDER BY {OLD_ALARM_ORDER}", params)
    new = await keyed_pages(lambda after: index.alarm_page(after, PAGE, state=state,
                                                           contains=text), alarm_cursor)
    assert [[r.key for r in page] for page in new] == old
    if state is None and text is None:
        assert len(old) > 30  # every state is there, with ties: not a trivial listing
    backwards = await keyed_pages(lambda after: index.alarm_page(
        after, PAGE, state=state, contains=text, desc=True), alarm_cursor)
    assert [r.key for p in backwards for r in p] == [k for p in old for k in p][::-1]


async def test_keyed_pages_by_object_and_from_a_cursor_with_an_offset(
        index: RuntimeDb) -> None:
    await index.write(mixed_alarms())
    old = old_pages(index.path, "SELECT object_class, object_name FROM alarms WHERE "
                    "state = 'dead' ORDER BY object_class, object_name", [])
    new = await keyed_pages(lambda after: index.alarm_page(after, PAGE, state="dead",
                                                           order="object"),
                            lambda r: r.key)
    assert [[r.key for r in p] for p in new] == old
    every = [k for p in old_pages(index.path, "SELECT object_class, object_name FROM alarms "
                                  f"ORDER BY {OLD_ALARM_ORDER}", []) for k in p]
    tenth = (await index.alarm_page(None, 10))[-1]
    skipped = await index.alarm_page(alarm_cursor(tenth), 5, offset=3)
    assert [r.key for r in skipped] == every[13:18]


async def test_the_old_offset_page_call_keeps_its_order(index: RuntimeDb) -> None:
    await index.write(mixed_alarms())
    old = old_pages(index.path, f"SELECT object_class, object_name FROM alarms ORDER BY "
                    f"{OLD_ALARM_ORDER}", [])
    assert [r.key for r in await index.page(PAGE, 3 * PAGE)] == old[3]
    assert [r.key for r in await index.page(-1)] == [k for p in old for k in p]


async def test_the_stored_urgency_is_the_key_function_and_its_sql(
        index: RuntimeDb) -> None:
    """Every row's urgency column is what `keys.alarm_urgency` says, and the SQL used for
    rows salvaged from older files computes the same."""
    await index.write(mixed_alarms())

    def read(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
        return conn.execute(f"SELECT state, retry_count, next_attempt_ms, urgency, "
                            f"{URGENCY_SQL} FROM alarms").fetchall()
    rows = await index.read_only(read)
    assert rows and all(u == keys.alarm_urgency(s, r, n) == sql for s, r, n, u, sql in rows)


def execution(eid: str, status: ExecutionStatus, updated_ms: int,
              name: str = "festival") -> ExecutionRecord:
    return ExecutionRecord(eid, name, "1", status, "{}", START_MS, updated_ms)


@pytest.mark.parametrize(("status", "text"), [
    (None, None), ("needs_human", None), ("succeeded", None), ("aborted", None),
    (None, "festival/e1"), ("running", "e2")])
async def test_keyed_execution_pages_are_the_old_offset_pages(
        index: RuntimeDb, status: str | None, text: str | None) -> None:
    store = index.log
    rng = random.Random(3)
    for i in range(150):
        st = rng.choice(list(ExecutionStatus))
        await store.checkpoint(f"e{i:03d}", execution(f"e{i:03d}", st,
                                                      START_MS + 1000 * rng.randint(0, 6),
                                                      rng.choice(["festival", "refund"])))
    terms, params = [], []
    if status:
        terms, params = ["status = ?"], [status]
    if text:
        terms.append("instr(name || '/' || id, ?) > 0")
        params.append(text)
    where = "WHERE " + " AND ".join(terms) if terms else ""
    old = old_pages(index.path, f"SELECT id FROM executions {where} ORDER BY "
                    f"{OLD_EXECUTION_ORDER}", params)
    new = await keyed_pages(
        lambda after: store.page(after, PAGE, status=status, contains=text),
        lambda r: (keys.execution_urgency(r.status.value, r.updated_ms), r.id))
    assert [[(r.id,) for r in p] for p in new] == old
    assert await store.count(status, text) == sum(map(len, old))


async def test_audit_pages_by_seq_both_ways(index: RuntimeDb) -> None:
    for i in range(20):
        await index.audit.audit_append({"at_ms": START_MS + i, "actor": "op", "action": f"a{i}"})
    newest = await keyed_pages(lambda after: index.audit.audit_page(after, PAGE),
                               lambda r: (r["seq"],))
    assert [r["action"] for p in newest for r in p] == [f"a{i}" for i in range(19, -1, -1)]
    oldest = await keyed_pages(lambda after: index.audit.audit_page(after, PAGE, desc=False),
                               lambda r: (r["seq"],))
    assert [r["action"] for p in oldest for r in p] == [f"a{i}" for i in range(20)]


async def test_objects_known_by_storage_alarm_or_execution(index: RuntimeDb) -> None:
    """The objects index holds an object while anything knows it: its database, its
    alarm row or its execution; an object known only by its alarm leaves with it."""
    store = index.log
    await index.write([AlarmRecord("Q", "only-alarm", START_MS, next_attempt_ms=START_MS),
                       AlarmRecord("Q", "both", START_MS, next_attempt_ms=START_MS),
                       AlarmRecord("Q", "dead", START_MS, AlarmState.DEAD, 6)],
                      extra=index.object_write(("Q", "both"), "both.sqlite", START_MS))
    await index.write([], extra=index.object_write(("Q", "stored"), "stored.sqlite", START_MS))
    await store.checkpoint("e1", execution("e1", ExecutionStatus.SUSPENDED, START_MS))
    page = await index.object_page(None, 50)
    assert [(e.object_class, e.object_name, e.stored, e.execution, e.alarm_state)
            for e in page] == [
        ("Execution", "e1", False, True, None), ("Q", "both", True, False, "pending"),
        ("Q", "dead", False, False, "dead"), ("Q", "only-alarm", False, False, "pending"),
        ("Q", "stored", True, False, None)]
    assert next(e for e in page if e.object_name == "dead").next_attempt_ms is None
    await index.write([], [("Q", "only-alarm"), ("Q", "both")])
    left = await index.object_page(None, 50)
    assert [e.object_name for e in left] == ["e1", "both", "dead", "stored"]  # both: a file
    assert left[1].alarm_state is None
    assert index.counters().known == 4 and await index.count_known() == 4
    assert await index.count_known("Q/") == 3
    second = await index.object_page(("Execution", "e1"), 1)
    assert [e.object_name for e in second] == ["both"]
    assert [e.object_name for e in await index.object_page(None, 2, desc=True)] == [
        "stored", "dead"]


async def test_a_text_filter_count_and_a_state_count(index: RuntimeDb) -> None:
    recs = mixed_alarms()
    await index.write(recs)
    assert await index.count("dead") == sum(r.state is AlarmState.DEAD for r in recs)
    assert await index.count(None, "Flaky/t1") == sum(
        "Flaky/t1" in f"{r.object_class}/{r.object_name}" for r in recs)
    assert await index.count("pending", "t2") == sum(
        r.state is AlarmState.PENDING and "t2" in f"{r.object_class}/{r.object_name}"
        for r in recs)


# -- the read connection ---------------------------------------------------------------------


async def test_a_listing_does_not_wait_for_a_commit_in_progress(
        index: RuntimeDb) -> None:
    """A commit is held open on the writer's thread (its transaction has written rows and
    not committed): a page still answers, from the last commit."""
    await index.write(mixed_alarms(20))
    inside, release = threading.Event(), threading.Event()

    def held(conn: sqlite3.Connection) -> None:
        conn.execute("DELETE FROM alarms")
        inside.set()
        release.wait(10)

    write = index.submit(extra=held)
    await asyncio.to_thread(inside.wait, 10)
    try:
        page = await asyncio.wait_for(index.alarm_page(None, 50), 5)
        assert len(page) == 20  # the snapshot of the last commit, not the half-done one
        assert (await asyncio.wait_for(index.recount(), 5)).alarms["pending"] == sum(
            r.state is AlarmState.PENDING for r in mixed_alarms(20))
    finally:
        release.set()
    await write
    assert await index.alarm_page(None, 50) == []


async def test_a_commit_does_not_wait_for_a_listing_in_progress(
        index: RuntimeDb) -> None:
    """A listing is held in the middle of its read (the read connection's thread is
    stuck inside SQLite): writes commit all the same, and the listing then answers
    from the snapshot it started on."""
    await index.write(mixed_alarms(20))
    inside, release = threading.Event(), threading.Event()

    def stuck(conn: sqlite3.Connection) -> int:
        def wait(_: Any) -> int:
            inside.set()
            release.wait(10)
            return 1
        conn.create_function("wait_here", 1, wait)
        return len(conn.execute("SELECT object_name, wait_here(object_name) FROM alarms "
                                "LIMIT 1").fetchall() + conn.execute(
            "SELECT object_name FROM alarms").fetchall()) - 1

    listing = asyncio.ensure_future(index.read_only(stuck))
    await asyncio.to_thread(inside.wait, 10)
    try:
        more = [AlarmRecord("More", f"m{i}", START_MS, next_attempt_ms=START_MS)
                for i in range(5)]
        await asyncio.wait_for(index.write(more), 5)
        await asyncio.wait_for(index.write([], [r.key for r in more[:2]]), 5)
        assert index.counters().alarms["pending"] == sum(
            r.state is AlarmState.PENDING for r in mixed_alarms(20)) + 3
    finally:
        release.set()
    assert await listing == 20 + 3  # each statement sees the last commit when it starts


# -- served by an index ------------------------------------------------------------------------


def plans(conn: sqlite3.Connection, statements: list[str]) -> list[str]:
    """SQLite's query plan of each statement (its steps, one string each)."""
    out = []
    for sql in statements:
        if sql.lstrip().upper().startswith("SELECT"):
            out += [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql)]
    return out


async def test_pages_and_lookups_search_an_index_and_never_scan_or_sort_a_table(
        index: RuntimeDb) -> None:
    """Every page (any filter but text, either direction, from a cursor), the lookups a
    batch of writes makes, and the objects listing's lookups seek an index; none walks a
    whole table or sorts one (which is what made a page cost 250-590 ms at a million)."""
    store = index.log
    await index.write(mixed_alarms())
    await store.checkpoint("e1", execution("e1", ExecutionStatus.RUNNING, START_MS))
    seen: list[str] = []
    conns = [index.conn, index._reader._conn]
    for conn in conns:
        assert conn is not None
        conn.set_trace_callback(seen.append)
    try:
        cursor = (keys.alarm_urgency("pending", 0, START_MS), "Lease", "t5")
        for state in (None, "pending", "dead"):
            for desc in (False, True):
                await index.alarm_page(cursor, 10, state=state, desc=desc)
                await index.alarm_page(("Lease", "t5"), 10, state=state, order="object",
                                       desc=desc)
        await store.page((keys.execution_urgency("running", START_MS), "e0"), 10)
        await store.page(None, 10, status="running", desc=True)
        await index.audit.audit_page((5,), 10)
        await index.object_page(("Lease", "t5"), 10)
        await index.known_among([("Lease", "t5-000"), ("Q", "x")])
        await index.write(mixed_alarms(30, seed=9))  # a batch that looks up old states
    finally:
        for conn in conns:
            assert conn is not None
            conn.set_trace_callback(None)
    steps = plans(index.conn, [s for s in seen if "counters" not in s])
    # (`k` is the list of keys a lookup is given: scanning it is the point)
    scans = [s for s in steps if s.startswith("SCAN") and "CONSTANT" not in s and s != "SCAN k"]
    assert len(steps) > 20 and not scans, scans
    assert not [s for s in steps if "TEMP B-TREE" in s], steps


async def test_a_function_listing_seeks_its_index_and_pages_by_key(index: RuntimeDb) -> None:
    """ListDurableExecutionsByFunction's pages: a range of the (function, start, id)
    index from the cursor, newest first or oldest first, never a scan of the
    executions nor a sort; the pages together are the function's executions in order."""
    store = index.log
    aws = {"function": "fn", "qualifier": "$LATEST", "arn": "a"}
    for i in range(40):
        name = ("fn", "other")[i % 4 == 3]
        rec = ExecutionRecord(f"e{i:02d}", name, "$LATEST", ExecutionStatus.RUNNING, "{}",
                              START_MS + (i // 2), START_MS, aws=aws)
        await store.checkpoint(rec.id, rec)
    native = ExecutionRecord("n1", "fn", "1", ExecutionStatus.RUNNING, "{}", START_MS, START_MS)
    await store.checkpoint("n1", native)
    mine = sorted(((START_MS + i // 2, f"e{i:02d}") for i in range(40) if i % 4 != 3),
                  reverse=True)
    seen: list[str] = []
    conn = index._reader._conn
    assert conn is not None
    conn.set_trace_callback(seen.append)
    try:
        for desc in (True, False):
            got, after = [], None
            while True:
                page = await store.by_function("fn", after=after, limit=PAGE, desc=desc)
                if not page:
                    break
                got += [(r.created_ms, r.id) for r in page]
                after = got[-1]
            assert got == (mine if desc else mine[::-1])
    finally:
        conn.set_trace_callback(None)
    steps = plans(index.conn, seen)
    assert steps and all("executions_function" in s for s in steps if "executions" in s), steps
    assert not [s for s in steps if s.startswith("SCAN") or "TEMP B-TREE" in s], steps
