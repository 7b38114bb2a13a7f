"""Scenario 3b: durable waits, alarmtop's `ctx.wait` against DBOS's `DBOS.sleep`.

N executions (1,000; `--quick` 300) are started at once; each waits a whole number
of seconds drawn at random between 1 and 10 (`--quick` 1-3; seeded, the same draws
for every system), then returns. Wake lateness = when the handler's code after the
wait runs, minus (when it called the wait + the duration). Reported for all wakes,
and for the wakes due after every execution had started (no start competes with
them; DBOS takes seconds to start 1,000 workflows, alarmtop a fraction of one).

- alarmtop: `await ctx.wait(Duration(n))` on `SystemClock`. The wait is checkpointed,
  the invocation ends (nothing stays in memory), and the execution's alarm wakes
  it: the alarm fires, the wait's completion and the new invocation are committed,
  and the handler replays to the line after the wait. Its start time is kept from
  the first invocation (the replay runs the code before the wait again).
- DBOS: `await DBOS.sleep_async(n)` in an async workflow: the wake-up time is
  checkpointed, then the workflow sleeps in memory. SQLite system database in its
  default journal and in WAL mode. DBOS computes its wake-up time when it writes
  that checkpoint (in a worker thread, after a read), which under load is later
  than the call: its lateness against that recorded time is shown as well.

Each run is a fresh process on a fresh data dir.

    .venv/bin/python bench/durable_waits.py [--quick] [--repeats 3] [--executions N]
        [--max-wait-s S] [--systems alarmtop,dbos,dbos-wal]
"""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
import statistics
import time
from array import array
from pathlib import Path
from typing import Any

from common import (
    Table,
    base_parser,
    emit_child,
    peak_rss_mb,
    percentile,
    run_in_fresh_dirs,
)

SYSTEMS = ("alarmtop", "dbos", "dbos-wal")
SEED = 7
started_ms = [0.0]  # when the last execution had started
began: dict[str, float] = {}  # execution -> ms when it called the wait
late = array("d")
due = array("d")  # when each wake was due (ms), in the order of `late`
dbos_woke: dict[str, float] = {}  # DBOS workflow id -> ms when its sleep returned
own_late = array("d")  # DBOS: wake lateness against the wake-up time it recorded


def durations(n: int, max_wait_s: int) -> list[int]:
    rng = random.Random(SEED)
    return [rng.randint(1, max_wait_s) for _ in range(n)]


async def alarmtop_run(data: Path, waits: list[int]) -> float:
    from alarmtop.core import Event, Runtime, SystemClock
    from alarmtop.core.durable import DurableContext, Duration, durable_execution

    @durable_execution(name="waiter")
    async def waiter(seconds: int, ctx: DurableContext) -> int:
        t = began.setdefault(ctx.execution_id, time.time() * 1000)  # first invocation's
        await ctx.wait(Duration(seconds))
        late.append(time.time() * 1000 - t - seconds * 1000)
        due.append(t + seconds * 1000)
        return seconds

    rt = Runtime(data, clock=SystemClock())
    rt.register_execution(waiter)
    await rt.start()
    loop = asyncio.get_running_loop()
    waiting: dict[str, asyncio.Future[str]] = {}

    def on_event(event: Event) -> None:
        if event.type in ("execution.succeeded", "execution.failed"):
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
    return start_s


async def dbos_run(data: Path, waits: list[int], journal: str) -> float:
    import peer_dbos
    from dbos import DBOS

    @DBOS.workflow()
    async def waiter(seconds: int) -> int:
        t = time.time() * 1000
        await DBOS.sleep_async(seconds)
        woke = time.time() * 1000
        late.append(woke - t - seconds * 1000)
        due.append(t + seconds * 1000)
        dbos_woke[DBOS.workflow_id] = woke
        return seconds

    peer_dbos.launch(data / "dbos.sqlite", journal)
    t0 = time.perf_counter()
    handles = await asyncio.gather(*(DBOS.start_workflow_async(waiter, s) for s in waits))
    start_s = time.perf_counter() - t0
    started_ms[0] = time.time() * 1000
    results = await asyncio.wait_for(asyncio.gather(*(h.get_result() for h in handles)),
                                     timeout=600)
    peer_dbos.destroy()
    if results != waits:
        raise SystemExit("DBOS: wrong results")
    # DBOS's own wake-up time: computed when its sleep checkpoint is written (in a
    # worker thread, after a read), so it starts later than the call under load.
    conn = sqlite3.connect(data / "dbos.sqlite")
    rows = conn.execute("SELECT workflow_uuid, output FROM operation_outputs "
                        "WHERE function_name = 'DBOS.sleep'").fetchall()
    conn.close()
    for wf, output in rows:
        own_late.append(dbos_woke[wf] - float(json.loads(output)) * 1000)
    return start_s


async def one_run(opts: dict[str, Any]) -> dict[str, float]:
    data = Path(opts["dir"])
    waits = durations(opts["n"], opts["max_wait_s"])
    if opts["system"] == "alarmtop":
        start_s = await alarmtop_run(data, waits)
    else:
        start_s = await dbos_run(data, waits, "wal" if opts["system"] == "dbos-wal" else "default")
    if len(late) != len(waits):
        raise SystemExit(f"{len(late)} wakes seen for {len(waits)} executions")
    # Wakes due once every execution has started: no start competes with them.
    after = [x for x, d in zip(late, due) if d > started_ms[0] + 100]
    return {"p50_ms": percentile(late, 50), "p99_ms": percentile(late, 99),
            "max_ms": max(late), "quiet_p50_ms": percentile(after, 50),
            "quiet_p99_ms": percentile(after, 99), "quiet_n": float(len(after)),
            "start_s": start_s, "peak_rss_mb": peak_rss_mb(),
            **({"own_p50_ms": percentile(own_late, 50), "own_p99_ms": percentile(own_late, 99)}
               if own_late else {})}


UNITS = {"p50_ms": "ms", "p99_ms": "ms", "max_ms": "ms", "quiet_p50_ms": "ms",
         "quiet_p99_ms": "ms", "quiet_n": "", "start_s": "s", "peak_rss_mb": "MiB",
         "own_p50_ms": "ms", "own_p99_ms": "ms"}
LABELS = {"p50_ms": "wake lateness p50", "p99_ms": "wake lateness p99",
          "max_ms": "wake lateness max",
          "quiet_p50_ms": "p50 of wakes due after all started",
          "quiet_p99_ms": "p99 of wakes due after all started",
          "quiet_n": "wakes due after all started",
          "start_s": "time to start all (set-up)", "peak_rss_mb": "peak RSS",
          "own_p50_ms": "DBOS: p50 vs its recorded wake time",
          "own_p99_ms": "DBOS: p99 vs its recorded wake time"}


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--executions", type=int, default=None, help="N (full 1,000)")
    parser.add_argument("--max-wait-s", type=int, default=None, help="full 10")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    args = parser.parse_args()
    if args.child:
        emit_child(asyncio.run(one_run(json.loads(args.child))))
        return
    n = args.executions or (300 if args.quick else 1_000)
    max_wait = args.max_wait_s or (3 if args.quick else 10)
    tables: dict[str, Table] = {}
    for system in args.systems.split(","):
        title = f"{system}: {n:,} executions waiting 1-{max_wait} s"
        table = Table(title)
        run_in_fresh_dirs(__file__, args, "durable-waits-",
                          {"system": system, "n": n, "max_wait_s": max_wait}, table, LABELS,
                          UNITS, lambda r, title=title: f"{title}: p99 {r['p99_ms']:.1f} ms")
        tables[system] = table
    if "alarmtop" in tables:
        at = tables["alarmtop"]
        p99 = statistics.median(at.rows[LABELS["p99_ms"]])
        print(f"\n== bar: alarmtop wake lateness p99 < 10 ms: {p99:.1f} ms, "
              f"{'met' if p99 < 10 else 'NOT met'}")
        for peer in ("dbos-wal", "dbos"):
            if peer in tables:
                ratios = [statistics.median(tables[peer].rows[LABELS[k]])
                          / max(statistics.median(at.rows[LABELS[k]]), 1e-3)
                          for k in ("p50_ms", "p99_ms")]
                print(f"   {peer} / alarmtop: p50 {ratios[0]:.1f}x, p99 {ratios[1]:.1f}x "
                      "(> 1: alarmtop wakes closer to time)")
    if args.json:
        print(json.dumps({t.title: t.as_dict() for t in tables.values()}))


if __name__ == "__main__":
    main()
