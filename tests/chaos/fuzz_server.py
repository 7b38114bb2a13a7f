"""A runtime and its ops server in their own process, for `test_fuzz_ops.py`.

Run as ``python -m tests.chaos.fuzz_server DATA_DIR ALARMS``: starts a runtime on
the wall clock with ALARMS far-off alarms (so snapshots and pages are not tiny)
and one object re-arming every 100 ms (so deltas keep flowing), an `OpsServer`
on 127.0.0.1 port 0, prints ``PORT <n>`` and serves until its stdin closes.

The server's budgets keep their bursts but do not refill (`NO_REFILL`): a flood
is paced by its count alone. At the default rates a flood gets its burst plus the
rate times however long the server takes to read it, which on a loaded machine
is any number; the refill itself is tested on an injected clock (test_guard.py).
The
test measures this process's memory from outside (/proc/<pid>/status), and reads
its log (stderr) for tracebacks. `Echo` takes object sockets and closes one with
whatever reason it is sent (``close <reason>``), to fuzz close reasons.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

from alarmtop.core import AlarmInfo, DurableObject, Runtime, SystemClock, configure_logging
from alarmtop.core.kernel.objects.sockets import HibernatableWebSocket
from alarmtop.server.app import OpsServer
from alarmtop.server.auth import Tokens

OPERATOR = "fuzz-operator-token"
VIEWER = "fuzz-viewer-token"
FAR_MS = 3_600_000
NO_REFILL = 1e-6  # tokens a second: one in eleven days


class Target(DurableObject):
    async def arm(self, in_ms: int) -> None:
        await self.ctx.storage.set_alarm(self.ctx.now_ms() + in_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        if self.ctx.id == "ticker":
            await self.ctx.storage.set_alarm(self.ctx.now_ms() + 100)


class Echo(DurableObject):
    async def web_socket_connect(self, ws: HibernatableWebSocket, request: dict[str, object]
                                 ) -> None:
        self.ctx.accept_web_socket(ws)
        await ws.send("hi")

    async def web_socket_message(self, ws: HibernatableWebSocket, message: str) -> None:
        if message.startswith("close "):
            await ws.close(4000, message[len("close "):])
        else:
            await ws.send(message)


async def main(data: Path, alarms: int) -> None:
    configure_logging(level=logging.WARNING)  # refusals and errors, not every connection
    rt = Runtime(data, clock=SystemClock())
    rt.register(Target)
    rt.register(Echo)
    await rt.start()
    await asyncio.gather(*(rt.get(Target, f"t{i}").arm(FAR_MS + i) for i in range(alarms)))
    await rt.get(Target, "ticker").arm(100)
    server = OpsServer(rt, Tokens(operator=OPERATOR, viewer=VIEWER), "127.0.0.1", 0,
                       tick_s=0.05, rate_per_s=NO_REFILL, query_rate_per_s=NO_REFILL)
    await server.start()
    print(f"PORT {server.port}", flush=True)
    try:
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    finally:
        await server.stop()
        await rt.stop()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2])))
