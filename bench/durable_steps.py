"""Scenario 3: durable steps, alarmtop against DBOS on SQLite.

The same workflow in both: 10 steps in a row, each a trivial function (x -> x + 1)
whose result is checkpointed durably before the next step starts.

- alarmtop: `@durable_execution` with `ctx.step(fn, x, name=...)`, on `SystemClock`.
  An at-least-once step's start (`StepStarted`) is queued without waiting; its
  `StepSucceeded` is awaited until the runtime database's group commit has fsync'd
  it (WAL, synchronous=FULL; core/storage/sqlite_index.py). An execution counts as
  done when `execution.succeeded` is emitted, after its end was committed.
- DBOS (3.x, `dbos` on PyPI) with a SQLite system database: `@DBOS.workflow()` and
  `@DBOS.step()` on async functions; each step's output is committed (fsync'd,
  synchronous=FULL) before it returns. Two journal modes: SQLite's default rollback
  journal (what DBOS creates) and WAL (set on the file before DBOS opens it).

Modes: `seq` (one execution at a time, started and awaited: latency-bound),
`c50` and `c500` (50 or 500 executions started at once). Reported: executions/s,
steps/s (10 x executions/s), the in-handler time per step (from before the first
step to after the tenth, / 10: the step call plus its durable checkpoint), and
process CPU per step, which is steadier than wall-clock figures on a shared
machine. Ratios are alarmtop / DBOS-WAL and alarmtop / DBOS-default, from the
same run. Each run is a fresh process on a fresh data dir.

Cost growth (scenario 6): `--sizes 100,1000,10000` runs alarmtop with that many
executions, `--size-concurrency` (500) in flight, and reports time, CPU and peak
RSS per size and their growth against the size.

    .venv/bin/python bench/durable_steps.py [--quick] [--repeats 3]
        [--systems alarmtop,dbos,dbos-wal] [--modes seq,c50,c500]
        [--sizes 100,1000,10000] [--profile out.html]
"""

from __future__ import annotations

import asyncio
import json
import resource
import shutil
import statistics
import sys
import time
from array import array
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pg_server
from common import Table, base_parser, emit_child, peak_rss_mb, run_child, run_child_body, work_dir

STEPS = 10
SYSTEMS = ("alarmtop", "dbos", "dbos-wal")
WARMUP = 3  # executions run before timing starts, sequentially
spans = array("d")  # in-handler seconds for the 10 steps, one per execution


def mode_size(mode: str, quick: bool) -> tuple[int, int]:
    """(executions, in flight) of a mode: `seq`, or `cN` for N in flight.

    A concurrent mode runs more executions than N (N started at once, then a new
    one as each ends: 500 or 2N, --quick 200 or N), so that ramp-up and the tail
    weigh less.
    """
    if mode == "seq":
        return (30 if quick else 200), 1
    conc = int(mode.removeprefix("c"))
    return (max(conc, 200) if quick else max(2 * conc, 500)), conc


async def run_many(n: int, conc: int, one: Callable[[int], Awaitable[None]]) -> None:
    if conc <= 1:
        for i in range(n):
            await one(i)
        return
    sem = asyncio.Semaphore(conc)

    async def guarded(i: int) -> None:
        async with sem:
            await one(i)
    await asyncio.gather(*(guarded(i) for i in range(n)))


# -- alarmtop --------------------------------------------------------------------------


class Alarmtop:
    """alarmtop's runtime with the 10-step execution; `one(i)` runs execution i."""

    def __init__(self, data: Path, dsn: str | None = None) -> None:
        self.data, self.dsn = data, dsn

    async def setup(self) -> None:
        from alarmtop.core import Event, Runtime, SystemClock
        from alarmtop.core.durable import DurableContext, durable_execution

        def inc(x: int) -> int:
            return x + 1

        @durable_execution(name="ten-steps")
        async def ten_steps(x: int, ctx: DurableContext) -> int:
            t = time.perf_counter()
            for i in range(STEPS):
                x = await ctx.step(inc, x, name=f"s{i}")
            spans.append(time.perf_counter() - t)
            return x

        backend = None
        if self.dsn:
            from alarmtop.core import PostgresBackend
            backend = PostgresBackend(self.dsn, node_id="bench")
        self.rt = rt = Runtime(self.data, clock=SystemClock(), backend=backend)
        rt.register_execution(ten_steps)
        await rt.start()
        self.loop = asyncio.get_running_loop()
        self.waiting: dict[str, asyncio.Future[str]] = {}

        def on_event(event: Event) -> None:
            if event.type in ("execution.succeeded", "execution.failed"):
                fut = self.waiting.pop(event.data["execution_id"], None)
                if fut is not None:
                    fut.set_result(event.type)

        rt.events.listen(on_event)

    async def one(self, i: int) -> None:
        eid = f"e{i}"
        fut = self.waiting[eid] = self.loop.create_future()
        await self.rt.executions.start("ten-steps", 0, execution_id=eid)
        if await fut != "execution.succeeded":
            raise SystemExit(f"execution {eid} failed: {await self.rt.executions.describe(eid)}")

    async def close(self) -> None:
        result = (await self.rt.executions.describe("e0"))["result"]
        await self.rt.stop()
        if result != STEPS:
            raise SystemExit(f"alarmtop: the workflow returned {result!r}, not {STEPS}")


# -- DBOS ------------------------------------------------------------------------------


class Dbos:
    """DBOS on a SQLite system database with the same 10-step workflow."""

    def __init__(self, data: Path, journal: str, url: str | None = None) -> None:
        self.data, self.journal, self.url = data, journal, url

    async def setup(self) -> None:
        import peer_dbos
        from dbos import DBOS

        @DBOS.step()
        async def inc(x: int) -> int:
            return x + 1

        @DBOS.workflow()
        async def ten_steps(x: int) -> int:
            t = time.perf_counter()
            for _ in range(STEPS):
                x = await inc(x)
            spans.append(time.perf_counter() - t)
            return x

        self.dbos, self.workflow = DBOS, ten_steps
        if self.url:
            peer_dbos.launch_url(self.url)
            return
        db = self.data / "dbos.sqlite"
        peer_dbos.launch(db, self.journal)
        settings = peer_dbos.sqlite_settings(db)
        if settings["synchronous"] != 2:
            raise SystemExit(f"DBOS's SQLite file is not synchronous=FULL: {settings}")

    async def one(self, i: int) -> None:
        handle = await self.dbos.start_workflow_async(self.workflow, 0)
        if await handle.get_result() != STEPS:
            raise SystemExit("DBOS: the workflow returned a wrong result")

    async def close(self) -> None:
        import peer_dbos
        peer_dbos.destroy()


# -- one measured run, in a child process ----------------------------------------------


async def one_run(opts: dict[str, Any]) -> dict[str, float]:
    data = Path(opts["dir"])
    system, n, conc = opts["system"], opts["n"], opts["conc"]
    dsn = opts.get("dsn")
    sut: Alarmtop | Dbos
    if system.startswith("alarmtop"):
        sut = Alarmtop(data, dsn if system == "alarmtop-pg" else None)
    else:
        sut = Dbos(data, "wal" if system == "dbos-wal" else "default",
                   dsn.replace("postgresql://", "postgresql+psycopg://", 1)
                   if system == "dbos-pg" and dsn else None)
    await sut.setup()
    for i in range(opts.get("warmup", 0)):  # not counted: imports, first-use caches
        await sut.one(-1 - i)
    spans[:] = array("d")
    cpu0, thread0 = resource.getrusage(resource.RUSAGE_SELF), time.thread_time()
    t0 = time.perf_counter()
    await run_many(n, conc, sut.one)
    elapsed = time.perf_counter() - t0
    cpu1, thread1 = resource.getrusage(resource.RUSAGE_SELF), time.thread_time()
    await sut.close()
    cpu_s = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    steps = n * STEPS
    return {
        "exec_per_s": n / elapsed,
        "steps_per_s": steps / elapsed,
        "elapsed_s": elapsed,
        "step_ms": statistics.median(spans) / STEPS * 1000,
        "cpu_us": cpu_s / steps * 1e6,
        "loop_cpu_us": (thread1 - thread0) / steps * 1e6,
        "peak_rss_mb": peak_rss_mb(),
    }


UNITS = {"exec_per_s": "/s", "steps_per_s": "/s", "elapsed_s": "s", "step_ms": "ms",
         "cpu_us": "us", "loop_cpu_us": "us", "peak_rss_mb": "MiB"}
LABELS = {
    "exec_per_s": "executions/s",
    "steps_per_s": "steps/s",
    "elapsed_s": "elapsed",
    "step_ms": "in-handler time per step (median exec)",
    "cpu_us": "process CPU per step (incl. start+end)",
    "loop_cpu_us": "main-thread CPU per step",
    "peak_rss_mb": "peak RSS",
}


def child(opts: dict[str, Any]) -> None:
    profile = opts.pop("profile", None)
    emit_child(run_child_body(one_run(opts), profile))


def measure(args: Any, system: str, n: int, conc: int, title: str,
            profile: str | None = None) -> Table:
    table = Table(title)
    for _ in range(1 if profile else max(3, args.repeats)):
        root = work_dir(args.dir, "durable-steps-")
        opts = {"dir": str(root / "data"), "system": system, "n": n, "conc": conc,
                "profile": profile, "warmup": WARMUP}
        server = getattr(args, "server_dsn", None)
        if system.endswith("-pg"):
            opts["dsn"] = pg_server.fresh_database(server)
        try:
            result = run_child(__file__, ["--child", json.dumps(opts)])
        finally:
            shutil.rmtree(root, ignore_errors=True)
            if "dsn" in opts:
                pg_server.drop_database(server, opts["dsn"])
        for key, value in result.items():
            table.add(LABELS[key], value, UNITS[key])
        print(f"  {title}: {result['steps_per_s']:,.0f} steps/s, "
              f"{result['cpu_us']:.0f} us CPU/step", file=sys.stderr)
    table.print()
    return table


def median_of(table: Table, key: str) -> float:
    return statistics.median(table.rows[LABELS[key]])


def print_ratios(results: dict[tuple[str, str], Table], modes: list[str],
                 limit: float | None = None) -> None:
    print("\n== ratios, alarmtop / peer (medians of this run)")
    print(f"{'mode':<8}{'peer':<11}{'steps/s':>10}{'CPU/step':>11}{'time/step':>11}  bar")
    for mode in modes:
        for ours, peer in (("alarmtop", "dbos-wal"), ("alarmtop", "dbos"),
                           ("alarmtop-pg", "dbos-pg")):
            at, other = results.get((ours, mode)), results.get((peer, mode))
            if at is None or other is None:
                continue
            thr = median_of(at, "steps_per_s") / median_of(other, "steps_per_s")
            cpu = median_of(other, "cpu_us") / median_of(at, "cpu_us")
            lat = median_of(other, "step_ms") / median_of(at, "step_ms")
            bar = ""
            if peer != "dbos":
                need = {"dbos-wal": 3.0 if mode == "seq" else 20.0,
                        "dbos-pg": 2.0 if mode == "seq" else 10.0}[peer]
                bar = f">= {need:g}x: {'met' if thr >= need else 'NOT met'}"
            print(f"{mode:<8}{peer:<11}{thr:>9.1f}x{cpu:>10.1f}x{lat:>10.1f}x  {bar}")
    print("(CPU/step and time/step: peer / alarmtop, so > 1 means alarmtop is cheaper)")
    seq = results.get(("alarmtop-pg", "seq"))
    if limit and seq is not None:
        share = median_of(seq, "steps_per_s") / limit
        print(f"alarmtop-pg seq: {median_of(seq, 'steps_per_s'):,.0f} steps/s = {share:.2f} of "
              f"the server's single-client commit limit ({limit:,.0f}/s); bar >= 0.5: "
              f"{'met' if share >= 0.5 else 'NOT met'}")


def sizes_run(args: Any) -> list[Table]:
    sizes = [int(s) for s in args.sizes.split(",")]
    tables = [measure(args, "alarmtop", n, min(n, args.size_concurrency),
                      f"alarmtop, {n:,} executions of {STEPS} steps, "
                      f"{min(n, args.size_concurrency)} in flight") for n in sizes]
    print("\n== cost growth (alarmtop), against the smallest size")
    print(f"{'executions':>11}{'size x':>8}{'time x':>8}{'CPU/step':>10}{'peak RSS':>10}")
    base_t, base_n = median_of(tables[0], "elapsed_s"), sizes[0]
    for n, t in zip(sizes, tables):
        print(f"{n:>11,}{n / base_n:>8.0f}{median_of(t, 'elapsed_s') / base_t:>8.1f}"
              f"{median_of(t, 'cpu_us'):>8.0f}us{median_of(t, 'peak_rss_mb'):>7.1f}MiB")
    return tables


def compare(args: Any, systems_arg: str, dsn: str | None) -> list[Table]:
    systems = systems_arg.split(",")
    modes = args.modes.split(",")
    limit = None
    if dsn is not None:
        db = pg_server.fresh_database(dsn, "limit")
        try:
            probe = pg_server.commit_limit(db)
        finally:
            pg_server.drop_database(dsn, db)
        limit = float(probe["commits_per_s"])
        print(f"PostgreSQL single-client commits/s (one-row inserts, fsync={probe['fsync']}, "
              f"synchronous_commit={probe['synchronous_commit']}): {limit:,.0f}")
    results: dict[tuple[str, str], Table] = {}
    for mode in modes:
        n, conc = mode_size(mode, args.quick)
        for system in systems:
            results[(system, mode)] = measure(
                args, system, n, conc,
                f"{system}, {mode}: {n:,} executions of {STEPS} steps, {conc} in flight")
    print_ratios(results, modes, limit)
    return list(results.values())


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--systems", default=None,
                        help="default: all three; --quick: alarmtop,dbos-wal (DBOS with its "
                             "default journal needs about a minute per c500 run)")
    parser.add_argument("--modes", default="seq,c50,c500")
    parser.add_argument("--sizes", default=None,
                        help="cost growth: alarmtop with these numbers of executions")
    parser.add_argument("--size-concurrency", type=int, default=500)
    parser.add_argument("--profile", default=None,
                        help="profile one alarmtop run of the first --modes (pyinstrument)")
    parser.add_argument("--postgres", nargs="?", const="", default=None, metavar="DSN",
                        help="also on PostgreSQL: alarmtop-pg and dbos-pg (DBOS's own "
                        "PostgreSQL backend) on the server of DSN (a maintenance database; "
                        "default: a throwaway cluster, fsync on), with its commit limit")
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    if args.sizes:
        tables = sizes_run(args)
    elif args.profile:
        mode = args.modes.split(",")[0]
        n, conc = mode_size(mode, args.quick)
        tables = [measure(args, "alarmtop", n, conc, f"alarmtop, {mode}, profiled",
                          args.profile)]
    elif args.postgres is not None:
        with pg_server.server(args.postgres or None) as dsn:
            args.server_dsn = dsn
            tables = compare(args, args.systems or "alarmtop-pg,dbos-pg", dsn)
    else:
        tables = compare(args, args.systems or ("alarmtop,dbos-wal" if args.quick
                                                else ",".join(SYSTEMS)), None)
    if args.json:
        print(json.dumps({t.title: t.as_dict() for t in tables}))


if __name__ == "__main__":
    main()
