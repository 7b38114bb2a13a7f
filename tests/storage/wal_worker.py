"""A runtime in its own process that sets alarms and dies, for `test_lost_wal.py`.

`python -m tests.storage.wal_worker DATA_DIR`: on a virtual clock at START_MS, sets the
alarms of `Keeper` objects k00..k19 (each writes to its own database), lets
k18's alarm fire (it succeeds: done for good) and k19's die to a dead letter an
operator then clears, hibernates every object (their files are whole, their logs
checkpointed), prints READY and kills itself: runtime.sqlite's last commits are in
its write-ahead log only.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from alarmtop.core import AlarmInfo, DurableObject, RetryPolicy, Runtime, VirtualClock
from alarmtop.testing import START_MS

ALARMS = 18
LATER_MS = START_MS + 3_600_000


class Keeper(DurableObject):
    async def arm(self, at_ms: int) -> None:
        await self.ctx.storage.put("armed", at_ms)
        await self.ctx.storage.set_alarm(at_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        if self.ctx.id == "k19":
            raise RuntimeError("always fails")
        await self.ctx.storage.put("fired", (await self.ctx.storage.get("fired") or 0) + 1)

    async def fired(self) -> int:
        return int(await self.ctx.storage.get("fired") or 0)

    async def alarm_at(self) -> int | None:
        return await self.ctx.storage.get_alarm()


def build(data_dir: str, clock: VirtualClock) -> Runtime:
    rt = Runtime(data_dir, clock=clock, retry_policy=RetryPolicy(max_retries=0))
    rt.register(Keeper)
    return rt


async def main(data_dir: str) -> None:
    clock = VirtualClock(START_MS)
    rt = build(data_dir, clock)
    await rt.start()
    await rt.get(Keeper, "k18").arm(START_MS + 1000)
    await rt.get(Keeper, "k19").arm(START_MS + 1000)
    await clock.advance(2)
    await rt.clear_dead_letter(Keeper, "k19")
    for i in range(ALARMS):
        await rt.get(Keeper, f"k{i:02d}").arm(LATER_MS)
    for key in rt.host.resident_keys():
        await rt.host.hibernate(key)
    print("READY", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
