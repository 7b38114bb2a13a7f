"""Scenario 1 against its peers: alarms fired by alarmtop, APScheduler and huey.

The same workload for every system, in the same run: N one-shot timers (N jobs,
N tasks, or N objects with one alarm each), trivial bodies that only note how late
they started, in two shapes:

- burst: all N due at the same instant t0 (fired/s = N / (last start - t0));
- spread: due evenly over `--spread-s` seconds (lateness p50/p99/max).

Systems (bench/PEERS.md says why each setting is the fair one):

- `aps-sqlite-wal` (the headline APScheduler line): APScheduler 3.11
  `AsyncIOScheduler` with a `SQLAlchemyJobStore` on SQLite in WAL mode with
  synchronous=FULL (the settings alarmtop runs with: each commit is on disk when it
  returns), set on every connection of the store's engine and read back in each
  run; date triggers, coroutine jobs on its `AsyncIOExecutor`,
  `misfire_grace_time=None` (no late job is dropped). A due job is removed from the
  store (a commit) when it is handed to the executor, before it runs. Jobs are
  added while the scheduler is paused, one commit each: "time to schedule".
- `aps-sqlite`: the same on what `SQLAlchemyJobStore(url="sqlite:///...")` creates:
  SQLite's rollback journal (several fsyncs per commit), synchronous=FULL.
- `aps-memory`: the same with its `MemoryJobStore`: nothing is durable (the cost
  of durability, not a peer).
- `huey` (the headline huey line): huey 3.x `SqliteHuey(fsync=True)` (WAL,
  synchronous=FULL), `task.schedule(eta=...)`, a consumer in the same process with 4
  worker threads and its scheduler ticking every second (its minimum); idle workers
  poll every 0.1 s at most (the default backs off to 10 s, which would add seconds
  of lateness). A task is dequeued (a commit) before it runs.
- `huey-default`: `SqliteHuey()` as created: WAL, synchronous left at SQLite's
  build default (the configuration block says what that is on this machine).
- `alarmtop`: bench/alarm_fire.py's runner with N objects of one alarm each
  (`--objects N`), SQLite WAL with synchronous=FULL: an alarm counts when its
  completion is durable; its handler-start lateness is the figure compared with
  the others' start lateness.

So the peers run each timer at most once with its removal durable before the
body runs; alarmtop runs it at least once with its completion durable after the
body ran. Every peer here keeps its due time as given (the date trigger's
run_date, the task's eta), so lateness against the peer's own recorded due time
is the same figure as against the intended one.

Repeats are interleaved: round i runs every system once, and each ratio is the
median of the per-round ratios (alarmtop / peer for fired/s, peer / alarmtop for
lateness and CPU per timer), with their min-max. The machine's fsync rate is
measured before and after and printed beside the ratios.

    .venv/bin/python bench/peers_alarms.py [--quick] [--repeats 3] [--alarms N]
        [--spread-s S] [--shape burst,spread]
        [--systems alarmtop,aps-sqlite-wal,aps-sqlite,aps-memory,huey,huey-default]

Full: about 10 min on 2 shared cores (--quick: about 2 min).
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import threading
import time
from array import array
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from common import (
    Ratios,
    Table,
    base_parser,
    emit_child,
    fsync_rate,
    machine,
    paired_ratio,
    peak_rss_mb,
    percentile,
    print_config,
    rounds,
    run_child,
    sqlite_pragmas,
    version_of,
    work_area,
    write_json,
)

ALARM_FIRE = str(Path(__file__).with_name("alarm_fire.py"))
SYSTEMS = ("alarmtop", "aps-sqlite-wal", "aps-sqlite", "aps-memory", "huey", "huey-default")
PEERS = SYSTEMS[1:]
HEADLINE = {"aps-sqlite-wal": 15.0, "huey": 15.0}  # the bars of the fired/s ratio (burst)
SETUP_MARGIN_S = 1.0
CALIBRATION = 200  # jobs added first to time adding: t0 = now + 2x the expected time
HUEY_WORKERS = 4
MATCHED = {"journal_mode": "wal", "synchronous": "FULL"}


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


def figures(seen: Seen, t0_ms: float, add_s: float, cpu0: Any) -> dict[str, Any]:
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


def aps_store(system: str, path: Path) -> Any:
    """The job store of `system`, with its engine's settings checked."""
    from apscheduler.jobstores.memory import MemoryJobStore
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from sqlalchemy import create_engine, event

    if system == "aps-memory":
        return MemoryJobStore()
    engine = create_engine(f"sqlite:///{path}")
    if system == "aps-sqlite-wal":
        @event.listens_for(engine, "connect")
        def matched(dbapi_conn: Any, record: Any) -> None:
            dbapi_conn.execute("PRAGMA journal_mode=WAL")
            dbapi_conn.execute("PRAGMA synchronous=FULL")
    return SQLAlchemyJobStore(engine=engine)


def aps_settings(store: Any) -> dict[str, str]:
    if not hasattr(store, "engine"):
        return {"journal_mode": "memory (not durable)", "synchronous": "-"}
    with store.engine.connect() as conn:  # a connection of the store's own pool
        return sqlite_pragmas(conn.connection.driver_connection)


async def run_aps(opts: dict[str, Any]) -> dict[str, Any]:
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    global SEEN
    n = opts["alarms"]
    seen = SEEN = Seen(n)
    store = aps_store(opts["system"], Path(opts["dir"]) / "jobs.sqlite")
    sched = AsyncIOScheduler(jobstores={"default": store},
                             job_defaults={"misfire_grace_time": None, "coalesce": False})
    sched.start(paused=True)
    settings = aps_settings(store)
    expect_settings(opts["system"], settings)
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
    overran_s = max(0.0, time.time() - t0_ms / 1000)
    if overran_s and opts["shape"] != "burst":
        raise SystemExit(f"adding took {add_s:.1f} s, past t0: raise SETUP_MARGIN_S")
    # A machine that slowed down while the jobs were added (one commit each) can take
    # them past t0. The scheduler is paused, so nothing ran yet: a burst then starts
    # at the resume, and its rate counts from there (the overrun is reported).
    t_fire_ms = max(t0_ms, time.time() * 1000)
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
    result["fired_per_s"] = n / ((seen.last_ms - t_fire_ms) / 1000)
    sched.shutdown(wait=False)
    return {**result, "overran_s": overran_s, "settings": settings}


def huey_of(system: str, path: Path) -> Any:
    from huey import SqliteHuey

    if system == "huey":
        return SqliteHuey("bench", filename=str(path), fsync=True)
    return SqliteHuey("bench", filename=str(path))  # huey-default: as created


def run_huey(opts: dict[str, Any]) -> dict[str, Any]:
    n = opts["alarms"]
    seen = Seen(n)
    huey = huey_of(opts["system"], Path(opts["dir"]) / "huey.sqlite")

    @huey.task()
    def fire(due_ms: float) -> None:
        seen.fired(due_ms)

    settings = sqlite_pragmas(huey.storage.conn)  # this thread's connection, as a worker's
    expect_settings(opts["system"], settings)
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
    return {**result, "overran_s": 0.0, "settings": settings}


def huey_default_settings(base: str | None) -> dict[str, str]:
    """What `SqliteHuey()` gets on this machine, when nothing is said about fsync."""
    with work_area(base, "huey-default-") as root:
        return sqlite_pragmas(huey_of("huey-default", root / "huey.sqlite").storage.conn)


def expect_settings(system: str, settings: dict[str, str]) -> None:
    """A matched system that does not have the matched settings is not measured."""
    if system in ("aps-sqlite-wal", "huey") and settings != MATCHED:
        raise SystemExit(f"{system} should run with {MATCHED}, has {settings}")


def child(opts: dict[str, Any]) -> None:
    Path(opts["dir"]).mkdir(parents=True, exist_ok=True)
    if opts["system"].startswith("huey"):
        result = run_huey(opts)
    else:
        result = asyncio.run(run_aps(opts))
    emit_child(result)


def run_alarmtop(opts: dict[str, Any]) -> dict[str, Any]:
    """One run of bench/alarm_fire.py's child: N objects, one alarm each."""
    n = opts["alarms"]
    out = run_child(ALARM_FIRE, ["--child", json.dumps({
        "dir": opts["dir"], "shape": opts["shape"], "alarms": n, "objects": n,
        "spread_s": opts["spread_s"], "max_concurrent": 256, "max_resident": 1000})])
    return {"fired_per_s": out["fired_per_s"], "start_p50_ms": out["start_p50_ms"],
            "start_p99_ms": out["start_p99_ms"], "start_max_ms": out["start_max_ms"],
            "done_p50_ms": out["done_p50_ms"], "done_p99_ms": out["done_p99_ms"],
            "done_max_ms": out["done_max_ms"], "cpu_us": out["cpu_us"],
            "schedule_s": n / out["arm_per_s"], "peak_rss_mb": out["peak_rss_mb"],
            "overran_s": 0.0, "settings": out["settings"]}


UNITS = {"fired_per_s": "/s", "start_p50_ms": "ms", "start_p99_ms": "ms", "start_max_ms": "ms",
         "done_p50_ms": "ms", "done_p99_ms": "ms", "done_max_ms": "ms", "cpu_us": "us",
         "schedule_s": "s", "peak_rss_mb": "MiB", "overran_s": "s"}
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
    "overran_s": "set-up ran past t0 by (burst from resume)",
}


def config(args: Any, n: int, spread_s: float, systems: list[str]) -> dict[str, Any]:
    described = {
        "alarmtop": "embedded SQLite, WAL, synchronous=FULL; counted at durable completion; "
                    "N objects of one alarm each",
        "aps-sqlite-wal": f"APScheduler {version_of('apscheduler')} (SQLAlchemy "
                          f"{version_of('sqlalchemy')}), SQLAlchemyJobStore on SQLite, WAL, "
                          "synchronous=FULL (matched)",
        "aps-sqlite": "the same job store as it creates itself: rollback journal, "
                      "synchronous=FULL (APScheduler's default)",
        "aps-memory": "the same with MemoryJobStore (not durable)",
        "huey": f"huey {version_of('huey')} SqliteHuey(fsync=True): WAL, synchronous=FULL "
                f"(matched); {HUEY_WORKERS} worker threads, polling at most every 0.1 s",
        "huey-default": "SqliteHuey() as created: WAL, synchronous left at SQLite's build "
                        f"default, here {huey_default_settings(args.dir)}",
    }
    return {"machine": machine(),
            "workload": f"{n:,} one-shot timers, trivial bodies; burst (all due at t0) and "
                        f"spread (due evenly over {spread_s:g} s)",
            "body type": "async def (coroutine jobs) for APScheduler and alarmtop; huey "
                         "tasks are plain functions run by its worker threads",
            "systems": {s: described[s] for s in systems},
            "settings": "read back on each system's own connection in every run; a matched "
                        "system without WAL + FULL is refused"}


def print_ratios(results: dict[tuple[str, str], Table], shapes: list[str], n: int,
                 fsync: float) -> Ratios:
    ratios = Ratios(f"alarmtop against each peer ({n:,} timers)")
    for shape in shapes:
        at = results.get(("alarmtop", shape))
        if at is None:
            continue
        for peer in PEERS:
            other = results.get((peer, shape))
            if other is None:
                continue
            if shape == "burst":
                ratios.add(f"burst fired/s, alarmtop / {peer}",
                           paired_ratio(at.rows[LABELS["fired_per_s"]],
                                        other.rows[LABELS["fired_per_s"]]),
                           bar=HEADLINE.get(peer), headline=peer in HEADLINE)
                # CPU per timer only in a burst: spread runs mostly wait.
                ratios.add(f"burst CPU per timer, {peer} / alarmtop",
                           paired_ratio(at.rows[LABELS["cpu_us"]], other.rows[LABELS["cpu_us"]],
                                        higher_is_better=False))
            else:
                ratios.add(f"spread start lateness p99, {peer} / alarmtop",
                           paired_ratio(at.rows[LABELS["start_p99_ms"]],
                                        other.rows[LABELS["start_p99_ms"]],
                                        higher_is_better=False))
    ratios.print(fsync)
    return ratios


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--alarms", type=int, default=None, help="N (full 10,000)")
    parser.add_argument("--spread-s", type=float, default=None, help="full 10 s")
    parser.add_argument("--systems", default=",".join(s for s in SYSTEMS if s != "huey-default"))
    parser.add_argument("--shape", default="burst,spread")
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    n = args.alarms or (1_000 if args.quick else 10_000)
    spread_s = args.spread_s or (3.0 if args.quick else 10.0)
    shapes, systems = args.shape.split(","), args.systems.split(",")
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise SystemExit(f"unknown systems {sorted(unknown)}: choose from {SYSTEMS}")
    fsync0 = fsync_rate(args.dir)
    cfg = config(args, n, spread_s, systems)
    cfg["fsync rate at the start (SQLite commits/s, WAL, FULL)"] = round(fsync0)
    print_config("scenario 1 against its peers", cfg)
    results: dict[tuple[str, str], Table] = {}
    seen_settings: dict[str, dict[str, str]] = {}
    for shape in shapes:
        for system in systems:
            results[(system, shape)] = Table(
                f"{system}, {shape}: {n:,} timers"
                + (f" due over {spread_s:g} s" if shape == "spread" else " due at once"))

        def one(system: str, round_: int, shape: str = shape) -> None:
            with work_area(args.dir, "peers-alarms-") as root:
                opts = {"dir": str(root / "data"), "system": system, "shape": shape,
                        "alarms": n, "spread_s": spread_s}
                result = (run_alarmtop(opts) if system == "alarmtop"
                          else run_child(__file__, ["--child", json.dumps(opts)]))
            seen_settings[system] = result.pop("settings")
            for key, value in result.items():
                results[(system, shape)].add(LABELS[key], value, UNITS[key])
            print(f"  round {round_ + 1}, {system}, {shape}: {result['fired_per_s']:,.0f}/s, "
                  f"start p99 {result['start_p99_ms'] or 0:.1f} ms", file=sys.stderr)

        rounds(args.repeats, systems, one)
    for table in results.values():
        table.print()
    fsync1 = fsync_rate(args.dir)
    print("\nsettings read back on each system's own connection: " + "; ".join(
        f"{s}: {v['journal_mode']}, synchronous={v['synchronous']}"
        for s, v in seen_settings.items()))
    print(f"fsync rate before / after: {fsync0:,.0f} / {fsync1:,.0f} commits/s")
    ratios = print_ratios(results, shapes, n, (fsync0 + fsync1) / 2)
    if args.json:
        print(json.dumps({t.title: t.as_dict() for t in results.values()}))
    write_json(args.json_out, {
        "script": "peers_alarms", "config": cfg,
        "settings": seen_settings, "fsync": [fsync0, fsync1], "ratios": ratios.rows,
        "tables": {t.title: t.as_dict() for t in results.values()}})


if __name__ == "__main__":
    main()
