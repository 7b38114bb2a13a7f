"""Scenario 3b: durable waits, alarmtop's `ctx.wait` against DBOS's `DBOS.sleep_async`.

N executions (1,000; `--quick` 300) are started at once; each waits a whole number
of seconds drawn at random between 1 and 10 (`--quick` 1-3; seeded, the same draws
for every system), then returns. Wake lateness is measured twice:

- against the intended time: when the handler's code after the wait runs, minus
  (when it called the wait + the duration);
- against the system's own recorded wake time: alarmtop's is the time of the
  execution's alarm (`scheduled_ms` of its `alarm.fired` event), which the wait
  checkpointed; DBOS's is the wake-up time its sleep checkpoint holds, which it
  computes when that checkpoint is written (in a worker thread, after a read),
  later than the call when its database is busy.

Also for the wakes due after every execution had started (no start competes with
them; DBOS takes seconds to start 1,000 workflows, alarmtop a fraction of one).

- alarmtop: `await ctx.wait(Duration(n))` on `SystemClock`, embedded SQLite (WAL,
  synchronous=FULL). The wait is checkpointed, the invocation ends (nothing stays in
  memory), and the execution's alarm wakes it: the alarm fires, the wait's
  completion and the new invocation are committed, and the handler replays to the
  line after the wait. Its start time is kept from the first invocation.
- DBOS: `await DBOS.sleep_async(n)` in an async workflow: the wake-up time is
  checkpointed, then the workflow sleeps in memory. `dbos-pg` (PostgreSQL, its
  production backend: the headline), `dbos-wal` (SQLite, WAL, synchronous=FULL) and
  `dbos` (SQLite as DBOS creates it: rollback journal).

Repeats are interleaved (round i runs every system once). Percentiles are over all
wakes of a run (1,000: p99 has 10 above it); a subset too small for its p99 says
so.

    .venv/bin/python bench/durable_waits.py [--quick] [--repeats 3] [--executions N]
        [--max-wait-s S] [--systems alarmtop,dbos-pg,dbos-wal,dbos] [--postgres DSN]

Full: about 4 min (--quick: about 2 min), most of it the waits themselves.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from array import array
from pathlib import Path
from typing import Any

import pg_server
from common import (
    Ratios,
    Table,
    alarmtop_sqlite_settings,
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
    version_of,
    work_area,
    write_json,
)
from durable_steps import postgres

SYSTEMS = ("alarmtop", "dbos-pg", "dbos-wal", "dbos")
BAR_P99_MS = 10.0
SEED = 7
started_ms = [0.0]  # when the last execution had started
late = array("d")
due = array("d")  # when each wake was due (ms), in the order of `late`
own_late = array("d")  # wake lateness against the wake time the system recorded


def durations(n: int, max_wait_s: int) -> list[int]:
    rng = random.Random(SEED)
    return [rng.randint(1, max_wait_s) for _ in range(n)]


async def alarmtop_run(data: Path, waits: list[int]) -> tuple[float, dict[str, Any]]:
    from alarmtop.core import Event, Runtime, SystemClock
    from alarmtop.core.durable import DurableContext, Duration, durable_execution

    began: dict[str, float] = {}  # execution -> ms when it called the wait
    alarm_at: dict[str, int] = {}  # execution -> scheduled_ms of its latest alarm

    @durable_execution(name="waiter")
    async def waiter(seconds: int, ctx: DurableContext) -> int:
        t = began.setdefault(ctx.execution_id, time.time() * 1000)  # first invocation's
        await ctx.wait(Duration(seconds))
        woke = time.time() * 1000
        late.append(woke - t - seconds * 1000)
        due.append(t + seconds * 1000)
        own_late.append(woke - alarm_at[ctx.execution_id])  # the alarm that woke it
        return seconds

    rt = Runtime(data, clock=SystemClock())
    rt.register_execution(waiter)
    await rt.start()
    settings = await alarmtop_sqlite_settings(rt)
    loop = asyncio.get_running_loop()
    waiting: dict[str, asyncio.Future[str]] = {}

    def on_event(event: Event) -> None:
        if event.type == "alarm.fired":
            kind, _, name = event.data["object"].partition("/")
            if kind == "Execution":
                alarm_at[name] = event.data["scheduled_ms"]
        elif event.type in ("execution.succeeded", "execution.failed"):
            fut = waiting.pop(event.data["execution_id"], None)
            if fut is not None:
                fut.set_result(event.type)

    rt.events.listen(on_event)
    for i in range(len(waits)):
        waiting[f"w{i}"] = loop.create_future()
    futures = list(waiting.values())
    t0 = time.perf_counter()
    await asyncio.gather(*(rt.executions.start("waiter", s, execution_id=f"w{i}")
                           for i, s in enumerate(waits)))
    start_s = time.perf_counter() - t0
    started_ms[0] = time.time() * 1000
    outcomes = await asyncio.wait_for(asyncio.gather(*futures), timeout=600)
    await rt.stop()
    if set(outcomes) != {"execution.succeeded"}:
        raise SystemExit(f"alarmtop: some executions failed: {set(outcomes)}")
    return start_s, settings


async def dbos_run(data: Path, waits: list[int], backend: str,
                   url: str | None) -> tuple[float, dict[str, Any]]:
    import peer_dbos
    from dbos import DBOS

    woke_at: dict[str, float] = {}  # DBOS workflow id -> ms when its sleep returned

    @DBOS.workflow()
    async def waiter(seconds: int) -> int:
        t = time.time() * 1000
        await DBOS.sleep_async(seconds)
        woke = time.time() * 1000
        late.append(woke - t - seconds * 1000)
        due.append(t + seconds * 1000)
        woke_at[DBOS.workflow_id] = woke
        return seconds

    if backend == "dbos-pg":
        assert url is not None
        peer_dbos.launch_url(url.replace("postgresql://", "postgresql+psycopg://", 1))
    else:
        peer_dbos.launch(data / "dbos.sqlite", "wal" if backend == "dbos-wal" else "default")
    settings = peer_dbos.engine_settings()
    t0 = time.perf_counter()
    handles = await asyncio.gather(*(DBOS.start_workflow_async(waiter, s) for s in waits))
    start_s = time.perf_counter() - t0
    started_ms[0] = time.time() * 1000
    results = await asyncio.wait_for(asyncio.gather(*(h.get_result() for h in handles)),
                                     timeout=600)
    # DBOS's own wake-up time: computed when its sleep checkpoint is written.
    for wf, wake_s in peer_dbos.recorded_sleeps():
        own_late.append(woke_at[wf] - wake_s * 1000)
    peer_dbos.destroy()
    if results != waits:
        raise SystemExit("DBOS: wrong results")
    return start_s, settings


async def one_run(opts: dict[str, Any]) -> dict[str, Any]:
    data = Path(opts["dir"])
    waits = durations(opts["n"], opts["max_wait_s"])
    if opts["system"] == "alarmtop":
        start_s, settings = await alarmtop_run(data, waits)
    else:
        start_s, settings = await dbos_run(data, waits, opts["system"], opts.get("dsn"))
    if len(late) != len(waits) or len(own_late) != len(waits):
        raise SystemExit(f"{len(late)} wakes ({len(own_late)} with a recorded time) seen "
                         f"for {len(waits)} executions")
    # Wakes due once every execution has started: no start competes with them.
    after = [x for x, d in zip(late, due) if d > started_ms[0] + 100]
    return {"p50_ms": percentile(late, 50), "p99_ms": percentile(late, 99),
            "max_ms": max(late), "own_p50_ms": percentile(own_late, 50),
            "own_p99_ms": percentile(own_late, 99), "own_max_ms": max(own_late),
            "quiet_p50_ms": percentile(after, 50), "quiet_p99_ms": percentile(after, 99),
            "quiet_n": float(len(after)), "wakes": float(len(late)),
            "start_s": start_s, "peak_rss_mb": peak_rss_mb(), "settings": settings}


UNITS = {"p50_ms": "ms", "p99_ms": "ms", "max_ms": "ms", "own_p50_ms": "ms",
         "own_p99_ms": "ms", "own_max_ms": "ms", "quiet_p50_ms": "ms", "quiet_p99_ms": "ms",
         "quiet_n": "", "wakes": "", "start_s": "s", "peak_rss_mb": "MiB"}
LABELS = {"p50_ms": "wake lateness p50 (vs intended)",
          "p99_ms": "wake lateness p99 (vs intended)",
          "max_ms": "wake lateness max (vs intended)",
          "own_p50_ms": "p50 vs its own recorded wake time",
          "own_p99_ms": "p99 vs its own recorded wake time",
          "own_max_ms": "max vs its own recorded wake time",
          "quiet_p50_ms": "p50 of wakes due after all started",
          "quiet_p99_ms": "p99 of wakes due after all started",
          "quiet_n": "wakes due after all started",
          "wakes": "wakes measured per run",
          "start_s": "time to start all (set-up)", "peak_rss_mb": "peak RSS"}


def config(args: Any, n: int, max_wait: int, systems: list[str],
           pg: dict[str, Any] | None) -> dict[str, Any]:
    described = {"alarmtop": "embedded SQLite, WAL, synchronous=FULL; the execution leaves "
                             "memory while it waits",
                 "dbos-pg": f"DBOS {version_of('dbos')} on PostgreSQL (its production backend)",
                 "dbos-wal": "DBOS on SQLite, WAL, synchronous=FULL",
                 "dbos": "DBOS on SQLite as it creates it: rollback journal, synchronous=FULL"}
    return {"machine": machine(),
            "workload": f"{n:,} executions started at once, each waiting 1-{max_wait} s "
                        f"(seed {SEED}); async def workflows on both sides",
            "systems": {s: described[s] for s in systems},
            "PostgreSQL": pg or "not used",
            "SQLite fsync rate (commits/s, WAL, FULL)": round(fsync_rate(args.dir))}


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--executions", type=int, default=None, help="N (full 1,000)")
    parser.add_argument("--max-wait-s", type=int, default=None, help="full 10")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--postgres", nargs="?", const="", default=None, metavar="DSN",
                        help="PostgreSQL for the -pg systems: the server of DSN (a "
                        "maintenance database); without DSN, or by default, a throwaway "
                        "cluster from the machine's binaries, fsync on")
    args = parser.parse_args()
    if args.child:
        emit_child(asyncio.run(one_run(json.loads(args.child))))
        return
    n = args.executions or (300 if args.quick else 1_000)
    max_wait = args.max_wait_s or (3 if args.quick else 10)
    systems = args.systems.split(",")
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise SystemExit(f"unknown systems {sorted(unknown)}: choose from {SYSTEMS}")
    tables = {s: Table(f"{s}: {n:,} executions waiting 1-{max_wait} s") for s in systems}
    seen_settings: dict[str, Any] = {}
    with postgres(args, systems) as (server, pg):
        cfg = config(args, n, max_wait, systems, pg)
        print_config("durable waits against DBOS", cfg)

        def one(system: str, round_: int) -> None:
            with work_area(args.dir, "durable-waits-") as root:
                opts: dict[str, Any] = {"dir": str(root / "data"), "system": system, "n": n,
                                        "max_wait_s": max_wait}
                if system == "dbos-pg":
                    assert server is not None
                    opts["dsn"] = pg_server.fresh_database(server)
                try:
                    result = run_child(__file__, ["--child", json.dumps(opts)])
                finally:
                    if "dsn" in opts:
                        pg_server.drop_database(server, opts["dsn"])
            seen_settings[system] = result.pop("settings")
            for key, value in result.items():
                tables[system].add(LABELS[key], value, UNITS[key])
            print(f"  round {round_ + 1}, {system}: p99 {result['p99_ms'] or 0:.1f} ms, "
                  f"vs its own time {result['own_p99_ms'] or 0:.1f} ms", file=sys.stderr)

        rounds(args.repeats, systems, one)
        fsync_after = fsync_rate(args.dir)
    for table in tables.values():
        table.print()
    print("\nsettings read back on each system's own connection: " + "; ".join(
        f"{s}: {v}" for s, v in seen_settings.items()))
    ratios = Ratios("durable waits, peer / alarmtop wake lateness")
    at = tables.get("alarmtop")
    if at is not None:
        p99 = at.median(LABELS["p99_ms"])
        for peer in systems[1:] if systems[0] == "alarmtop" else [s for s in systems
                                                                   if s != "alarmtop"]:
            for key, what in (("p99_ms", "vs intended"), ("own_p99_ms", "vs own recorded")):
                ratios.add(f"{peer} / alarmtop, p99 {what}", paired_ratio(
                    at.rows[LABELS[key]], tables[peer].rows[LABELS[key]],
                    higher_is_better=False), headline=peer == "dbos-pg")
        ratios.print((cfg["SQLite fsync rate (commits/s, WAL, FULL)"] + fsync_after) / 2)
        if p99 is not None:
            print(f"\n== bar (this machine): alarmtop wake lateness p99 < {BAR_P99_MS:g} ms: "
                  f"{p99:.1f} ms, {'met' if p99 < BAR_P99_MS else 'NOT met'}")
    if args.json:
        print(json.dumps({t.title: t.as_dict() for t in tables.values()}))
    write_json(args.json_out, {
        "script": "durable_waits", "config": cfg, "settings": seen_settings,
        "ratios": ratios.rows if at is not None else [],
        "bar": {"name": "alarmtop wake p99 (ms)", "value": at.median(LABELS["p99_ms"])
                if at is not None else None, "below": BAR_P99_MS},
        "tables": {t.title: t.as_dict() for t in tables.values()}})


if __name__ == "__main__":
    main()
