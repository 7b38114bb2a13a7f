"""A runtime in its own process, for `test_crash.py` to kill with SIGKILL.

Run as `python crash_worker.py PHASE DATA_DIR MARKER`:

- `crash`: arms the `Crashy` object's alarm, then writes to the `Counter` object
  in a loop, printing `ACK n` only after the write to `n` returned (so after it
  was durable). The alarm handler writes MARKER (fsync'd) and then sleeps on the
  runtime clock for an hour: the parent kills the process during that sleep.
- `verify`: starts a runtime on the same data, lets the rerun of the alarm start,
  reads the alarm's status while that rerun is in its handler, lets it finish,
  and prints one JSON line with what it saw.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from alarmtop.core import AlarmInfo, DurableObject, Runtime, SystemClock

HOUR_S = 3600.0
WAIT_S = 30.0  # generous: the machine may be loaded


class Crashy(DurableObject):
    async def arm(self, in_ms: int) -> None:
        await self.ctx.storage.put("armed", True)
        await self.ctx.storage.set_alarm(self.ctx.now_ms() + in_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        runs = (await self.ctx.storage.get("runs") or [])
        runs.append({"retry_count": info.retry_count, "is_retry": info.is_retry})
        await self.ctx.storage.put("runs", runs)
        if self.env["phase"] == "crash":
            _write_marker(self.env["marker"])
            await self.ctx.sleep(HOUR_S)  # killed during this
        else:
            self.env["started"].set()
            await self.env["release"].wait()

    async def runs(self) -> list[dict[str, Any]]:
        return list(await self.ctx.storage.get("runs") or [])


class Counter(DurableObject):
    async def write(self, n: int) -> None:
        await self.ctx.storage.put("n", n)

    async def read(self) -> int | None:
        value = await self.ctx.storage.get("n")
        return None if value is None else int(value)


def _write_marker(path: str) -> None:
    with open(path, "w") as f:
        f.write("in handler\n")
        f.flush()
        os.fsync(f.fileno())


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _runtime(data_dir: str, env: dict[str, Any]) -> Runtime:
    rt = Runtime(data_dir, clock=SystemClock(), env=env, sweep_interval=HOUR_S)
    rt.register(Crashy)
    rt.register(Counter)
    return rt


async def crash(data_dir: str, marker: str) -> None:
    rt = _runtime(data_dir, {"phase": "crash", "marker": marker})
    await rt.start()
    await rt.get(Crashy, "c").arm(50)
    _say("ARMED")
    counter = rt.get(Counter, "w")
    n = 0
    while True:  # until SIGKILL
        n += 1
        await counter.write(n)
        _say(f"ACK {n}")


async def verify(data_dir: str) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    rt = _runtime(data_dir, {"phase": "verify", "started": started, "release": release})
    await rt.start()
    try:
        await asyncio.wait_for(started.wait(), WAIT_S)
        during = await rt.alarm(Crashy, "c")  # the rerun is in its handler now
        release.set()
        runs = await asyncio.wait_for(rt.get(Crashy, "c").runs(), WAIT_S)
        after = await rt.alarm(Crashy, "c")
        counter = await rt.get(Counter, "w").read()
    finally:
        await rt.stop()
    assert during is not None
    _say(json.dumps({
        "runs": runs,
        "during": {"state": during.state, "retry_count": during.retry_count,
                   "attempts": [a.to_dict() for a in during.attempts]},
        "after": None if after is None else after.state,
        "counter": counter,
    }))


def main() -> None:
    phase, data_dir = sys.argv[1], sys.argv[2]
    if phase == "crash":
        asyncio.run(crash(data_dir, sys.argv[3]))
    else:
        asyncio.run(verify(data_dir))


if __name__ == "__main__":
    main()
