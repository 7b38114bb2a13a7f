"""Shard leases are timed by PostgreSQL's clock, not by the nodes': node processes whose
wall clocks are set wrong (`ALARMTOP_TEST_CLOCK_SKEW_S`, read by the test worker only)
hold their shards for a lease and no longer, take none early, and a node that cannot
renew stops running a shard's events before its lease can have run out anywhere.

Each test runs this test's own node "t" (true clock) in process and worker nodes in
processes of their own; handler runs are logged on the true clock, so the nodes are
compared on one clock."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from alarmtop.core import PostgresBackend, Runtime
from tests.fleet import node_worker
from tests.fleet.conftest import until
from tests.fleet.processes import Worker
from tests.fleet.test_nodes_processes import intervals, names_on, owner

LEASE_S = 1.5
SHARDS = 8
Fleet = Callable[..., Awaitable[tuple[Runtime, list[Worker]]]]


def t_lines(tmp_path: Path) -> list[dict[str, Any]]:
    """This test's own node's log (node "t", in this process)."""
    return [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines() if x]


@pytest.fixture
async def fleet(pg_dsn: str, tmp_path: Path) -> AsyncIterator[Fleet]:
    """This test's node "t" and worker nodes with the given clock skews, balanced."""
    made: list[Runtime] = []
    workers: list[Worker] = []

    async def start(*skews_s: float) -> tuple[Runtime, list[Worker]]:
        node_worker.NODE = "t"
        node_worker.LOG_FD = os.open(tmp_path / "t.jsonl", os.O_WRONLY | os.O_CREAT, 0o600)
        rt = node_worker.build(pg_dsn, "t", LEASE_S, SHARDS)
        await rt.start()
        made.append(rt)
        for i, skew in enumerate(skews_s, 1):
            worker = await Worker.start(pg_dsn, f"w{i}", tmp_path / f"w{i}.jsonl", LEASE_S,
                                        SHARDS, skew_s=skew, stderr=tmp_path / f"w{i}.err")
            assert abs(worker.skewed_ms - skew * 1000) < 1000, worker.skewed_ms
            workers.append(worker)
        count = len(skews_s) + 1

        async def balanced() -> bool:
            held = {n["node_id"]: n["shards"] for n in await rt.nodes() if n["up"]}
            return len(held) == count and min(held.values()) >= SHARDS // count
        await until(balanced, within=20, what="every node up and holding its share")
        return rt, workers

    yield start
    for w in workers:
        await w.stop()
    for rt in made:
        await rt.stop()
    if node_worker.LOG_FD is not None:
        os.close(node_worker.LOG_FD)
        node_worker.LOG_FD = None


async def epochs(rt: Runtime) -> dict[int, int]:
    backend = rt.backend
    assert isinstance(backend, PostgresBackend)
    conn = await asyncpg.connect(backend.dsn)
    try:
        return {int(r[0]): int(r[1]) for r in
                await conn.fetch("SELECT shard, epoch FROM alarmtop.shards")}
    finally:
        await conn.close()


async def test_a_node_whose_clock_runs_fast_holds_its_shards_one_lease_after_it_died(
        fleet: Fleet) -> None:
    t, (w1,) = await fleet(30.0)
    names = await names_on(t, "w1", 4, "fast")
    w1.signal(signal.SIGKILL)
    await w1.proc.wait()
    killed = time.monotonic()

    async def taken() -> bool:
        return all([await owner(t, n) == "t" for n in names])
    await until(taken, within=LEASE_S + 4, what="the dead node's shards taken over")
    assert time.monotonic() - killed < LEASE_S + 4
    assert await t.get("Beat", names[0]).add(1) == 1


async def test_a_node_whose_clock_runs_slow_keeps_its_shards_and_shares_none(
        fleet: Fleet, tmp_path: Path) -> None:
    """Balanced with a node 10 s slow, no shard changes hands for several leases, and
    calls from both nodes to every object run one at a time on its one owner."""
    t, (w1,) = await fleet(-10.0)
    before = await epochs(t)
    names = await names_on(t, "w1", 3, "slow") + await names_on(t, "t", 3, "slow")
    for _ in range(3):
        await asyncio.gather(*(t.get("Beat", n).hold(50) for n in names),
                             *(w1.call(n, "hold", 50) for n in names))
    await asyncio.sleep(LEASE_S * 2)
    assert await epochs(t) == before  # no lease taken over, nor taken back
    for name in names:
        runs = sorted(intervals(w1.lines(), name, "hold") + intervals(
            t_lines(tmp_path), name, "hold"))
        assert len(runs) == 6, (name, runs)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(runs)), (name, runs)


async def test_a_node_that_cannot_renew_stops_before_its_lease_can_have_run_out(
        fleet: Fleet, tmp_path: Path) -> None:
    """A node 10 s slow whose lease rounds cannot write (its node row is locked) keeps
    being called; its shards move to the other node, and no event of an object runs on
    both nodes at once, nor on the stuck node once the other has run one."""
    t, (w1,) = await fleet(-10.0)
    names = await names_on(t, "w1", 3, "stuck")
    backend = t.backend
    assert isinstance(backend, PostgresBackend)
    lock = await asyncpg.connect(backend.dsn)
    stop = asyncio.Event()
    failed: list[str] = []

    async def call_from(node: str) -> None:
        while not stop.is_set():
            for name in names:
                if node == "t":
                    try:
                        await t.get("Beat", name).hold(100)
                    except Exception as exc:
                        failed.append(f"{type(exc).__name__}: {exc}")
                else:
                    await w1.call(name, "hold", 100)
            await asyncio.sleep(0.02)

    try:
        tx = lock.transaction()
        await tx.start()
        await lock.execute("SELECT 1 FROM alarmtop.nodes WHERE node_id = 'w1' FOR UPDATE")
        blocked = time.monotonic()
        callers = [asyncio.get_running_loop().create_task(call_from(n)) for n in ("w1", "t")]

        async def moved() -> bool:
            return all([await owner(t, n) == "t" for n in names])
        await until(moved, within=LEASE_S * 4 + 5, what="the stuck node's shards taken over")
        await asyncio.sleep(LEASE_S)  # calls go on, to the new owner
        stop.set()
        await asyncio.gather(*callers, return_exceptions=True)
        await tx.rollback()
    finally:
        stop.set()
        await lock.close()
    assert time.monotonic() - blocked < LEASE_S * 4 + 6
    # The healthy node's calls waited for the shards' next owner: none failed.
    assert failed == [], failed
    on_t_node = t_lines(tmp_path)
    for name in names:
        on_w1 = intervals(w1.lines(), name, "hold")
        on_t = intervals(on_t_node, name, "hold")
        assert on_w1 and on_t, (name, on_w1, on_t)
        assert max(end for _, end in on_w1) <= min(start for start, _ in on_t), \
            (name, on_w1, on_t)
    said = (tmp_path / "w1.err").read_text()
    assert "could not renew its leases of shard(s)" in said, said[-2000:]
