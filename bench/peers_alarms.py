"""Scenario 1 against its peers: alarms fired by alarmtop, APScheduler and huey.

The same workload for every system, in the same run: N one-shot timers (N jobs,
N tasks, or N objects with one alarm each), trivial bodies that only note how late
they started, in two shapes:

- burst: all N due at the same instant t0 (fired/s = N / (last start - t0));
- spread: due evenly over `--spread-s` seconds (lateness p50/p99/max).

Systems:

- `aps-sqlite`: APScheduler 3.11 `AsyncIOScheduler` with a `SQLAlchemyJobStore`
  on SQLite (what APScheduler creates: rollback journal, synchronous=FULL), date
  triggers, coroutine jobs on its `AsyncIOExecutor`, `misfire_grace_time=None` (so
  no late job is dropped). A due job is removed from the store (a commit, fsync'd)
  when it is handed to the executor, before it runs. Jobs are added while the
  scheduler is paused, one commit each: "time to schedule" is that.
- `aps-memory`: the same with its `MemoryJobStore`: nothing is durable.
- `huey`: huey 3.x `SqliteHuey(fsync=True)` (WAL, synchronous=FULL), `task.schedule(
  eta=...)`, a consumer in the same process with 4 worker threads and its scheduler
  ticking every second (its minimum); idle workers poll every 0.1 s at most (the
  default backs off to 10 s, which would add seconds of lateness). A task is
  dequeued (a commit) before it runs.
- `alarmtop`: bench/alarm_fire.py's runner with N objects of one alarm each
  (`--objects N`): an alarm counts when its completion is durable (fsync'd); its
  handler-start lateness is the figure compared with the others' start lateness.

So the peers run each timer at most once with its removal durable before the
body runs; alarmtop runs it at least once with its completion durable after the
body ran. Ratios are printed as alarmtop / peer (fired/s) and peer / alarmtop
(lateness, CPU per timer), medians of this run.

    .venv/bin/python bench/peers_alarms.py [--quick] [--repeats 3] [--alarms N]
        [--spread-s S] [--systems alarmtop,aps-sqlite,aps-memory,huey]
        [--shape burst,spread]
"""

from __future__ import annotations

import asyncio
import json
import resource
import shutil
import statistics
import sys
import threading
import time
from array import array
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from common import Table, base_parser, emit_child, peak_rss_mb, percentile, run_child, work_dir

ALARM_FIRE = str(Path(__file__).with_name("alarm_fire.py"))
SYSTEMS = ("alarmtop", "aps-sqlite", "aps-memory", "huey")
SETUP_MARGIN_S = 1.0
CALIBRATION = 200  # jobs added first to time adding: t0 = now + 2x the expected time
HUEY_WORKERS = 4


class Seen:
    """Start lateness of every timer, and when the last one started."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.late = array("d")
        self.last_ms = 0.0
        self.lock = threading.Lock()
        self.all_done = threading.Event()

    def fired(self, due_ms: float) -> None:
        now = time.time() * 1000
        with self.lock:
            self.late.append(now - due_ms)
            self.last_ms = max(self.last_ms, now)
            if len(self.late) == self.n:
                self.all_done.set()


SEEN: Seen | None = None


async def aps_job(due_ms: float) -> None:
    """An APScheduler job (a module-level coroutine, so the SQL job store can name it)."""
    assert SEEN is not None
    SEEN.fired(due_ms)


def due_times(shape: str, n: int, t0_ms: float, spread_ms: float) -> list[float]:
    if shape == "burst":
        return [t0_ms] * n
    return [t0_ms + i * spread_ms / n for i in range(n)]


def figures(seen: Seen, t0_ms: float, add_s: float, cpu0: Any) -> dict[str, float]:
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return {
        "fired_per_s": seen.n / ((seen.last_ms - t0_ms) / 1000),
        "start_p50_ms": percentile(seen.late, 50),
        "start_p99_ms": percentile(seen.late, 99),
        "start_max_ms": max(seen.late),
        "cpu_us": cpu_s / seen.n * 1e6,
        "schedule_s": add_s,
        "peak_rss_mb": peak_rss_mb(),
    }


async def run_aps(opts: dict[str, Any]) -> dict[str, float]:
    from apscheduler.jobstores.memory import MemoryJobStore
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    global SEEN
    n = opts["alarms"]
    seen = SEEN = Seen(n)
    data = Path(opts["dir"])
    store = (SQLAlchemyJobStore(url=f"sqlite:///{data / 'jobs.sqlite'}")
             if opts["system"] == "aps-sqlite" else MemoryJobStore())
    sched = AsyncIOScheduler(jobstores={"default": store},
                             job_defaults={"misfire_grace_time": None, "coalesce": False})
    sched.start(paused=True)
    # t0 leaves time to add every job first: time adding (and removing) a few.
    t_cal = time.perf_counter()
    for i in range(CALIBRATION):
        sched.add_job(aps_job, "date", run_date=datetime.now(UTC), args=[0.0], id=f"c{i}")
        sched.remove_job(f"c{i}")
    per_job_s = (time.perf_counter() - t_cal) / CALIBRATION / 2
    t0_ms = time.time() * 1000 + (SETUP_MARGIN_S + 2 * n * per_job_s) * 1000
    t_add = time.perf_counter()
    for i, due in enumerate(due_times(opts["shape"], n, t0_ms, opts["spread_s"] * 1000)):
        sched.add_job(aps_job, "date", run_date=datetime.fromtimestamp(due / 1000, tz=UTC),
                      args=[due], id=f"j{i}")
    add_s = time.perf_counter() - t_add
    if time.time() * 1000 >= t0_ms:
        raise SystemExit(f"adding took {add_s:.1f} s, past t0: raise SETUP_MARGIN_S")
    # CPU counts from here: APScheduler runs a burst in one callback at t0, which
    # could run before this coroutine wakes at t0. Idle until t0 costs it nothing.
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    sched.resume()
    await asyncio.sleep(max(0.0, t0_ms / 1000 - time.time()))
    while not seen.all_done.is_set():
        await asyncio.sleep(0.01)
        if time.time() * 1000 > t0_ms + 600_000:
            raise SystemExit(f"APScheduler fired {len(seen.late)} of {n} in 600 s")
    result = figures(seen, t0_ms, add_s, cpu0)
    sched.shutdown(wait=False)
    return result


def run_huey(opts: dict[str, Any]) -> dict[str, float]:
    from huey import SqliteHuey

    n = opts["alarms"]
    seen = Seen(n)
    data = Path(opts["dir"])
    huey = SqliteHuey("bench", filename=str(data / "huey.sqlite"), fsync=True)

    @huey.task()
    def fire(due_ms: float) -> None:
        seen.fired(due_ms)

    consumer = huey.create_consumer(workers=HUEY_WORKERS, worker_type="thread",
                                    periodic=False, scheduler_interval=1,
                                    initial_delay=0.01, backoff=1.15, max_delay=0.1)
    consumer.start()
    t_cal = time.perf_counter()  # time scheduling a few (far ahead), as for APScheduler
    for _ in range(CALIBRATION):
        fire.schedule(args=(0.0,), eta=datetime.fromtimestamp(time.time() + 3600, tz=UTC))
    per_task_s = (time.perf_counter() - t_cal) / CALIBRATION
    seen.n = n  # the calibration tasks never run
    t0_ms = time.time() * 1000 + (SETUP_MARGIN_S + 2 * n * per_task_s) * 1000
    t_add = time.perf_counter()
    for due in due_times(opts["shape"], n, t0_ms, opts["spread_s"] * 1000):
        fire.schedule(args=(due,), eta=datetime.fromtimestamp(due / 1000, tz=UTC))
    add_s = time.perf_counter() - t_add
    if time.time() * 1000 >= t0_ms:
        raise SystemExit(f"scheduling took {add_s:.1f} s, past t0: raise SETUP_MARGIN_S")
    time.sleep(max(0.0, t0_ms / 1000 - time.time()))
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    if not seen.all_done.wait(600):
        raise SystemExit(f"huey ran {len(seen.late)} of {n} in 600 s")
    result = figures(seen, t0_ms, add_s, cpu0)
    consumer.stop(graceful=False)
    return result


def child(opts: dict[str, Any]) -> None:
    Path(opts["dir"]).mkdir(parents=True, exist_ok=True)
    if opts["system"] == "huey":
        result = run_huey(opts)
    else:
        result = asyncio.run(run_aps(opts))
    emit_child(result)


def run_alarmtop(opts: dict[str, Any]) -> dict[str, float]:
    """One run of bench/alarm_fire.py's child: N objects, one alarm each."""
    n = opts["alarms"]
    out = run_child(ALARM_FIRE, ["--child", json.dumps({
        "dir": opts["dir"], "shape": opts["shape"], "alarms": n, "objects": n,
        "spread_s": opts["spread_s"], "max_concurrent": 256, "max_resident": 1000})])
    return {"fired_per_s": out["fired_per_s"], "start_p50_ms": out["start_p50_ms"],
            "start_p99_ms": out["start_p99_ms"], "start_max_ms": out["start_max_ms"],
            "done_p50_ms": out["done_p50_ms"], "done_p99_ms": out["done_p99_ms"],
            "done_max_ms": out["done_max_ms"], "cpu_us": out["cpu_us"],
            "schedule_s": n / out["arm_per_s"], "peak_rss_mb": out["peak_rss_mb"]}


UNITS = {"fired_per_s": "/s", "start_p50_ms": "ms", "start_p99_ms": "ms", "start_max_ms": "ms",
         "done_p50_ms": "ms", "done_p99_ms": "ms", "done_max_ms": "ms", "cpu_us": "us",
         "schedule_s": "s", "peak_rss_mb": "MiB"}
LABELS = {
    "fired_per_s": "fired/s",
    "start_p50_ms": "lateness at start p50",
    "start_p99_ms": "lateness at start p99",
    "start_max_ms": "lateness at start max",
    "done_p50_ms": "lateness at durable completion p50",
    "done_p99_ms": "lateness at durable completion p99",
    "done_max_ms": "lateness at durable completion max",
    "cpu_us": "process CPU per timer (from t0)",
    "schedule_s": "time to schedule all (set-up)",
    "peak_rss_mb": "peak RSS",
}


def med(table: Table, key: str) -> float:
    return statistics.median(table.rows[LABELS[key]])


def print_ratios(results: dict[tuple[str, str], Table], shapes: list[str], n: int) -> None:
    print(f"\n== ratios, alarmtop against each peer ({n:,} timers; medians of this run)")
    print(f"{'shape':<8}{'peer':<12}{'fired/s':>9}{'p50 late':>10}{'p99 late':>10}"
          f"{'CPU':>8}{'schedule':>10}  bar")
    for shape in shapes:
        at = results.get(("alarmtop", shape))
        if at is None:
            continue
        for peer in SYSTEMS[1:]:
            other = results.get((peer, shape))
            if other is None:
                continue
            fired = med(at, "fired_per_s") / med(other, "fired_per_s")
            p50 = med(other, "start_p50_ms") / max(med(at, "start_p50_ms"), 1e-3)
            p99 = med(other, "start_p99_ms") / max(med(at, "start_p99_ms"), 1e-3)
            # CPU per timer only in a burst: spread runs mostly wait, and alarmtop's cost
            # per alarm at a low rate is thread and fsync wake-ups, not work.
            cpu = med(other, "cpu_us") / med(at, "cpu_us") if shape == "burst" else 0.0
            sched = med(other, "schedule_s") / med(at, "schedule_s")
            bar = ""
            if shape == "burst" and peer in ("aps-sqlite", "huey"):
                bar = f">= 10x fired/s: {'met' if fired >= 10 else 'NOT met'}"
            cpu_text = f"{cpu:>7.1f}x" if cpu else f"{'-':>8}"
            print(f"{shape:<8}{peer:<12}{fired:>8.1f}x{p50:>9.1f}x{p99:>9.1f}x{cpu_text}"
                  f"{sched:>9.1f}x  {bar}")
    print("(fired/s: alarmtop / peer; lateness, CPU and time to schedule: peer / alarmtop; "
          "> 1 is alarmtop's favour)")


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--alarms", type=int, default=None, help="N (full 10,000)")
    parser.add_argument("--spread-s", type=float, default=None, help="full 10 s")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--shape", default="burst,spread")
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    n = args.alarms or (1_000 if args.quick else 10_000)
    spread_s = args.spread_s or (3.0 if args.quick else 10.0)
    shapes, systems = args.shape.split(","), args.systems.split(",")
    results: dict[tuple[str, str], Table] = {}
    for shape in shapes:
        for system in systems:
            title = (f"{system}, {shape}: {n:,} timers"
                     + (f" due over {spread_s:g} s" if shape == "spread" else " due at once"))
            table = Table(title)
            for _ in range(max(3, args.repeats)):
                root = work_dir(args.dir, "peers-alarms-")
                opts = {"dir": str(root / "data"), "system": system, "shape": shape,
                        "alarms": n, "spread_s": spread_s}
                try:
                    result = (run_alarmtop(opts) if system == "alarmtop"
                              else run_child(__file__, ["--child", json.dumps(opts)]))
                finally:
                    shutil.rmtree(root, ignore_errors=True)
                for key, value in result.items():
                    table.add(LABELS[key], value, UNITS[key])
                print(f"  {title}: {result['fired_per_s']:,.0f}/s, p99 "
                      f"{result['start_p99_ms']:.1f} ms", file=sys.stderr)
            table.print()
            results[(system, shape)] = table
    print_ratios(results, shapes, n)
    if args.json:
        print(json.dumps({t.title: t.as_dict() for t in results.values()}))


if __name__ == "__main__":
    main()
