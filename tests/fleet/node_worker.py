"""One fleet node in a process of its own, for the multi-process fleet tests.

    python -m tests.fleet.node_worker DSN NODE_ID LOG [--lease-s S] [--shards N]

Starts a `Runtime` on `PostgresBackend(DSN, NODE_ID)` with `Beat` registered, prints
one JSON line `{"ready": NODE_ID, "address": ...}`, then reads commands from stdin,
one JSON per line (`{"id": n, "call": [name, method, args]}`), runs them
concurrently and prints `{"id": n, "ok": ..., "value"|"error": ...}` for each. It
stops cleanly on SIGTERM or at the end of stdin, and is SIGKILLed or SIGSTOPped by
the tests as they need.

Every handler run is written to LOG as JSON lines (node, object, what, edge
start|end, wall time), with one unbuffered `write` each, so what a SIGKILLed node
did before it died is still there for the test to read.

`ALARMTOP_TEST_CLOCK_SKEW_S` (read here, by the tests only) sets this node's wall
clock that many seconds off: `time.time()` and `time.time_ns()` of the whole
process, as a machine whose clock is wrong. The log keeps the true time, so that
the test compares the nodes on one clock.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from typing import Any

from alarmtop.core import AlarmInfo, DurableObject, PostgresBackend, Runtime

NODE = "?"
LOG_FD: int | None = None
SKEW_ENV = "ALARMTOP_TEST_CLOCK_SKEW_S"
_true_time_ns = time.time_ns


def wall_ms() -> int:
    """The true wall time (whatever skew this process was given)."""
    return _true_time_ns() // 1_000_000


def skew_clock(seconds: float) -> None:
    """This process's wall clock, `seconds` off from now on."""
    true_time, offset_ns = time.time, round(seconds * 1e9)
    time.time = lambda: true_time() + seconds
    time.time_ns = lambda: _true_time_ns() + offset_ns


def note(obj: str, what: str, edge: str) -> None:
    if LOG_FD is not None:
        line = json.dumps({"node": NODE, "object": obj, "what": what, "edge": edge,
                           "t": wall_ms()}) + "\n"
        os.write(LOG_FD, line.encode())


class Beat(DurableObject):
    """Records where and when each of its handlers ran, in its own storage too."""

    async def arm(self, at_ms: int) -> None:
        await self.ctx.storage.set_alarm(at_ms)

    async def hold(self, ms: int) -> str:
        name = self.ctx.id
        note(name, "hold", "start")
        await asyncio.sleep(ms / 1000)
        note(name, "hold", "end")
        return NODE

    async def add(self, n: int = 1) -> int:
        value = int(await self.ctx.storage.get("n") or 0) + n
        await self.ctx.storage.put("n", value)
        return value

    async def slow_add(self, ms: int, n: int = 1) -> int:
        """Read, wait, then write: an event a pause can catch between the two (the log
        says when it has read, for a test that pauses it then)."""
        note(self.ctx.id, "slow_add", "start")
        value = int(await self.ctx.storage.get("n") or 0) + n
        note(self.ctx.id, "slow_add", "read")
        await asyncio.sleep(ms / 1000)
        await self.ctx.storage.put("n", value)
        note(self.ctx.id, "slow_add", "end")
        return value

    async def web_socket_connect(self, ws: Any, request: dict[str, Any]) -> None:
        """Sockets too: accepted, told the node that runs the object."""
        self.ctx.accept_web_socket(ws)
        await ws.send(f"welcome from {NODE}")

    async def web_socket_message(self, ws: Any, message: str) -> None:
        await ws.send(f"{message} on {NODE}")

    async def fires(self) -> list[list[Any]]:
        return list(await self.ctx.storage.get("fires") or [])

    async def alarm(self, info: AlarmInfo) -> None:
        name = self.ctx.id
        note(name, "alarm", "start")
        fires = list(await self.ctx.storage.get("fires") or [])
        fires.append([NODE, wall_ms(), info.retry_count])
        await asyncio.sleep(0.02)
        await self.ctx.storage.put("fires", fires)
        note(name, "alarm", "end")


def build(dsn: str, node_id: str, lease_s: float, shards: int) -> Runtime:
    rt = Runtime(backend=PostgresBackend(dsn, node_id=node_id, shards=shards, lease_s=lease_s),
                 hibernate_after=60.0)
    rt.register(Beat)
    return rt


async def serve(rt: Runtime) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    backend = rt.backend
    assert isinstance(backend, PostgresBackend)
    print(json.dumps({"ready": NODE, "address": backend.address,
                      "skewed_ms": time.time_ns() // 1_000_000 - wall_ms()}), flush=True)
    tasks: set[asyncio.Task[None]] = set()

    async def run(cmd: dict[str, Any]) -> None:
        name, method, args = cmd["call"]
        try:
            value = await getattr(rt.get("Beat", name), method)(*args)
            reply = {"id": cmd["id"], "ok": True, "value": value}
        except Exception as exc:
            reply = {"id": cmd["id"], "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(reply), flush=True)

    async def read() -> None:
        while line := await reader.readline():
            task = loop.create_task(run(json.loads(line)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        stop.set()

    reading = loop.create_task(read())
    await stop.wait()
    reading.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def main() -> None:
    global NODE, LOG_FD
    ap = argparse.ArgumentParser()
    ap.add_argument("dsn")
    ap.add_argument("node_id")
    ap.add_argument("log")
    ap.add_argument("--lease-s", type=float, default=1.5)
    ap.add_argument("--shards", type=int, default=8)
    args = ap.parse_args()
    if os.environ.get(SKEW_ENV):
        skew_clock(float(os.environ[SKEW_ENV]))
    NODE = args.node_id
    LOG_FD = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    rt = build(args.dsn, args.node_id, args.lease_s, args.shards)
    await rt.start()
    try:
        await serve(rt)
    finally:
        await rt.stop()


if __name__ == "__main__":
    asyncio.run(main())
