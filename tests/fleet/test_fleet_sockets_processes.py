"""A relayed object socket whose owner is a real process SIGKILLed under it: the
client is closed 1012 at once (the node link drops), and reconnecting through the
same node reaches the shard's next owner once the dead node's lease runs out."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

from websockets.asyncio.client import connect

from alarmtop.core.fleet.sockets import CLOSE_MOVED, NODE_GONE
from alarmtop.server.app import OpsServer
from alarmtop.server.auth import Tokens
from tests.fleet import node_worker
from tests.fleet.conftest import until
from tests.fleet.processes import Worker
from tests.fleet.test_fleet_sockets import closed_with, recv
from tests.fleet.test_nodes_processes import LEASE_S, SHARDS, names_on


async def test_a_killed_owner_closes_the_socket_and_the_client_comes_back(
        pg_dsn: str, tmp_path: Path) -> None:
    node_worker.NODE = "t"
    node_worker.LOG_FD = os.open(tmp_path / "t.jsonl", os.O_WRONLY | os.O_CREAT, 0o600)
    rt = node_worker.build(pg_dsn, "t", LEASE_S, SHARDS)
    await rt.start()
    worker: Worker | None = None
    server = OpsServer(rt, Tokens(operator="op", viewer="view"), "127.0.0.1", 0)
    try:
        worker = await Worker.start(pg_dsn, "w1", tmp_path / "w1.jsonl", LEASE_S, SHARDS)

        async def balanced() -> bool:
            held = {n["node_id"]: n["shards"] for n in await rt.nodes() if n["up"]}
            return len(held) == 2 and min(held.values()) >= SHARDS // 2
        await until(balanced, within=20, what="both nodes holding their share")
        name = (await names_on(rt, "w1", 1))[0]
        await server.start()
        url = f"ws://127.0.0.1:{server.port}/objects/Beat/{name}"
        async with connect(url, open_timeout=10) as ws:
            assert await recv(ws) == "welcome from w1"
            await ws.send("hi")
            assert await recv(ws) == "hi on w1"
            worker.signal(signal.SIGKILL)
            killed = time.monotonic()
            assert await closed_with(ws) == (CLOSE_MOVED, NODE_GONE)
            assert time.monotonic() - killed < 2.0  # the link's end, not a lease, says so
        async with connect(url, open_timeout=10) as ws:
            assert await asyncio.wait_for(ws.recv(), LEASE_S + 8) == "welcome from t"
            await ws.send("again")
            assert await recv(ws) == "again on t"
    finally:
        await server.stop()
        if worker is not None:
            await worker.stop()
        await rt.stop()
        os.close(node_worker.LOG_FD)
        node_worker.LOG_FD = None
