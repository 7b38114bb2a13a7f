"""Snapshot, then deltas: one coalesced frame per tick, fanned out to every client.

The feed drains the runtime's events once per tick and builds one delta (the
rows that changed, fresh counts from the counters storage keeps with its writes,
the tail of the event log), encoded once, to
UTF-8 bytes, and offered to every client: every viewer shares that one query and
that one frame. Each client has a bounded queue: a client that falls behind
loses its queued deltas and gets a fresh snapshot instead, so a slow viewer is
downsampled and never grows the server's memory.

The feed shares the runtime's event loop, so what it does per viewer is kept to
a copy into the socket, and the fan-out yields to the loop every `FANOUT_BATCH`
viewers: a due alarm waits for at most one batch of writes, not for a hundred.
Snapshots for clients that connect or resync within one tick share one build.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from alarmtop.core import Event
from alarmtop.server.ops import OpsService
from alarmtop.server.rows import alarm_row, execution_row
from alarmtop.server.wire import encode, split_object

MAX_ROWS_PER_DELTA = 200
DELTA_ATTEMPTS = 2  # a delta carries the latest attempts; the `alarm` query has them all
MAX_EVENTS_PER_DELTA = 100
CLIENT_QUEUE = 32
FANOUT_BATCH = 10  # viewers written to between two turns of the event loop

Frame = str | bytes  # bytes: UTF-8 JSON already encoded, sent as a text frame


def delta_row(status: Any) -> dict[str, Any]:
    row = alarm_row(status)
    row["attempts_total"] = len(row["attempts"])
    row["attempts"] = row["attempts"][-DELTA_ATTEMPTS:]
    return row


class ClientChannel:
    """One client's outgoing frames: results first and never dropped; deltas bounded."""

    def __init__(self, send: Callable[[Frame], Awaitable[None]],
                 snapshot: Callable[[], Awaitable[Frame]]) -> None:
        self._send = send
        self._snapshot = snapshot
        self._results: collections.deque[Frame] = collections.deque()
        self._deltas: collections.deque[Frame] = collections.deque()
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()  # set while no result waits to be sent
        self._drained.set()
        self.resync = False
        self.dropped = 0
        self.sent = 0

    def offer_delta(self, frame: Frame) -> None:
        if len(self._deltas) >= CLIENT_QUEUE:
            # Behind: forget the queued deltas and send a fresh snapshot instead.
            self.dropped += len(self._deltas)
            self._deltas.clear()
            self.resync = True
        else:
            self._deltas.append(frame)
        self._wake.set()

    def send_result(self, frame: Frame) -> None:
        self._results.append(frame)
        self._drained.clear()
        self._wake.set()

    async def flush(self, timeout_s: float = 2.0) -> None:
        """Wait (a bounded time) until the queued results have been sent."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._drained.wait()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._results or self._deltas or self.resync:
                frame: Frame
                if self._results:
                    frame = self._results.popleft()
                elif self.resync:
                    # Deltas queued so far are older than the snapshot: drop them.
                    self.resync = False
                    self.dropped += len(self._deltas)
                    self._deltas.clear()
                    frame = await self._snapshot()
                else:
                    frame = self._deltas.popleft()
                await self._send(frame)
                self.sent += 1
            self._drained.set()


class Feed:
    def __init__(self, ops: OpsService, tick_s: float = 0.25) -> None:
        self.ops = ops
        self.tick_s = tick_s
        self.clients: set[ClientChannel] = set()
        self._sub = ops.rt.events.subscribe(maxsize=200_000)
        # In a fleet, the other nodes' events too, pulled while someone watches.
        self._fleet = ops.rt.fleet_events()
        self._task: asyncio.Task[None] | None = None
        self.seq = 0
        self.events_in = 0
        self.frames_out = 0
        self._snapshot: tuple[int, float, asyncio.Task[bytes]] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="ops-feed")

    async def stop(self) -> None:
        for task in (self._task, self._snapshot[2] if self._snapshot else None):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._sub.close()
        if self._fleet is not None:
            await self._fleet.stop()

    async def snapshot_frame(self) -> bytes:
        """A snapshot, encoded; clients asking within one tick and one seq share it."""
        now = time.monotonic()
        cached = self._snapshot
        if cached is None or cached[0] != self.seq or now - cached[1] > self.tick_s:
            task = asyncio.get_running_loop().create_task(self._build_snapshot())
            cached = self._snapshot = (self.seq, now, task)
        # Shielded: one client leaving must not cancel the build the others wait for.
        return await asyncio.shield(cached[2])

    async def _build_snapshot(self) -> bytes:
        snap = await self.ops.snapshot()
        snap["seq"] = self.seq
        return encode(snap).encode()

    async def _loop(self) -> None:
        while True:
            started = time.monotonic()
            events = self._sub.drain()
            if self._fleet is not None:
                events = await self._with_fleet(events)
            # A node that dies says nothing on any bus: a change of the fleet's summary
            # (cached, read at most once a second) is news of its own.
            if self.clients and (events or await self.ops.fleet.moved()):
                frame = encode(await self.build_delta(events)).encode()
                await self.fan_out(frame)
            self.events_in += len(events)
            await asyncio.sleep(max(0.0, self.tick_s - (time.monotonic() - started)))

    async def _with_fleet(self, events: list[Event]) -> list[Event]:
        fleet = self._fleet
        assert fleet is not None
        if not self.clients:
            await fleet.stop()
            return events
        fleet.start()
        theirs = fleet.drain()
        if not theirs:
            return events
        return sorted([*events, *theirs], key=lambda e: e.at_ms)

    async def fan_out(self, frame: Frame) -> None:
        """Offer one frame to every client, yielding to the loop between batches."""
        clients = list(self.clients)
        self.frames_out += len(clients)
        for i, client in enumerate(clients, 1):
            client.offer_delta(frame)
            if i % FANOUT_BATCH == 0:
                await asyncio.sleep(0)

    async def build_delta(self, events: list[Event]) -> dict[str, Any]:
        objects: dict[str, None] = {}
        executions: dict[str, None] = {}
        fires = failures = 0
        for ev in events:
            if ev.type.startswith("alarm.") and "object" in ev.data:
                objects[ev.data["object"]] = None
            eid = ev.data.get("execution_id")
            if eid:
                executions[str(eid)] = None
            fires += ev.type == "alarm.fired"
            failures += ev.type == "alarm.failed"
        alarms = []
        for ref in list(objects)[:MAX_ROWS_PER_DELTA]:
            cls, name = split_object(ref)
            try:
                status = await self.ops.rt.alarm(cls, name)
            except Exception:  # the class may have gone; the row is simply left out
                continue
            alarms.append(delta_row(status) if status is not None
                          else {"object": ref, "state": "none"})
        rows = []
        for eid in list(executions)[:MAX_ROWS_PER_DELTA]:
            rec = await self.ops.rt.executions.engine.store.get(eid)
            if rec is not None:
                rows.append(execution_row(rec))
        tail = events[-MAX_EVENTS_PER_DELTA:]
        counts = await self.ops.counts()  # the counters: no query however many alarms
        # Numbered only once built: a snapshot taken meanwhile must not carry this number.
        self.seq += 1
        return {"type": "delta", "seq": self.seq, "at_ms": self.ops.rt.clock.now_ms(),
                "counts": counts, "alarms": alarms,
                "alarms_changed": len(objects), "executions": rows,
                "executions_changed": len(executions),
                "events": [e.to_dict() for e in tail], "events_total": len(events),
                "fires": fires, "failures": failures, "faults": self.ops.rt.faults.list()}
