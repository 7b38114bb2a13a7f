"""Nodes in separate processes on one real PostgreSQL, on the wall clock: calls reach
the owner from any node; one event at a time per object holds across nodes; a
SIGKILLed node's alarms fire elsewhere within `lease_s` + 2 s, nothing lost; a
SIGSTOPped node that lost its leases commits nothing more for those shards.

Leases are short (1.5 s) so each test takes seconds; bounds are generous, the exact
failover time is a benchmark figure (bench/fleet_failover.py)."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from alarmtop.core import PostgresBackend, Runtime
from alarmtop.core.errors import NodeUnreachable
from tests.fleet import node_worker
from tests.fleet.conftest import until
from tests.fleet.processes import Worker

LEASE_S = 1.5
SHARDS = 8
Fleet = Callable[..., Awaitable[tuple[Runtime, list[Worker]]]]


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
async def fleet(pg_dsn: str, tmp_path: Path) -> AsyncIterator[Fleet]:
    """This test's own node ("t", in process) and worker nodes w1..wN, balanced."""
    made: list[Runtime] = []
    workers: list[Worker] = []

    async def start(n: int) -> tuple[Runtime, list[Worker]]:
        node_worker.NODE = "t"
        node_worker.LOG_FD = os.open(tmp_path / "t.jsonl", os.O_WRONLY | os.O_CREAT, 0o600)
        rt = node_worker.build(pg_dsn, "t", LEASE_S, SHARDS)
        await rt.start()
        made.append(rt)
        for i in range(1, n + 1):
            workers.append(await Worker.start(pg_dsn, f"w{i}", tmp_path / f"w{i}.jsonl",
                                              LEASE_S, SHARDS))

        async def balanced() -> bool:
            # Settled: every node holds at most its share, and all shards are held, so
            # no hand-over is still to come (a test's objects stay where it found them).
            held = {n["node_id"]: n["shards"] for n in await rt.nodes() if n["up"]}
            return len(held) == n + 1 and sum(held.values()) == SHARDS and \
                max(held.values()) <= -(-SHARDS // (n + 1))
        await until(balanced, within=20, what="every node holding its share")
        return rt, workers

    yield start
    for w in workers:
        await w.stop()
    for rt in made:
        await rt.stop()
    if node_worker.LOG_FD is not None:
        os.close(node_worker.LOG_FD)
        node_worker.LOG_FD = None


async def owner(rt: Runtime, name: str) -> str | None:
    """The object's owner as the shard's row says now (not as `rt` last saw it)."""
    backend = rt.backend
    assert isinstance(backend, PostgresBackend)
    return (await backend.owner_of(("Beat", name), fresh=True))[0]


async def names_on(rt: Runtime, node: str, count: int, prefix: str = "b") -> list[str]:
    out: list[str] = []
    for i in range(10_000):
        if await owner(rt, f"{prefix}{i}") == node:
            out.append(f"{prefix}{i}")
            if len(out) == count:
                return out
    raise AssertionError(f"{node} holds too few shards")


def intervals(lines: list[dict[str, Any]], obj: str, what: str) -> list[tuple[int, int]]:
    starts: list[int] = []
    out: list[tuple[int, int]] = []
    for line in lines:
        if line["object"] != obj or line["what"] != what:
            continue
        if line["edge"] == "start":
            starts.append(line["t"])
        else:
            out.append((starts.pop(0), line["t"]))
    return out


async def test_calls_from_two_nodes_reach_the_owner_one_at_a_time(fleet: Fleet) -> None:
    t, (w1, w2) = await fleet(2)
    name = (await names_on(t, "w1", 1))[0]
    here = [t.get("Beat", name).hold(120) for _ in range(4)]
    there = [w2.call(name, "hold", 120) for _ in range(4)]
    results = await asyncio.gather(*here, *there)
    assert results[:4] == ["w1"] * 4
    assert [r["value"] for r in results[4:]] == ["w1"] * 4, results
    runs = sorted(intervals(w1.lines(), name, "hold"))
    assert len(runs) == 8
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(runs)), runs  # never overlapping


async def test_a_killed_nodes_alarms_fire_on_the_others_nothing_lost(fleet: Fleet) -> None:
    t, (w1, _w2) = await fleet(2)
    on_w1 = await names_on(t, "w1", 10, "k")
    others = [n for n in (f"o{i}" for i in range(40)) if await owner(t, n) != "w1"][:10]
    start = wall_ms()
    due = {name: start + 2_500 + i * 150 for i, name in enumerate(on_w1 + others)}
    for name, at in due.items():
        await t.get("Beat", name).arm(at)

    failed_calls = 0

    async def load() -> None:  # calls keep coming while the node dies
        nonlocal failed_calls
        rng = random.Random(5)
        while True:
            try:
                await t.get("Beat", rng.choice(on_w1 + others)).add(1)
            except Exception:
                failed_calls += 1
                await asyncio.sleep(0.05)

    loader = asyncio.get_running_loop().create_task(load())
    try:
        await asyncio.sleep(max(0.0, (start + 1_500 - wall_ms()) / 1000))
        killed_ms = wall_ms()
        w1.signal(signal.SIGKILL)
        await w1.proc.wait()

        async def all_fired() -> bool:
            return all([await t.get("Beat", n).fires() for n in due])
        await until(all_fired, within=LEASE_S + 12, what="every alarm fired")
    finally:
        loader.cancel()
        await asyncio.gather(loader, return_exceptions=True)
    for name in on_w1:
        fires = await t.get("Beat", name).fires()
        nodes = {f[0] for f in fires}
        assert "w1" not in nodes and nodes <= {"t", "w2"}, (name, fires)
        late_ms = fires[0][1] - due[name]
        assert late_ms <= LEASE_S * 1000 + 2_000, (name, late_ms)
    assert all([await t.get("Beat", n).fires() for n in others])
    assert killed_ms < min(due.values())
    # The calls to w1's objects failed only for the moment its shards had no owner.
    assert await t.get("Beat", on_w1[0]).add(0) >= 0


@pytest.mark.timeout(180)  # its waits are bounds for a loaded machine, left when they hold
async def test_a_paused_node_that_lost_its_leases_commits_nothing_more(fleet: Fleet) -> None:
    t, (w1, _w2) = await fleet(2)
    for attempt in range(3):
        names = await names_on(t, "w1", 8, f"s{attempt}-")
        slow = names[0]
        start = wall_ms()
        due = {name: start + 1_500 + i * 200 for i, name in enumerate(names[1:])}
        for name, at in due.items():
            await t.get("Beat", name).arm(at)
        assert await t.get("Beat", slow).add(10) == 10
        # An event caught between its read and its write by the pause: paused once it
        # has read (its log says so), well before it writes (seconds later, even on a
        # loaded machine: a fixed sleep here let the write land first).
        pending = asyncio.get_running_loop().create_task(w1.call(slow, "slow_add", 3000, 1))

        def read_on_w1(obj: str = slow) -> bool:
            return any(x["object"] == obj and x["what"] == "slow_add" and x["edge"] == "read"
                       for x in w1.lines())

        def caught(call: asyncio.Task[Any] = pending) -> bool:
            return read_on_w1() or call.done()
        await until(caught, within=60, what="the slow event's read on w1")
        if read_on_w1() and not pending.done():
            break
        # The call ended without w1 reading: a loaded machine let a lease lapse and the
        # object moved before the call reached it. Not what this test is about: again.
        await pending
    else:
        raise AssertionError("the slow event never ran on w1 in three tries")
    w1.signal(signal.SIGSTOP)
    stopped_ms = wall_ms()
    try:
        async def moved() -> bool:
            return all([await owner(t, n) in ("t", "w2") for n in names])
        await until(moved, within=LEASE_S * 4 + 5, what="w1's shards taken over")
        # Meanwhile the new owners write the same objects.
        assert await t.get("Beat", slow).add(100) == 110

        async def all_fired() -> bool:
            return all([await t.get("Beat", n).fires() for n in due])
        await until(all_fired, within=15, what="every alarm fired on the new owners")
    finally:
        w1.signal(signal.SIGCONT)
    resumed_ms = wall_ms()
    answer = await pending
    assert not answer["ok"] and "no longer holds" in answer["error"], answer
    await asyncio.sleep(LEASE_S + 0.5)  # w1 renews, learns what it lost, carries on
    assert await t.get("Beat", slow).add(0) == 110  # the paused write was fenced out
    for name in due:
        fires = await t.get("Beat", name).fires()
        assert fires and all(f[0] != "w1" for f in fires), (name, fires)
    # No handler of those objects started on w1 once it was paused, nor after.
    late = [x for x in w1.lines() if x["what"] == "alarm" and x["t"] >= stopped_ms]
    assert late == [], late
    assert resumed_ms > stopped_ms
    ups = {n["node_id"]: n["up"] for n in await t.nodes()}
    assert ups == {"t": True, "w1": True, "w2": True}


async def test_a_call_in_flight_to_an_owner_that_dies_waits_for_the_new_owner(
        fleet: Fleet, caplog: pytest.LogCaptureFixture) -> None:
    """The owner is SIGKILLed while a call runs there: the call waits for the node that
    takes the shard over (here, once the lease ran out) and then fails saying it may
    have run, rather than run twice unasked; the link's end is logged; a call made then
    runs on the new owner at once."""
    t, (w1,) = await fleet(1)
    name = (await names_on(t, "w1", 1, "inflight"))[0]
    call = asyncio.get_running_loop().create_task(t.get("Beat", name).hold(2_000))

    async def running_on_w1() -> bool:
        return any(x["object"] == name and x["edge"] == "start" for x in w1.lines())
    await until(running_on_w1, what="the call running on w1")
    w1.signal(signal.SIGKILL)
    await w1.proc.wait()
    killed = time.monotonic()
    with pytest.raises(NodeUnreachable) as failed:
        await asyncio.wait_for(call, LEASE_S + 10)
    waited = time.monotonic() - killed
    assert "may have run" in str(failed.value) and "served at this node now" in \
        str(failed.value), failed.value
    assert LEASE_S * 0.5 < waited < LEASE_S + 2 + 1, waited  # until the shard moved
    again = time.monotonic()
    assert await t.get("Beat", name).hold(10) == "t"
    assert time.monotonic() - again < 1.0
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "ended with 1 call(s) in flight" in said, said[-2000:]
