"""The fleet's events on any node's feed: the ring each node keeps while watched
(pure, on a bus of its own), and a real ops server on one node showing an alarm
that fired on another."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from websockets.asyncio.client import connect

from alarmtop.core import VirtualClock
from alarmtop.core.fleet.events import IDLE_S, EventRing
from alarmtop.core.kernel.events import EventBus
from alarmtop.server.app import OpsServer
from alarmtop.server.auth import Tokens
from tests.fleet.conftest import NodeFactory, balance, name_on, until


class Now:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_ring_listens_from_the_first_pull_and_numbers_its_events() -> None:
    clock, now = VirtualClock(), Now()
    bus = EventBus(clock)
    ring = EventRing(bus, now, size=5)
    bus.emit("before.watching")
    first = ring.pull(0)
    assert first["events"] == [] and first["missed"] == 0
    for i in range(3):
        bus.emit("alarm.fired", {"i": i})
    got = ring.pull(first["last"])
    assert [e["data"]["i"] for e in got["events"]] == [0, 1, 2] and got["missed"] == 0
    assert ring.pull(got["last"])["events"] == []
    # Behind by more than the ring holds: told how many were missed.
    for i in range(3, 10):
        bus.emit("alarm.fired", {"i": i})
    late = ring.pull(got["last"])
    assert [e["data"]["i"] for e in late["events"]] == [5, 6, 7, 8, 9]
    assert late["missed"] == 2
    # Events pulled from another node are not kept again (its own ring has them).
    bus.emit("alarm.fired", {"i": 99, "node": "b"})
    assert ring.pull(late["last"])["events"] == []


def test_the_ring_stops_listening_when_nobody_pulls() -> None:
    clock, now = VirtualClock(), Now()
    bus = EventBus(clock)
    ring = EventRing(bus, now)
    last = ring.pull(0)["last"]
    assert bus.active and ring.watched
    now.t = IDLE_S + 1
    ring.idle_check()
    # Nothing left listening: the hot paths skip building events.
    assert not bus.active and not ring.watched
    bus.emit("alarm.fired")
    assert ring.pull(last)["events"] == []  # listening again from here


def test_a_restarted_node_is_read_from_its_start() -> None:
    now = Now()
    bus = EventBus(VirtualClock())
    ring = EventRing(bus, now)
    ring.pull(0)
    bus.emit("alarm.fired", {"i": 1})
    assert [e["data"]["i"] for e in ring.pull(500)["events"]] == [1]


async def test_any_nodes_feed_shows_the_fleets_events(node: NodeFactory,
                                                      clock: VirtualClock) -> None:
    a = await node("a")
    b = await node("b")
    await balance(a, b)
    name = name_on(b)
    tokens = Tokens(operator="op-token", viewer="viewer-token")
    server = OpsServer(a, tokens, "127.0.0.1", 0, tick_s=0.02)
    await server.start()
    try:
        async with connect(server.url, open_timeout=10) as ws:
            await ws.send(json.dumps({"op": "hello", "token": "viewer-token"}))
            seen: list[dict[str, Any]] = []

            async def read() -> None:
                async for raw in ws:
                    seen.append(json.loads(raw))
            reader = asyncio.create_task(read())
            try:
                # The puller's first round only starts b's ring; then the alarm fires.
                assert b.node is not None
                ring = b.node.ring
                assert ring is not None
                await until(lambda: ring.watched, what="a pulling b's events")
                await b.get("Counter", name).arm(0)
                await clock.advance(1)

                def fired_on_b() -> bool:
                    return any(e["type"] == "alarm.fired" and e["data"].get("node") == "b"
                               and e["data"].get("object") == f"Counter/{name}"
                               for f in seen if f.get("type") == "delta"
                               for e in f.get("events", []))
                await until(fired_on_b, within=10, what="b's alarm on a's feed")
            finally:
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
    finally:
        await server.stop()
