"""Snapshot then deltas: one coalesced delta per tick whatever the burst, and a slow
client downsampled to a fresh snapshot instead of growing the server's memory."""

from __future__ import annotations

import asyncio
import contextlib
import json

from alarmtop.core import VirtualClock
from alarmtop.core.kernel.events import Event
from alarmtop.server.feed import (
    CLIENT_QUEUE,
    MAX_EVENTS_PER_DELTA,
    MAX_ROWS_PER_DELTA,
    ClientChannel,
    Feed,
)
from alarmtop.server.ops import OpsService
from tests.conftest import RuntimeFactory
from tests.server.conftest import VIEWER, ClientFactory, Frame, Quiet, ServerFactory, until


class Pipe:
    """A ClientChannel's socket: sends block while the gate is closed."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.gate = asyncio.Event()
        self.snapshots = 0

    async def send(self, frame: str) -> None:
        await self.gate.wait()
        self.sent.append(frame)

    async def snapshot(self) -> str:
        self.snapshots += 1
        return f"snapshot-{self.snapshots}"


async def test_slow_client_is_downsampled_to_a_snapshot() -> None:
    """While a client cannot take frames, at most CLIENT_QUEUE deltas wait for it; past
    that they are dropped (counted) and it gets one fresh snapshot instead, then the
    deltas that came after."""
    pipe = Pipe()
    channel = ClientChannel(pipe.send, pipe.snapshot)
    task = asyncio.create_task(channel.run())
    try:
        channel.offer_delta("d0")
        await asyncio.sleep(0)  # the writer takes d0 and blocks on the gate
        for i in range(1, 1001):
            channel.offer_delta(f"d{i}")
            assert len(channel._deltas) <= CLIENT_QUEUE
        assert channel.resync and channel.dropped > 900
        pipe.gate.set()
        await until(lambda: not channel._deltas and not channel.resync)
        assert pipe.sent[0] == "d0"
        assert pipe.snapshots == 1 and "snapshot-1" in pipe.sent
        after = pipe.sent[pipe.sent.index("snapshot-1") + 1:]
        assert after == [f"d{i}" for i in range(1001 - len(after), 1001)]
        assert len(pipe.sent) <= CLIENT_QUEUE + 2
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_no_delta_older_than_a_resync_snapshot_follows_it() -> None:
    """After a resync, the client gets the snapshot and only deltas newer than it (by seq),
    so applying frames in order never goes back in time."""
    latest = 0
    sent: list[dict[str, int | str]] = []
    gate = asyncio.Event()

    async def send(frame: str) -> None:
        await gate.wait()
        sent.append(json.loads(frame))

    async def snapshot() -> str:
        return json.dumps({"type": "snapshot", "seq": latest})

    channel = ClientChannel(send, snapshot)
    task = asyncio.create_task(channel.run())
    try:
        seq = 0
        while not channel.resync:  # fall behind until the channel gives up on deltas
            seq += 1
            latest = seq
            channel.offer_delta(json.dumps({"type": "delta", "seq": seq}))
            await asyncio.sleep(0)
        for _ in range(5):  # and a few more deltas after that
            seq += 1
            latest = seq
            channel.offer_delta(json.dumps({"type": "delta", "seq": seq}))
        gate.set()
        await until(lambda: not channel._deltas and not channel.resync)
        snap = next(i for i, f in enumerate(sent) if f["type"] == "snapshot")
        after = [f["seq"] for f in sent[snap + 1:]]
        assert all(int(s) > int(sent[snap]["seq"]) for s in after), (sent[snap], after)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_results_are_never_dropped_and_go_first() -> None:
    """Results (answers to commands) are not subject to the delta bound, and a waiting
    result is sent before waiting deltas."""
    pipe = Pipe()
    channel = ClientChannel(pipe.send, pipe.snapshot)
    task = asyncio.create_task(channel.run())
    try:
        channel.offer_delta("d0")
        await asyncio.sleep(0)
        for i in range(5):
            channel.offer_delta(f"d{i + 1}")
        for i in range(200):
            channel.send_result(f"r{i}")
        pipe.gate.set()
        await until(lambda: len(pipe.sent) == 206)
        assert pipe.sent[1:201] == [f"r{i}" for i in range(200)]
        assert pipe.sent[201:] == ["d1", "d2", "d3", "d4", "d5"]
        assert channel.dropped == 0
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_burst_becomes_one_bounded_delta(make_runtime: RuntimeFactory) -> None:
    """10,000 alarm events in one tick make one delta: at most MAX_ROWS_PER_DELTA rows and
    MAX_EVENTS_PER_DELTA events (the latest), with the true totals and fire counts."""
    rt = await make_runtime(Quiet)
    feed = Feed(OpsService(rt))
    try:
        events = [Event("alarm.fired", rt.clock.now_ms(), {"object": f"Quiet/o{i}"})
                  for i in range(10_000)]
        events += [Event("alarm.failed", rt.clock.now_ms(), {"object": "Quiet/o1"})]
        delta = await feed.build_delta(events)
        assert delta["type"] == "delta" and delta["seq"] == 1
        assert len(delta["alarms"]) == MAX_ROWS_PER_DELTA
        assert delta["alarms_changed"] == 10_000
        assert len(delta["events"]) == MAX_EVENTS_PER_DELTA
        assert delta["events"][-1]["type"] == "alarm.failed"
        assert delta["events_total"] == 10_001
        assert (delta["fires"], delta["failures"]) == (10_000, 1)
        assert all(a["state"] == "none" for a in delta["alarms"])  # none of them exists
        assert len(json.dumps(delta)) < 100_000
        assert (await feed.build_delta([]))["seq"] == 2
    finally:
        await feed.stop()


async def test_burst_on_the_wire_is_coalesced(make_runtime: RuntimeFactory,
                                              clock: VirtualClock, serve: ServerFactory,
                                              client: ClientFactory) -> None:
    """A burst of 10,000 events reaches a client as a handful of deltas (one per tick),
    not 10,000 frames, and every event is accounted for in events_total."""
    rt = await make_runtime(Quiet)
    server = await serve(rt)
    c = await client(server.url, VIEWER)
    for i in range(10_000):
        rt.events.emit("alarm.fired", {"object": f"Quiet/b{i}"})
    total = 0
    frames: list[Frame] = []
    while total < 10_000:
        f = await c.wait_for(lambda f: f["type"] == "delta")
        frames.append(f)
        total += f["fires"]
    assert total == 10_000
    assert len(frames) <= 5, f"{len(frames)} frames for one burst"
    assert server.feed.events_in >= 10_000
