"""A node that loses PostgreSQL for a few seconds: it stops running events, says why,
and recovers without losing anything; the demo's traffic goes on after it. Its own
throwaway server, stopped and started under it (the session's shared one stays up
for the other tests)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from alarmtop.core import PostgresBackend
from alarmtop.core.model.errors import AlarmtopError
from alarmtop.examples.click_counter import ClickCounter
from alarmtop.examples.demo import COUNTERS, build_demo_runtime, start_demo_driver
from tests import pg
from tests.fleet import node_worker
from tests.fleet.conftest import until

LEASE_S = 1.5


@pytest.fixture
def own_cluster() -> Iterator[pg.Cluster]:
    with pg.cluster() as cluster:
        yield cluster


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


async def test_a_node_without_postgresql_stops_says_why_and_recovers(
        own_cluster: pg.Cluster, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="alarmtop")
    node_worker.NODE = "t"
    node_worker.LOG_FD = os.open(tmp_path / "t.jsonl", os.O_WRONLY | os.O_CREAT, 0o600)
    rt = node_worker.build(own_cluster.dsn, "t", LEASE_S, 4)
    await rt.start()
    try:
        start = wall_ms()
        names = [f"p{i}" for i in range(10)]
        due = {n: start + 1_000 + i * 500 for i, n in enumerate(names)}  # 1 s .. 5.5 s
        for n, at in due.items():
            await rt.get("Beat", n).arm(at)
        assert await rt.get("Beat", "counter").add(1) == 1
        await asyncio.get_running_loop().run_in_executor(None, own_cluster.stop, "immediate")
        down_ms = wall_ms()
        # Events fail while the server is away, each with a reason, and keep nothing.
        with pytest.raises(AlarmtopError) as err:
            await asyncio.wait_for(rt.get("Beat", "counter").add(1), 15)
        assert "PostgreSQL" in str(err.value) or "shard" in str(err.value), err.value
        await asyncio.sleep(max(0.0, (down_ms + 3_500 - wall_ms()) / 1000))
        await asyncio.get_running_loop().run_in_executor(None, own_cluster.start)
        up_ms = wall_ms()

        async def all_fired() -> bool:
            try:
                return all([await rt.get("Beat", n).fires() for n in names])
            except AlarmtopError:
                return False
        await until(all_fired, within=20, what="every alarm fired after the outage")
        recovered_ms = wall_ms()
        assert await rt.get("Beat", "counter").add(1) == 2  # the failed add kept nothing
        for n in names:
            fires = await rt.get("Beat", n).fires()
            assert fires, n
            # Due during the outage: fired after it, not lost, not before due.
            assert fires[0][1] >= due[n], (n, fires)
        said = " ".join(r.getMessage() for r in caplog.records)
        assert "could not renew its shard leases" in said, said[-2000:]
        assert recovered_ms - up_ms < 15_000
    finally:
        await rt.stop()
        os.close(node_worker.LOG_FD)
        node_worker.LOG_FD = None


async def test_the_demo_traffic_outlives_an_outage(own_cluster: pg.Cluster, tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """The demo's driver on a node whose PostgreSQL goes away: its ticks fail, each
    failure is logged, and once the server is back its traffic goes on."""
    caplog.set_level(logging.WARNING, logger="alarmtop")
    rt = build_demo_runtime(tmp_path, backend=PostgresBackend(own_cluster.dsn, node_id="d",
                                                              shards=4, lease_s=LEASE_S))
    await rt.start()
    driver = start_demo_driver(rt, tick_s=0.05)

    async def clicks() -> int:
        try:
            totals = [await rt.get(ClickCounter, c).totals() for c in COUNTERS]
        except AlarmtopError:
            return -1
        return sum(t["pending"] + t["flushed"] for t in totals)
    try:
        await until(lambda: _above(clicks, 0), within=20, what="the demo's first clicks")
        await asyncio.get_running_loop().run_in_executor(None, own_cluster.stop, "immediate")
        await until(lambda: "demo traffic: a tick failed" in caplog.text, within=20,
                    what="a failed tick logged")
        await asyncio.get_running_loop().run_in_executor(None, own_cluster.start)
        await until(lambda: _above(clicks, 0), within=20, what="PostgreSQL back")
        after = await clicks()
        await until(lambda: _above(clicks, after), within=20, what="the demo's clicks again")
        assert not driver.done()
    finally:
        driver.cancel()
        await asyncio.gather(driver, return_exceptions=True)
        await rt.stop()


async def _above(count: Callable[[], Awaitable[int]], floor: int) -> bool:
    return await count() > floor
