"""A runtime process killed at one exact write boundary, for `test_commit_kills.py`.

    python -m tests.storage.commit_worker die DATA CASE POINT N
    python -m tests.storage.commit_worker check DATA CASE

`die` prepares CASE, arms the fault point POINT to SIGKILL the process at its Nth
hit that concerns the object, then makes the call (or runs the attempt) of CASE;
if it survives (fewer hits than N) it prints one JSON line and stops cleanly.
`check` is a new process on the same data: it moves the virtual clock a minute
on, so whatever was due has fired, and prints the object's value, its handler's
runs (kept in its own storage), its alarm and its index row as one JSON line.
Times are ms after START_MS; the restart happens 2 s in, after any attempt of `die`.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from alarmtop.core import AlarmInfo, DurableObject, Runtime, VirtualClock
from alarmtop.core.storage.faultpoints import FAULT_POINTS, kill, when

START_MS = 1_800_000_000_000
OLD_AT, NEW_AT, LATER_AT, REARM_AT = 10_000, 5_000, 30_000, 20_000  # ms after START_MS


class Lease(DurableObject):
    async def put(self, key: str, value: Any) -> None:
        await self.ctx.storage.put(key, value)

    async def set_at(self, at: int | None, value: str | None = None) -> None:
        if value is not None:
            await self.ctx.storage.put("v", value)
        if at is None:
            await self.ctx.storage.delete_alarm()
        else:
            await self.ctx.storage.set_alarm(START_MS + at)

    async def state(self) -> dict[str, Any]:
        return {"value": await self.ctx.storage.get("v"),
                "runs": await self.ctx.storage.get("runs") or [],
                "alarm": await self.ctx.storage.get_alarm()}

    async def alarm(self, info: AlarmInfo) -> None:
        runs = await self.ctx.storage.get("runs") or []
        runs.append([self.ctx.now_ms() - START_MS, info.retry_count])
        await self.ctx.storage.put("runs", runs)
        again = await self.ctx.storage.get("rearm_to")
        if again is not None:
            await self.ctx.storage.put("rearm_to", None)
            await self.ctx.storage.set_alarm(START_MS + again)


BARE_RUNS: list[list[int]] = []


class Bare(DurableObject):
    """Never touches its storage: its alarm lives in its index row."""

    async def set_at(self, at: int | None, value: str | None = None) -> None:
        if at is None:
            await self.ctx.storage.delete_alarm()
        else:
            await self.ctx.storage.set_alarm(START_MS + at)

    async def state(self) -> dict[str, Any]:
        return {"value": None, "runs": BARE_RUNS, "alarm": await self.ctx.storage.get_alarm()}

    async def alarm(self, info: AlarmInfo) -> None:
        BARE_RUNS.append([self.ctx.now_ms() - START_MS, info.retry_count])


def class_of(case: str) -> type[DurableObject]:
    return Bare if case.endswith("bare") else Lease


def runtime(data: Path, clock: VirtualClock) -> Runtime:
    rt = Runtime(data, clock=clock, hibernate_after=3600)
    rt.register(Lease)
    rt.register(Bare)
    return rt


async def prepare(rt: Runtime, case: str) -> None:
    obj = rt.get(class_of(case), "l1")
    if case == "set":
        await obj.put("v", "before")
    elif case in ("earlier", "later", "delete"):
        await obj.set_at(OLD_AT, "before")
    elif case in ("attempt", "attempt-bare"):
        await obj.set_at(1000, None if case.endswith("bare") else "before")
    elif case == "attempt-rearm":
        await obj.set_at(1000, "before")
        await obj.put("rearm_to", REARM_AT)


async def act(rt: Runtime, case: str, clock: VirtualClock) -> None:
    obj = rt.get(class_of(case), "l1")
    if case in ("set", "set-bare", "earlier"):
        await obj.set_at(NEW_AT, None if case.endswith("bare") else "after")
    elif case == "later":
        await obj.set_at(LATER_AT, "after")
    elif case == "delete":
        await obj.set_at(None, "after")
    else:
        await clock.advance(2)  # the attempt at +1 s runs


async def die(data: Path, case: str, point: str, nth: int) -> None:
    clock = VirtualClock(START_MS)
    rt = runtime(data, clock)
    await rt.start()
    await prepare(rt, case)
    key = (class_of(case).__name__, "l1")
    hits = [0]

    def nth_hit(info: dict[str, Any]) -> bool:
        if key not in info.get("keys", [info.get("key")]):
            return False
        hits[0] += 1
        return hits[0] == nth

    FAULT_POINTS.arm(point, when(nth_hit, kill))
    await act(rt, case, clock)
    FAULT_POINTS.disarm()
    print(json.dumps({"survived": True, "hits": hits[0]}), flush=True)
    await rt.stop()


async def check(data: Path, case: str) -> None:
    clock = VirtualClock(START_MS + 2000)  # where `die` stopped at the latest: time goes on
    rt = runtime(data, clock)
    await rt.start()
    await clock.advance(60)
    cls = class_of(case)
    state = await rt.get(cls, "l1").state()
    row = await rt.alarm(cls, "l1")
    state["row"] = None if row is None else row.state
    print(json.dumps(state), flush=True)
    await rt.stop()


def main(argv: list[str]) -> None:
    phase, data, case = argv[0], Path(argv[1]), argv[2]
    if phase == "die":
        asyncio.run(die(data, case, argv[3], int(argv[4])))
    elif phase == "check":
        asyncio.run(check(data, case))
    else:
        raise SystemExit(f"unknown phase {phase!r}: die or check")


if __name__ == "__main__":
    main(sys.argv[1:])
