"""Scenario 2: scale of pending work.

1,000,000 pending alarms (100,000 with --quick). An object has one alarm, so that
is 1,000,000 objects; each is armed through its stub (`await stub.arm(at)`, one
RPC per object, 500 in flight), the path user code takes. The alarms are due an
hour ahead, so none fires while the figures are taken. One more object,
`first`, is armed to be due just after the scheduling process stops.

Per repeat, three processes on one fresh data dir:
1. schedule: start a runtime, arm every object, stop. Time to schedule, peak RSS.
2. restart: once `first` is due, a new process constructs and starts a runtime on
   the same data. Restart-to-first-fire is from `Runtime(...)` to `first`'s handler
   running; then RSS while idle (1,000,000 pending, nothing resident) minus the
   RSS of the same process before the runtime was made.
3. hibernation, in the restarted process: four times, wake W other objects with
   an RPC that writes their storage (so each opens its own SQLite file, on its own
   aiosqlite thread) and let all of them hibernate. Reported: the RSS growth per
   hibernated object in round 1 (it includes the C allocator growing its pools for
   those threads) and round 2 (what stays), the Python heap kept per hibernated
   object in round 4 (tracemalloc, started in round 3), and the open files left.

    .venv/bin/python bench/pending_scale.py [--quick] [--repeats 3] [--objects N]
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import time
import tracemalloc
from typing import Any

from common import (
    Table,
    base_parser,
    current_rss_mb,
    emit_child,
    machine,
    peak_rss_mb,
    print_config,
    run_child,
    work_area,
    write_json,
)

from alarmtop.core import AlarmInfo, DurableObject, Runtime, SystemClock

IN_FLIGHT = 500
HOUR_MS = 3_600_000
FIRST_DELAY_MS = 1500
POLL_S = 0.01


class Sleeper(DurableObject):
    async def arm(self, at_ms: int) -> None:
        await self.ctx.storage.set_alarm(at_ms)

    async def touch(self) -> None:
        await self.ctx.storage.put("touched", True)

    async def alarm(self, info: AlarmInfo) -> None:
        fired = self.env.get("fired")
        if fired is not None and not fired.done():
            fired.set_result(time.perf_counter())


def _runtime(data: str, env: dict[str, Any], **options: Any) -> Runtime:
    rt = Runtime(data, clock=SystemClock(), env=env, **options)
    rt.register(Sleeper)
    return rt


async def schedule(opts: dict[str, Any]) -> dict[str, float]:
    rt = _runtime(opts["dir"], {})
    await rt.start()
    n = opts["objects"]
    base = rt.clock.now_ms() + HOUR_MS
    t0 = time.perf_counter()
    for lo in range(0, n, IN_FLIGHT):
        await asyncio.gather(*(rt.get(Sleeper, f"s{i:07d}").arm(base + i % 1_000_000)
                               for i in range(lo, min(n, lo + IN_FLIGHT))))
    elapsed = time.perf_counter() - t0
    first_due = rt.clock.now_ms() + FIRST_DELAY_MS
    await rt.get(Sleeper, "first").arm(first_due)
    await rt.stop()
    return {"schedule_s": elapsed, "schedule_per_s": n / elapsed,
            "schedule_peak_rss_mb": peak_rss_mb(), "first_due_ms": first_due}


async def restart(opts: dict[str, Any]) -> dict[str, float]:
    # Wait until `first` is due, so that what follows measures start-up, not waiting.
    await asyncio.sleep(max(0.0, (opts["first_due_ms"] + 5) / 1000 - time.time()))
    gc.collect()
    rss0 = current_rss_mb()
    fired: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    t0 = time.perf_counter()
    rt = _runtime(opts["dir"], {"fired": fired}, hibernate_after=1.0)
    await rt.start()
    started = time.perf_counter()
    first_fire = await asyncio.wait_for(fired, 120)
    await until_hibernated(rt)  # `first` hibernates after a second
    gc.collect()
    idle_mb = current_rss_mb() - rss0
    pending = sum((await rt.alarm_counts()).values())
    woken = await hibernation(rt, opts["wake"])
    await rt.stop()
    return {"restart_to_first_fire_s": first_fire - t0, "start_s": started - t0,
            "idle_rss_mb": idle_mb, "pending": pending, **woken}


async def until_hibernated(rt: Runtime, timeout_s: float = 120) -> None:
    """Poll (this is the benchmark watching the runtime, not a timer of its own)."""
    for _ in range(int(timeout_s / POLL_S)):
        if not rt.resident_objects():
            return
        await asyncio.sleep(POLL_S)


async def hibernation(rt: Runtime, count: int) -> dict[str, float]:
    """Rounds of `count` objects each: woken with a storage write, then hibernated.

    Round 1 also grows the C allocator's pools (it keeps the freed memory of the
    connection threads for reuse) and the runtime's tables; round 2 shows the RSS
    that stays per hibernated object once those exist. Tracemalloc runs from round
    3 on (it costs RSS itself); round 4 shows the Python heap that stays.
    """
    out: dict[str, float] = {}
    for rnd in range(1, 5):
        if rnd == 3:
            tracemalloc.start()
        gc.collect()
        rss0, heap0 = current_rss_mb(), tracemalloc.get_traced_memory()[0]
        fds0 = len(os.listdir("/proc/self/fd"))
        first = (rnd - 1) * count
        for lo in range(first, first + count, IN_FLIGHT):
            await asyncio.gather(*(rt.get(Sleeper, f"s{i:07d}").touch()
                                   for i in range(lo, min(first + count, lo + IN_FLIGHT))))
        await until_hibernated(rt)
        gc.collect()
        if rnd <= 2:
            out[f"hibernated_rss{rnd}_b"] = (current_rss_mb() - rss0) * 2**20 / count
        elif rnd == 4:
            out["hibernated_heap_b"] = (tracemalloc.get_traced_memory()[0] - heap0) / count
            tracemalloc.stop()
        out["open_files_after"] = len(os.listdir("/proc/self/fd")) - fds0
        out["resident_after"] = len(rt.resident_objects())
    return out


UNITS = {"schedule_s": "s", "schedule_per_s": "/s", "schedule_peak_rss_mb": "MiB",
         "restart_to_first_fire_s": "s", "start_s": "s", "idle_rss_mb": "MiB",
         "pending": "", "hibernated_rss1_b": "B", "hibernated_rss2_b": "B",
         "hibernated_heap_b": "B",
         "open_files_after": "",
         "resident_after": ""}
LABELS = {"schedule_s": "time to schedule (RPC per object)",
          "schedule_per_s": "scheduling rate",
          "schedule_peak_rss_mb": "peak RSS while scheduling",
          "restart_to_first_fire_s": "restart to first fire",
          "start_s": "Runtime() + start()",
          "idle_rss_mb": "RSS while idle (growth over bare process)",
          "pending": "pending alarms after restart",
          "hibernated_rss1_b": "RSS growth per hibernated object, 1st round",
          "hibernated_rss2_b": "RSS growth per hibernated object, 2nd round",
          "hibernated_heap_b": "Python heap kept per hibernated obj, 4th",
          "open_files_after": "open files left after hibernation",
          "resident_after": "objects resident after hibernation"}


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--objects", type=int, default=None, help="pending alarms (full 1M)")
    parser.add_argument("--wake", type=int, default=None,
                        help="objects woken for the hibernation figure (full 2,000)")
    args = parser.parse_args()
    if args.child:
        opts = json.loads(args.child)
        emit_child(asyncio.run(schedule(opts) if opts["phase"] == "schedule"
                               else restart(opts)))
        return
    objects = args.objects or (100_000 if args.quick else 1_000_000)
    wake = args.wake or (500 if args.quick else 2_000)
    print_config("pending scale", {
        "machine": machine(), "pending alarms": objects, "objects woken per round": wake,
        "runtime": "embedded SQLite (WAL, synchronous=FULL), SystemClock"})
    table = Table(f"pending scale: {objects:,} pending alarms over {objects:,} objects")
    for _ in range(max(3, args.repeats)):
        with work_area(args.dir, "pending-scale-") as root:
            opts: dict[str, Any] = {"dir": str(root / "data"), "objects": objects,
                                    "wake": wake, "phase": "schedule"}
            first = run_child(__file__, ["--child", json.dumps(opts)])
            opts.update(phase="restart", first_due_ms=first.pop("first_due_ms"))
            second = run_child(__file__, ["--child", json.dumps(opts)])
        for key, value in {**first, **second}.items():
            table.add(LABELS[key], value, UNITS[key])
    table.print()
    if args.json:
        print(json.dumps(table.as_dict()))
    write_json(args.json_out, {"script": "pending_scale",
                               "tables": {table.title: table.as_dict()}})


if __name__ == "__main__":
    main()
