"""Run in a child process by `test_admission.py`, under a lowered RLIMIT_NOFILE.

    python -m tests.server.lobby_fd_worker DATA_DIR LIMIT

Starts a runtime whose `max_resident` fills the descriptor budget beside its ops
server's reserved sockets, prints the server's port, and waits for a line on stdin
(the test floods the port with silent sockets meanwhile). Then, once the flood is
accepted, it opens `max_resident` objects (each holds its database open) and prints
one JSON line: how many failed, and how many of the server's sockets it holds.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from alarmtop.core import DurableObject, Runtime
from alarmtop.core.kernel.descriptors import FDS_PER_DATABASE, SLACK, in_use
from alarmtop.server.app import SPARE_SOCKETS, OpsServer
from alarmtop.server.auth import Tokens
from alarmtop.server.objects import ObjectSocketLimits

CAPS = {"max_clients": 8, "max_pending": 16}
OBJECT_SOCKETS = ObjectSocketLimits(max_total=8, max_per_address=8)
SETTLE_S = 10.0


class Box(DurableObject):
    async def put(self, value: int) -> int:
        await self.ctx.storage.put("v", value)
        return value


def tcp_sockets(port: int) -> tuple[int, int]:
    """(this process's connected sockets on local `port`, connections waiting in the
    listening socket's accept queue), read from /proc."""
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            mine.add(link[len("socket:["):-1])
    held = queued = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                local, state, queues, inode = fields[1], fields[3], fields[4], fields[9]
                if int(local.rsplit(":", 1)[1], 16) != port or inode not in mine:
                    continue
                if state == "0A":  # LISTEN: its rx queue is the accept queue
                    queued += int(queues.split(":")[1], 16)
                else:
                    held += 1
    return held, queued


async def settled(port: int, lobby: Callable[[], int]) -> None:
    """Until every queued connection is accepted and each one the lobby evicted is
    closed (bounded: a server out of descriptors stops accepting, and one that held
    more than its lobby would never settle: the caller's check then says so)."""
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        held, queued = tcp_sockets(port)
        if not queued and held <= lobby():
            break
        await asyncio.sleep(0.01)  # the server accepts and evicts in its own time


async def run(data: Path, limit: int) -> dict[str, Any]:
    reserved = sum(CAPS.values()) + OBJECT_SOCKETS.max_total + SPARE_SOCKETS
    # Room for the runtime's database and two more, the rest for resident objects.
    max_resident = (limit - SLACK - reserved - in_use()) // FDS_PER_DATABASE - 3
    rt = Runtime(data, max_resident=max_resident, hibernate_after=600)
    rt.register(Box)
    server = OpsServer(rt, Tokens("operator-token", "viewer-token"), "127.0.0.1", 0,
                       object_sockets=OBJECT_SOCKETS, **CAPS)
    await rt.start()
    await server.start()
    print(json.dumps({"port": server.port, "max_resident": max_resident}), flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    await settled(server.port, lambda: len(server.admission.lobby))
    held = tcp_sockets(server.port)[0]
    failed: list[str] = []
    for i in range(max_resident):
        try:
            await rt.get(Box, f"b{i}").put(i)
        except Exception as exc:
            failed.append(f"{type(exc).__name__}: {exc}")
    out = {"held": held, "failed": len(failed), "errors": failed[:3],
           "lobby": len(server.admission.lobby)}
    await server.stop()
    await rt.stop()
    return out


def main() -> None:
    data, limit = Path(sys.argv[1]), int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    print(json.dumps(asyncio.run(run(data, limit))), flush=True)


if __name__ == "__main__":
    main()
