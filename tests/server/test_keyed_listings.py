"""The ops listings paged by key over a real server: `after` the last row's cursor gives
the rows of the offset pages, filters and reversed orders included; cursors that do
not fit are refused; the header, /metrics and the feed read counters, never rows."""

from __future__ import annotations

import asyncio
import sqlite3
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from alarmtop.core import AlarmState, DurableObject, Runtime, VirtualClock
from alarmtop.core.model.alarm_policy import AlarmRecord
from alarmtop.core.storage.sqlite.database import SqliteDatabase
from alarmtop.examples.festival import FestivalServices, build_festival
from alarmtop.server.app import OpsServer
from tests.conftest import START_MS, RuntimeFactory
from tests.server.conftest import OPERATOR, VIEWER, Client, ClientFactory, Quiet, ServerFactory


class Idle(DurableObject):
    """Answers without touching its storage: resident, and known to no table."""

    async def ping(self) -> str:
        return "pong"


async def fill(rt: Runtime) -> None:
    """Dead letters, retries (some near exhaustion) and pending alarms with ties."""
    db = rt.backend.database
    recs = [AlarmRecord("Quiet", f"p{i:02d}", START_MS, next_attempt_ms=START_MS + 1000 * (i % 4))
            for i in range(30)]
    recs += [AlarmRecord("Quiet", f"r{i}", START_MS, AlarmState.RETRYING, retry_count=i % 7,
                         next_attempt_ms=START_MS + 500) for i in range(9)]
    recs += [AlarmRecord("Quiet", f"d{i}", START_MS, AlarmState.DEAD, retry_count=6)
             for i in range(4)]
    await db.write(recs)


async def walk(c: Client, op: str, limit: int, **args: Any) -> list[list[dict[str, Any]]]:
    """Every page of a listing, each after the last row's cursor of the one before."""
    pages: list[list[dict[str, Any]]] = []
    after = None
    while True:
        page = await c.ok(op, limit=limit, **args, **({"after": after} if after else {}))
        assert len(page["cursors"]) == len(page["rows"])
        if not page["rows"]:
            return pages
        pages.append(page["rows"])
        after = page["cursors"][-1]


async def by_offset(c: Client, op: str, limit: int, **args: Any) -> list[list[dict[str, Any]]]:
    pages: list[list[dict[str, Any]]] = []
    offset = 0
    while True:
        page = await c.ok(op, limit=limit, offset=offset, **args)
        if not page["rows"]:
            return pages
        pages.append(page["rows"])
        offset += limit


def names(pages: list[list[dict[str, Any]]], field: str = "object") -> list[list[str]]:
    return [[r[field] for r in p] for p in pages]


@pytest.mark.parametrize("args", [{}, {"state": "retrying"}, {"filter": "p1"},
                                  {"desc": True}, {"sort": "object"},
                                  {"sort": "object", "desc": True, "state": "dead"}])
async def test_alarm_pages_by_key_are_the_offset_pages(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory,
        args: dict[str, Any]) -> None:
    rt = await make_runtime(Quiet)
    await fill(rt)
    v = await client((await serve(rt)).url, VIEWER)
    keyed = await walk(v, "alarms", 4, **args)
    assert names(keyed) == names(await by_offset(v, "alarms", 4, **args))
    assert sum(map(len, keyed)) == (await v.ok("alarms", limit=1, **args))["total"]
    if not args:
        first = [r["object"] for r in keyed[0]]
        assert first == ["Quiet/d0", "Quiet/d1", "Quiet/d2", "Quiet/d3"]  # most urgent


async def test_a_cursor_that_does_not_fit_is_refused_and_named(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory) -> None:
    rt = await make_runtime(Quiet)
    await fill(rt)
    v = await client((await serve(rt)).url, VIEWER)
    for fields in ({"after": ["Quiet", "p01"]}, {"after": [1, 2, 3]},
                   {"after": ["Quiet", "p01"], "sort": "due"}):
        refused = await v.request("alarms", **fields)
        assert refused["ok"] is False and "'after'" in refused["error"], refused
    bounded = await v.ok("alarms", sort="due")
    assert "cursors" not in bounded  # a bounded sort pages by offset
    assert "cursors" not in await v.ok("audit", filter="x")


async def test_executions_and_audit_page_by_key(make_runtime: RuntimeFactory,
                                                clock: VirtualClock, serve: ServerFactory,
                                                client: ClientFactory) -> None:
    rt = await make_runtime()
    rt.register_execution(build_festival(FestivalServices(rt.ledger)))
    for i in range(7):
        await rt.executions.start("festival-stream", {"eventId": f"e{i}",
                                                      "startsInSeconds": 3600 + i},
                                  execution_id=f"e{i}")
        await clock.advance(1)
    op = await client((await serve(rt)).url, OPERATOR)
    for i in range(5):
        await op.ok("inject_fault", target=f"Quiet/x{i}", kind="alarm_raise", reason=f"r{i}")
    keyed = await walk(op, "executions", 3)
    assert names(keyed, "execution_id") == names(await by_offset(op, "executions", 3),
                                                 "execution_id")
    assert sum(map(len, keyed)) == 7
    assert names(await walk(op, "executions", 2, filter="e1"), "execution_id") == [["e1"]]
    audit = await walk(op, "audit", 2)
    assert [r["reason"] for p in audit for r in p] == [f"r{i}" for i in range(4, -1, -1)]
    oldest = await walk(op, "audit", 2, desc=False)
    assert [r["reason"] for p in oldest for r in p] == [f"r{i}" for i in range(5)]


async def test_objects_page_by_key_with_resident_ones_merged(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory) -> None:
    """Objects known to storage and a resident one with nothing stored are one listing,
    by name, whichever page they fall on; the total counts them all."""
    rt = await make_runtime(Quiet, Idle)
    for i in range(6):
        await rt.get(Quiet, f"a{i}").arm(60_000)
    await rt.get(Quiet, "s1").touch()
    await rt.get(Idle, "b-resident").ping()
    assert ("Idle", "b-resident") in rt.resident_objects()
    assert await rt.backend.alarm_rows.known_among([("Idle", "b-resident")]) == set()
    v = await client((await serve(rt)).url, VIEWER)
    pages = await walk(v, "objects", 3)
    every = [r["object"] for p in pages for r in p]
    assert every == sorted(every) and "Idle/b-resident" in every and "Quiet/s1" in every
    assert (await v.ok("objects", limit=1))["total"] == len(every) == 8
    backwards = await walk(v, "objects", 3, desc=True)
    assert [r["object"] for p in backwards for r in p] == every[::-1]
    assert [r["object"] for r in (await v.ok("objects", filter="resident"))["rows"]] == [
        "Idle/b-resident"]


# -- counts come from the counters ------------------------------------------------------------


@contextmanager
def statements(db: SqliteDatabase) -> Iterator[list[str]]:
    """Every SQL statement either connection of the runtime database runs meanwhile."""
    seen: list[str] = []
    conns: list[sqlite3.Connection] = [db.conn]
    if db._reader._conn is not None:
        conns.append(db._reader._conn)
    for conn in conns:
        conn.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        for conn in conns:
            conn.set_trace_callback(None)


def counting(seen: list[str]) -> list[str]:
    return [s for s in seen if "count(" in s.lower() or "group by" in s.lower()]


async def scrape(server: OpsServer, token: str | None = None) -> tuple[int, str]:
    def get() -> tuple[int, str]:
        req = urllib.request.Request(f"http://127.0.0.1:{server.port}/metrics")
        if token is not None:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, exc.read().decode()
    return await asyncio.to_thread(get)


async def test_metrics_and_the_header_read_counters_not_rows(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory) -> None:
    """A scrape and the header's counts run no SQL at all, and a snapshot no count(*)
    and no GROUP BY: they cost the same with a thousand alarms or a million."""
    rt = await make_runtime(Quiet)
    await fill(rt)
    server = await serve(rt)
    # Settled first: the audit log's prune at start (a task of its own, which a loaded
    # machine may run late) reads the audit table, and is no part of a scrape.
    await clock.advance(0)
    db = rt.backend.database
    assert isinstance(db, SqliteDatabase)
    with statements(db) as seen:
        status, body = await scrape(server)
        counts = await server.ops.counts()
    assert status == 200 and seen == [], seen
    with statements(db) as seen:
        snapshot_counts = (await server.ops.snapshot())["counts"]
    assert seen and counting(seen) == [], counting(seen)
    assert 'alarmtop_alarms{state="retrying"} 9.0' in body
    assert "alarmtop_dead_letters 4.0" in body
    assert "alarmtop_alarms_near_exhaustion 1.0" in body  # r6: its 6th retry is its last
    assert counts == snapshot_counts
    assert counts["alarms"] == {"pending": 30, "running": 0, "retrying": 9, "dead": 4}
    assert counts["known"] == 43 and counts["near_exhaustion"] == 1


async def test_metrics_token(make_runtime: RuntimeFactory, serve: ServerFactory) -> None:
    server = await serve(await make_runtime(Quiet))
    server.metrics.token = "scrape-me"
    assert (await scrape(server))[0] == 401
    assert (await scrape(server, "wrong"))[0] == 401
    status, body = await scrape(server, "scrape-me")
    assert status == 200 and "alarmtop_dead_letters" in body
