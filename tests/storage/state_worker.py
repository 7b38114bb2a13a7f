"""A runtime process killed on one side of the clean-stop record, for
`test_state_kills.py`.

    python -m tests.storage.state_worker die DATA POINT CLEAN
    python -m tests.storage.state_worker check DATA

`die`: a first run (stopped cleanly) sets `Keeper/k`'s alarm; a second run arms
POINT (`index.state.before` or `.after`) to SIGKILL the process when the record
says CLEAN ('0': at the open, '1': at the close), sets `Keeper/j`'s alarm, hibernates
its objects and stops. `check`: a new process runs every alarm and prints one JSON
line: how often each fired, and what the check at start restored.
"""

from __future__ import annotations

import asyncio
import json
import sys

from alarmtop.core import VirtualClock
from alarmtop.core.storage.faultpoints import FAULT_POINTS, kill, when
from alarmtop.testing import START_MS
from tests.storage.wal_worker import Keeper, build

AT = START_MS + 60_000


async def die(data: str, point: str, clean: str) -> None:
    clock = VirtualClock(START_MS)
    async with build(data, clock) as rt:
        await rt.get(Keeper, "k").arm(AT)
    FAULT_POINTS.arm(point, when(lambda info: info["clean"] == (clean == "1"), kill))
    rt = build(data, clock)
    await rt.start()
    await rt.get(Keeper, "j").arm(AT)
    for key in rt.host.resident_keys():
        await rt.host.hibernate(key)
    await rt.stop()
    print(json.dumps({"survived": True}), flush=True)


async def check(data: str) -> None:
    clock = VirtualClock(START_MS + 1000)
    async with build(data, clock) as rt:
        await clock.advance(120)
        fired = {n: await rt.get(Keeper, n).fired() for n in ("k", "j")}
        restored = getattr(rt.backend, "restored", None)
        print(json.dumps({"fired": fired, "restored": restored}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "die":
        asyncio.run(die(*sys.argv[2:5]))
    else:
        asyncio.run(check(sys.argv[2]))
