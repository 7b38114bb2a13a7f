"""Scale on the ops channel: a snapshot stays small with 100,000 pending alarms, and 200
concurrent viewers all get their welcome, snapshot and the delta of an alarm firing."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from alarmtop.core import AlarmState, Attempt, Runtime, VirtualClock
from alarmtop.core.model.alarm_policy import AlarmRecord
from tests.conftest import START_MS, RuntimeFactory
from tests.server.conftest import VIEWER, Always, Client, ClientFactory, Frame, Quiet, ServerFactory

PENDING = 100_000
DEAD = 5
BATCH = 10_000
HOUR_MS = 3_600_000
SNAPSHOT_LIMIT_BYTES = 200_000
VIEWERS = 200
# Generous bounds for a loaded machine, never speed targets: how fast a snapshot or
# 200 connections go is for the benchmarks.
LOADED_S = 120.0
pytestmark = pytest.mark.timeout(4 * LOADED_S)


async def fill(rt: Runtime) -> None:
    """100,000 pending alarms an hour ahead and 5 dead letters, written straight into the
    alarm index in batches (arming them one RPC at a time would take minutes)."""
    db = rt.backend.database
    for lo in range(0, PENDING, BATCH):
        await db.write([AlarmRecord("Quiet", f"p{i:06d}", START_MS + HOUR_MS + i,
                                       next_attempt_ms=START_MS + HOUR_MS + i)
                           for i in range(lo, lo + BATCH)])
    err = "RuntimeError: downstream unavailable"
    await db.write([AlarmRecord("Always", f"d{i}", START_MS - 10_000, AlarmState.DEAD,
                                   retry_count=6, last_error=err,
                                   attempts=tuple(Attempt(START_MS - 9000 + k, START_MS - 9000 + k,
                                                          err) for k in range(7)))
                       for i in range(DEAD)])


async def test_snapshot_is_bounded_with_100000_pending_alarms(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory) -> None:
    """With 100,000 pending alarms (and 5 dead letters) the snapshot a new client gets is
    well under 200 KB, its counts say 100,000 pending, and its page starts with the dead
    letters (most urgent first). Paging reaches the end; a delta after one alarm fires is
    small too."""
    first = await make_runtime(Quiet, Always)
    await fill(first)
    await first.stop()
    rt = await make_runtime(Quiet, Always)  # a restart: the scheduler loads its window
    server = await serve(rt)

    c = await client(server.url)
    await c.send({"op": "hello", "token": VIEWER})
    assert (await c.recv(LOADED_S))["type"] == "welcome"
    raw = await asyncio.wait_for(c.ws.recv(), LOADED_S)
    size = len(raw.encode() if isinstance(raw, str) else raw)
    snap = json.loads(raw)
    assert snap["type"] == "snapshot"
    assert size < SNAPSHOT_LIMIT_BYTES, f"snapshot is {size} bytes"
    assert snap["counts"]["alarms"] == {"pending": PENDING, "running": 0, "retrying": 0,
                                        "dead": DEAD}
    assert 0 < len(snap["alarms"]) <= 100
    assert [a["object"] for a in snap["alarms"][:DEAD]] == [f"Always/d{i}" for i in range(DEAD)]
    assert all(a["state"] == "dead" for a in snap["alarms"][:DEAD])
    assert snap["alarms"][DEAD]["object"] == "Quiet/p000000"  # then the soonest due

    last = await c.ok("alarms", offset=PENDING + DEAD - 3, limit=50)
    assert last["total"] == PENDING + DEAD
    assert [r["object"] for r in last["rows"]] == [f"Quiet/p{i:06d}" for i in
                                                   range(PENDING - 3, PENDING)]
    filtered = await c.ok("alarms", filter="p09999", state="pending")
    assert filtered["total"] == 10

    await rt.get(Quiet, "tick").arm(1000)
    await clock.advance(1)
    delta = await c.wait_for(lambda f: f["type"] == "delta" and f["fires"] >= 1)
    assert len(json.dumps(delta)) < SNAPSHOT_LIMIT_BYTES
    assert delta["counts"]["alarms"]["pending"] == PENDING
    assert await rt.get(Quiet, "tick").fired() == 1


async def test_200_concurrent_viewers(make_runtime: RuntimeFactory, clock: VirtualClock,
                                      serve: ServerFactory, client: ClientFactory) -> None:
    """200 viewers connect at once: each gets welcome (viewer) then a snapshot; when an
    alarm fires, each receives a delta carrying it (a client that fell behind may get a
    fresh snapshot instead, which must then show the alarm done).

    More connect at once than may wait for their hello at once (`MAX_PENDING`): the
    server cuts the oldest of the address to make room, and a viewer so cut connects
    again, as the console does (with a short pause), until it is in."""
    rt = await make_runtime(Quiet)
    await rt.get(Quiet, "tick").arm(60_000)
    server = await serve(rt)
    cut = 0

    async def join() -> Client:
        nonlocal cut
        while True:
            try:
                c = await client(server.url)
                welcome, snap = await c.hello(VIEWER)
                break
            except (InvalidHandshake, ConnectionClosed, OSError):
                cut += 1
                await asyncio.sleep(0.05)
        assert welcome == {"type": "welcome", "role": "viewer", "protocol": 1}
        assert snap["type"] == "snapshot"
        assert [a["object"] for a in snap["alarms"]] == ["Quiet/tick"]
        return c

    viewers = await asyncio.wait_for(asyncio.gather(*(join() for _ in range(VIEWERS))),
                                     LOADED_S)
    assert server.viewers == VIEWERS and len(server.feed.clients) == VIEWERS, cut
    assert cut <= 4 * VIEWERS, f"{cut} connections cut to let {VIEWERS} in"
    fire_ms = clock.now_ms() + 60_000

    def saw_the_fire(f: Frame) -> bool:
        if f["type"] == "delta":
            return any(e["type"] == "alarm.fired" and e["data"]["object"] == "Quiet/tick"
                       for e in f["events"])
        return (f["type"] == "snapshot" and f["at_ms"] >= fire_ms
                and not any(a["object"] == "Quiet/tick" for a in f["alarms"]))

    waiters = [asyncio.create_task(v.wait_for(saw_the_fire, within=LOADED_S))
               for v in viewers]
    await clock.advance(60)
    assert await rt.get(Quiet, "tick").fired() == 1
    frames: list[Any] = await asyncio.wait_for(asyncio.gather(*waiters), LOADED_S)
    assert len(frames) == VIEWERS
    deltas = sum(f["type"] == "delta" for f in frames)
    assert deltas >= VIEWERS // 2, f"only {deltas} viewers got the delta itself"


async def test_near_exhaustion_count_is_not_capped(make_runtime: RuntimeFactory,
                                                   serve: ServerFactory,
                                                   client: ClientFactory) -> None:
    """With 300 alarms on their last retry, the snapshot's count says 300."""
    rt = await make_runtime(Quiet)
    err = "RuntimeError: downstream unavailable"
    await rt.backend.database.write([
        AlarmRecord("Quiet", f"r{i:03d}", START_MS, AlarmState.RETRYING, retry_count=6,
                    next_attempt_ms=START_MS + HOUR_MS, last_error=err)
        for i in range(300)])
    server = await serve(rt)
    c = await client(server.url)
    _, snap = await c.hello(VIEWER)
    assert snap["counts"]["alarms"]["retrying"] == 300
    assert all(a["near_exhaustion"] for a in snap["alarms"])
    assert snap["counts"]["near_exhaustion"] == 300
