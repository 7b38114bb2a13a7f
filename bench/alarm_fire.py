"""Scenario 1: alarm fire throughput and lateness, durable.

N alarms over M objects on the wall clock (`SystemClock`), trivial handlers. An
object has one alarm at a time, so each object fires N/M times: its handler re-arms
the object's alarm for its next firing until it has fired N/M times (pass
`--objects N` for one alarm per object instead). Three shapes:

- burst: every firing is due at the same instant t0 (a handler re-arms for t0,
  which is already past, so the object is due again at once);
- spread: the N firings are due evenly over `--spread-s` seconds (object i's k-th
  firing at t0 + (k*M + i) * spread / N);
- spread-half: N/2 firings over the same time, half the rate (below saturation).

An alarm counts as fired when its completion is durable: the runtime emits
`alarm.succeeded` only after the alarm index committed (fsync'd) the outcome, and
the benchmark counts those events. Lateness is measured twice against the
scheduled time: when the handler starts, and when the completion is durable.
Fired/s is N divided by the time from t0 to the last durable completion.

The runtime runs with its defaults (max_concurrent_alarms=256, max_resident=1000,
hibernate_after=10 s): with 10,000 objects, most firings wake their object and
evict another. A listener is attached to the event bus, as the console would be.
Each run is a fresh process on a fresh data dir (peak RSS is that run's alone).
t0 is set from the measured arming rate: the first 500 objects are armed an hour
ahead and timed, t0 leaves twice the time the rest need, and those 500 are then
armed again for their real time. `--profile` profiles from the end of arming to
the last durable completion (the burst, not the set-up).

    .venv/bin/python bench/alarm_fire.py [--quick] [--repeats 3] [--objects M]
        [--alarms N] [--shape burst,spread,spread-half] [--profile out.html]
        [--sizes 10000,100000,1000000]   (cost growth, burst, scenario 6)
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from array import array
from pathlib import Path
from typing import Any

from common import (
    Profiling,
    Table,
    alarmtop_sqlite_settings,
    base_parser,
    emit_child,
    fsync_rate,
    machine,
    peak_rss_mb,
    percentile,
    print_config,
    run_child,
    run_in_fresh_dirs,
    work_area,
    write_json,
)

from alarmtop.core import AlarmInfo, DurableObject, Event, Runtime, SystemClock

ARM_CONCURRENCY = 500
SETUP_MARGIN_S = 1.0


class Plan:
    """When each object fires, and what was seen (kept in `env`, shared by all objects)."""

    def __init__(self, shape: str, alarms: int, objects: int, t0_ms: float,
                 spread_ms: float) -> None:
        self.shape, self.alarms, self.objects = shape, alarms, objects
        self.per_object = alarms // objects
        self.t0_ms, self.spread_ms = t0_ms, spread_ms
        self.index: dict[str, int] = {}
        self.fired: dict[str, int] = {}
        self.scheduled: dict[str, float] = {}
        # Arrays, not lists: a list of 100,000 floats would be traversed by every full
        # GC pass and inflate the runtime's pauses with the benchmark's own bookkeeping.
        self.start_late = array("d")
        self.done_late = array("d")
        self.done = 0
        self.last_done_ms = 0.0
        self.finished = asyncio.Event()

    def due_ms(self, i: int, k: int) -> int:
        if self.shape == "burst":
            return int(self.t0_ms)
        return int(self.t0_ms + (k * self.objects + i) * self.spread_ms / self.alarms)

    def on_fire(self, name: str, scheduled_ms: int) -> int | None:
        """Record a handler start; the object's next due time, if it fires again."""
        self.start_late.append(time.time() * 1000 - scheduled_ms)
        self.scheduled[name] = scheduled_ms
        k = self.fired.get(name, 0) + 1
        self.fired[name] = k
        return self.due_ms(self.index[name], k) if k < self.per_object else None

    def on_event(self, event: Event) -> None:
        if event.type != "alarm.succeeded":
            return
        now = time.time() * 1000
        name = event.data["object"].partition("/")[2]
        self.done_late.append(now - self.scheduled[name])
        self.done += 1
        self.last_done_ms = now
        if self.done == self.alarms:
            self.finished.set()


class Ticker(DurableObject):
    async def arm(self, at_ms: int) -> None:
        await self.ctx.storage.set_alarm(at_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        nxt = self.env.on_fire(self.ctx.id, info.scheduled_ms)
        if nxt is not None:
            await self.ctx.storage.set_alarm(nxt)


async def arm_all(rt: Runtime, plan: Plan) -> float:
    """Arm every object for its first firing, t0 set from the measured arming rate
    (a loaded machine, or a profiler, arms several times slower); seconds taken."""
    names = [f"t{i:07d}" for i in range(plan.objects)]
    plan.index = {n: i for i, n in enumerate(names)}
    t_arm = time.perf_counter()
    first = names[:ARM_CONCURRENCY]
    far = int(time.time() * 1000) + 3_600_000
    await asyncio.gather(*(rt.get(Ticker, n).arm(far) for n in first))
    per_arm_s = (time.perf_counter() - t_arm) / len(first)
    plan.t0_ms = time.time() * 1000 + (SETUP_MARGIN_S + 2 * per_arm_s * len(names)) * 1000
    for lo in range(0, len(names), ARM_CONCURRENCY):  # the first ones again, for real
        await asyncio.gather(*(rt.get(Ticker, n).arm(plan.due_ms(plan.index[n], 0))
                               for n in names[lo:lo + ARM_CONCURRENCY]))
    arm_s = time.perf_counter() - t_arm
    if time.time() * 1000 >= plan.t0_ms:
        raise SystemExit(f"arming took {arm_s:.1f} s, past t0 (the machine slowed down "
                         "during arming): raise SETUP_MARGIN_S")
    return arm_s


async def one_run(opts: dict[str, Any], prof: Profiling) -> dict[str, Any]:
    data = Path(opts["dir"])
    shape, alarms = opts["shape"], opts["alarms"]
    if shape == "spread-half":  # half the rate: below saturation
        shape, alarms = "spread", alarms // 2
    plan = Plan(shape, alarms, opts["objects"], 0.0, opts["spread_s"] * 1000)
    rt = Runtime(data, clock=SystemClock(), env=plan,
                 max_concurrent_alarms=opts["max_concurrent"],
                 max_resident=opts["max_resident"])
    rt.register(Ticker)
    await rt.start()
    rt.events.listen(plan.on_event)
    settings = await alarmtop_sqlite_settings(rt)
    arm_s = await arm_all(rt, plan)
    prof.start()
    await asyncio.sleep(max(0.0, plan.t0_ms / 1000 - time.time()))  # CPU is counted from t0
    cpu0, thread0 = resource.getrusage(resource.RUSAGE_SELF), time.thread_time()
    await asyncio.wait_for(plan.finished.wait(), timeout=600)
    cpu1, thread1 = resource.getrusage(resource.RUSAGE_SELF), time.thread_time()
    prof.stop()
    await rt.stop()
    cpu_s = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    elapsed_s = (plan.last_done_ms - plan.t0_ms) / 1000
    return {
        "fired_per_s": plan.alarms / elapsed_s,
        "elapsed_s": elapsed_s,
        "start_p50_ms": percentile(plan.start_late, 50),
        "start_p99_ms": percentile(plan.start_late, 99),
        "start_max_ms": max(plan.start_late),
        "done_p50_ms": percentile(plan.done_late, 50),
        "done_p99_ms": percentile(plan.done_late, 99),
        "done_max_ms": max(plan.done_late),
        "loop_cpu_us": (thread1 - thread0) / plan.alarms * 1e6,
        "cpu_us": cpu_s / plan.alarms * 1e6,
        "peak_rss_mb": peak_rss_mb(),
        "arm_per_s": plan.objects / arm_s,
        "samples": float(len(plan.done_late)),
        "settings": settings,
    }


UNITS = {
    "fired_per_s": "/s", "elapsed_s": "s",
    "start_p50_ms": "ms", "start_p99_ms": "ms", "start_max_ms": "ms",
    "done_p50_ms": "ms", "done_p99_ms": "ms", "done_max_ms": "ms",
    "loop_cpu_us": "us", "cpu_us": "us", "peak_rss_mb": "MiB", "arm_per_s": "/s",
    "samples": "",
}
LABELS = {
    "fired_per_s": "fired/s (durable)",
    "elapsed_s": "t0 to last durable completion",
    "start_p50_ms": "lateness at handler start p50",
    "start_p99_ms": "lateness at handler start p99",
    "start_max_ms": "lateness at handler start max",
    "done_p50_ms": "lateness at durable completion p50",
    "done_p99_ms": "lateness at durable completion p99",
    "done_max_ms": "lateness at durable completion max",
    "loop_cpu_us": "event-loop thread CPU per alarm",
    "cpu_us": "process CPU (all threads) per alarm",
    "peak_rss_mb": "peak RSS",
    "arm_per_s": "arming RPCs/s (set-up)",
    "samples": "lateness samples per run",
}


def child(opts: dict[str, Any]) -> None:
    profile = opts.pop("profile", None)
    emit_child(asyncio.run(one_run(opts, Profiling(profile))))


def config(args: Any) -> dict[str, Any]:
    return {"machine": machine(),
            "fsync rate (SQLite commits/s, WAL, FULL)": round(fsync_rate(args.dir)),
            "alarmtop": "embedded SQLite backend, WAL, synchronous=FULL (checked on its own "
                        "connection in every run); an alarm counts at durable completion",
            "runtime options": f"max_concurrent_alarms={args.max_concurrent}, "
                               f"max_resident={args.max_resident}, hibernate_after=10 s"}


def run_table(args: Any, shape: str, alarms: int, objects: int, title: str) -> Table:
    table = Table(title)
    opts = {"shape": shape, "alarms": alarms, "objects": objects, "spread_s": args.spread_s,
            "max_concurrent": args.max_concurrent, "max_resident": args.max_resident}
    run_in_fresh_dirs(__file__, args, "alarm-fire-", opts, table, LABELS, UNITS,
                      lambda r: f"{title}: {r['fired_per_s']:,.0f}/s")
    return table


def sizes_run(args: Any) -> None:
    """Scenario 6: how time and memory grow with the number of alarms (burst)."""
    sizes = [int(x) for x in args.sizes.split(",")]
    print_config("alarm fire, cost growth (burst)", config(args))
    tables = []
    for n in sizes:
        objects = min(n, args.objects or 10_000)
        if n % objects:
            raise SystemExit(f"size {n} is not a multiple of {objects} objects")
        tables.append(run_table(args, "burst", n, objects,
                                f"alarm fire, burst: {n:,} alarms over {objects:,} objects"))

    def med(t: Table, key: str) -> float:
        return t.median(LABELS[key]) or 0.0

    print("\n== cost growth, burst, against the smallest size (medians)")
    print(f"{'alarms':>10}{'size x':>8}{'time x':>8}{'fired/s':>10}{'loop CPU':>10}"
          f"{'CPU':>8}{'peak RSS':>10}")
    t0, n0 = med(tables[0], "elapsed_s"), sizes[0]
    for n, t in zip(sizes, tables):
        print(f"{n:>10,}{n / n0:>8.0f}{med(t, 'elapsed_s') / t0:>8.1f}"
              f"{med(t, 'fired_per_s'):>10,.0f}{med(t, 'loop_cpu_us'):>8.0f}us"
              f"{med(t, 'cpu_us'):>6.0f}us{med(t, 'peak_rss_mb'):>7.1f}MiB")
    if args.json:
        print(json.dumps({t.title: t.as_dict() for t in tables}))


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--alarms", type=int, default=None, help="N (full 100,000)")
    parser.add_argument("--objects", type=int, default=None, help="M (full 10,000)")
    parser.add_argument("--shape", default="burst,spread,spread-half")
    parser.add_argument("--spread-s", type=float, default=10.0)
    parser.add_argument("--max-concurrent", type=int, default=256,
                        help="Runtime(max_concurrent_alarms=...), the runtime default")
    parser.add_argument("--max-resident", type=int, default=1000,
                        help="Runtime(max_resident=...), the runtime default")
    parser.add_argument("--profile", default=None,
                        help="profile one run of the first --shape (pyinstrument, .html)")
    parser.add_argument("--sizes", default=None,
                        help="cost growth: burst runs of these numbers of alarms, e.g. "
                             "10000,100000,1000000, over --objects objects (fewer if smaller)")
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    if args.sizes:
        sizes_run(args)
        return
    alarms = args.alarms or (20_000 if args.quick else 100_000)
    objects = args.objects or (2_000 if args.quick else 10_000)
    if alarms % objects:
        raise SystemExit("--alarms must be a multiple of --objects")
    shapes = args.shape.split(",")[:1] if args.profile else args.shape.split(",")
    repeats = 1 if args.profile else max(3, args.repeats)
    print_config("alarm fire" + (" (profiled: one run)" if args.profile else ""), config(args))
    tables: list[Table] = []
    for shape in shapes:
        n = alarms // 2 if shape == "spread-half" else alarms
        table = Table(f"alarm fire, {shape}: {n:,} alarms over {objects:,} objects"
                      + (f", due over {args.spread_s:g} s" if shape != "burst" else ""))
        for _ in range(repeats):
            with work_area(args.dir, "alarm-fire-") as root:
                opts = {"dir": str(root / "data"), "shape": shape, "alarms": alarms,
                        "objects": objects, "spread_s": args.spread_s,
                        "max_concurrent": args.max_concurrent,
                        "max_resident": args.max_resident, "profile": args.profile}
                result = run_child(__file__, ["--child", json.dumps(opts)])
            add_result(table, result)
            print(f"  {shape}: {result['fired_per_s']:,.0f}/s, done p99 "
                  f"{result['done_p99_ms']:.1f} ms", file=sys.stderr)
        table.print()
        tables.append(table)
    if args.profile:
        print(f"\nprofile of the firing (arming left out): {args.profile} and "
              f"{Path(args.profile).with_suffix('.txt')}")
    if args.json:
        print(json.dumps({t.title: t.as_dict() for t in tables}))
    write_json(args.json_out, {"tables": {t.title: t.as_dict() for t in tables}})


def add_result(table: Table, result: dict[str, Any]) -> None:
    for key, value in result.items():
        if key in LABELS:
            table.add(LABELS[key], value, UNITS[key])

if __name__ == "__main__":
    main()
