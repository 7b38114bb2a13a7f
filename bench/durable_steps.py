"""Scenario 3: durable steps, alarmtop against DBOS on PostgreSQL and on SQLite.

The same workflow everywhere: 10 steps in a row, each a trivial function (x -> x + 1)
whose result is checkpointed durably before the next step starts. The workflow
itself is an `async def` on both sides; the step body is a plain `def` or an
`async def`, the same on both sides of every ratio (a `-async` suffix on the
system's name):

- alarmtop: `@durable_execution` with `ctx.step(fn, x, name=...)`, on `SystemClock`,
  embedded SQLite (WAL, synchronous=FULL, read back in every run) or `-pg`:
  `PostgresBackend`. A step's `StepSucceeded` is awaited until the runtime
  database's group commit has fsync'd it. An execution counts as done when
  `execution.succeeded` is emitted, after its end was committed.
- DBOS (`dbos` on PyPI) with `@DBOS.workflow()` on an async function. An
  `async def` step is `@DBOS.step()` and awaited; a `def` step goes through
  `DBOS.run_step_async(None, fn, x)`, which runs it (and its checkpoint) in a
  thread: how DBOS has a sync step called from an async workflow without blocking
  the event loop. Each step's output is committed before it returns. Backends:
  `dbos-pg` (PostgreSQL, what DBOS recommends for production: the headline),
  `dbos-wal` (SQLite in WAL with synchronous=FULL: alarmtop's settings) and
  `dbos` (SQLite as DBOS creates it: rollback journal, synchronous=FULL).

PostgreSQL is a throwaway cluster from the machine's binaries (fsync on,
synchronous_commit on), or the server of `--postgres DSN`; each run gets a fresh
database, and its single-client commit rate is printed beside the ratios, as is
SQLite's fsync rate.

Modes: `seq` (one execution at a time, started and awaited: latency-bound) and
`c50` (50 in flight); `c500` on request. Reported: steps/s, the in-handler time per
step (from before the first step to after the tenth, / 10), process and main-thread
CPU per step (steadier than wall-clock figures on a shared machine), peak RSS.
Repeats are interleaved (round i runs every system once); each ratio is the median
of the per-round ratios, with their min-max.

Cost growth (scenario 6): `--sizes 100,1000,10000` runs alarmtop with that many
executions, `--size-concurrency` (500) in flight. `--profile`: pyinstrument on one
alarmtop run, from the first timed execution to the last.

    .venv/bin/python bench/durable_steps.py [--quick] [--repeats 3] [--modes seq,c50]
        [--systems alarmtop,alarmtop-async,dbos-pg,dbos-pg-async,dbos-wal,dbos-wal-async,dbos]
        [--postgres DSN] [--sizes 100,1000,10000] [--profile out.html]

Full (the default systems, seq and c50): about 9 min on 2 shared cores at a load
of 1-2, most of it DBOS (--quick: about 3 min).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import statistics
import sys
import time
from array import array
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pg_server
from common import (
    Profiling,
    Ratios,
    Table,
    alarmtop_sqlite_settings,
    base_parser,
    emit_child,
    fsync_rate,
    machine,
    paired_ratio,
    peak_rss_mb,
    print_config,
    rounds,
    run_child,
    version_of,
    work_area,
    write_json,
)

STEPS = 10
SYSTEMS = ("alarmtop", "alarmtop-async", "dbos-pg", "dbos-pg-async", "dbos-wal",
           "dbos-wal-async", "dbos", "dbos-async", "alarmtop-pg", "alarmtop-pg-async")
DEFAULT = ("alarmtop", "alarmtop-async", "dbos-pg", "dbos-pg-async", "dbos-wal",
           "dbos-wal-async", "dbos")
# The bars (alarmtop / peer, steps/s) by (peer backend, mode); the PostgreSQL one is the
# headline: it is DBOS as its documentation has it in production.
BARS = {("dbos-wal", "seq"): 5.0, ("dbos-wal", "c50"): 25.0, ("dbos-pg", "c50"): 15.0}
WARMUP = 3  # executions run before timing starts, sequentially
spans = array("d")  # in-handler seconds for the 10 steps, one per execution


def parse(system: str) -> tuple[str, str]:
    """(backend part, body type) of a system's name: "dbos-wal-async" -> ("dbos-wal",
    "async")."""
    if system.endswith("-async"):
        return system.removesuffix("-async"), "async"
    return system, "def"


def mode_size(mode: str, quick: bool) -> tuple[int, int]:
    """(executions, in flight) of a mode: `seq`, or `cN` for N in flight.

    A concurrent mode runs more executions than N (N started at once, then a new
    one as each ends: 500 or 2N, --quick 2N), so that ramp-up and the tail weigh
    less.
    """
    if mode == "seq":
        return (30 if quick else 200), 1
    conc = int(mode.removeprefix("c"))
    return (2 * conc if quick else max(2 * conc, 500)), conc


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

    def __init__(self, data: Path, body: str, dsn: str | None = None) -> None:
        self.data, self.body, self.dsn = data, body, dsn
        self.settings: dict[str, Any] = {}

    async def setup(self) -> None:
        from alarmtop.core import Event, Runtime, SystemClock
        from alarmtop.core.durable import DurableContext, durable_execution

        def inc(x: int) -> int:
            return x + 1

        async def inc_async(x: int) -> int:
            return x + 1

        fn: Callable[[int], Any] = inc_async if self.body == "async" else inc

        @durable_execution(name="ten-steps")
        async def ten_steps(x: int, ctx: DurableContext) -> int:
            t = time.perf_counter()
            for i in range(STEPS):
                x = await ctx.step(fn, x, name=f"s{i}")
            spans.append(time.perf_counter() - t)
            return x

        backend = None
        if self.dsn:
            from alarmtop.core import PostgresBackend
            backend = PostgresBackend(self.dsn, node_id="bench")
        self.rt = rt = Runtime(self.data, clock=SystemClock(), backend=backend)
        rt.register_execution(ten_steps)
        await rt.start()
        if not self.dsn:
            self.settings = await alarmtop_sqlite_settings(rt)
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
    """DBOS on PostgreSQL (`url`) or a SQLite system database, the same workflow."""

    def __init__(self, data: Path, journal: str, body: str, url: str | None = None) -> None:
        self.data, self.journal, self.body, self.url = data, journal, body, url
        self.settings: dict[str, Any] = {}

    async def setup(self) -> None:
        import peer_dbos
        from dbos import DBOS

        @DBOS.step()
        async def inc_async(x: int) -> int:
            return x + 1

        def inc(x: int) -> int:
            return x + 1

        body = self.body

        @DBOS.workflow()
        async def ten_steps(x: int) -> int:
            t = time.perf_counter()
            for _ in range(STEPS):
                if body == "async":
                    x = await inc_async(x)
                else:
                    x = await DBOS.run_step_async(None, inc, x)
            spans.append(time.perf_counter() - t)
            return x

        self.dbos, self.workflow = DBOS, ten_steps
        if self.url:
            peer_dbos.launch_url(self.url)
        else:
            peer_dbos.launch(self.data / "dbos.sqlite", self.journal)
        self.settings = peer_dbos.engine_settings()
        expect = ({"fsync": "on", "synchronous_commit": "on"} if self.url else
                  {"journal_mode": "wal" if self.journal == "wal" else "delete",
                   "synchronous": "FULL"})
        if self.settings != expect:
            raise SystemExit(f"DBOS's system database should have {expect}, has "
                             f"{self.settings}")

    async def one(self, i: int) -> None:
        handle = await self.dbos.start_workflow_async(self.workflow, 0)
        if await handle.get_result() != STEPS:
            raise SystemExit("DBOS: the workflow returned a wrong result")

    async def close(self) -> None:
        import peer_dbos
        peer_dbos.destroy()


# -- one measured run, in a child process ----------------------------------------------


async def one_run(opts: dict[str, Any], prof: Profiling) -> dict[str, Any]:
    data = Path(opts["dir"])
    backend, body = parse(opts["system"])
    n, conc = opts["n"], opts["conc"]
    dsn = opts.get("dsn")
    sut: Alarmtop | Dbos
    if backend.startswith("alarmtop"):
        sut = Alarmtop(data, body, dsn if backend == "alarmtop-pg" else None)
    else:
        sut = Dbos(data, "wal" if backend == "dbos-wal" else "default", body,
                   dsn.replace("postgresql://", "postgresql+psycopg://", 1)
                   if backend == "dbos-pg" and dsn else None)
    await sut.setup()
    for i in range(opts.get("warmup", 0)):  # not counted: imports, first-use caches
        await sut.one(-1 - i)
    spans[:] = array("d")
    prof.start()
    cpu0, thread0 = resource.getrusage(resource.RUSAGE_SELF), time.thread_time()
    t0 = time.perf_counter()
    await run_many(n, conc, sut.one)
    elapsed = time.perf_counter() - t0
    cpu1, thread1 = resource.getrusage(resource.RUSAGE_SELF), time.thread_time()
    prof.stop()
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
        "settings": sut.settings,
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
    emit_child(asyncio.run(one_run(opts, Profiling(profile))))


class Runner:
    """Runs one system in one mode in a fresh process, on a fresh data dir (and a
    fresh PostgreSQL database for a `-pg` system)."""

    def __init__(self, args: Any, server: str | None) -> None:
        self.args, self.server = args, server
        self.settings: dict[str, Any] = {}

    def run(self, system: str, n: int, conc: int, table: Table,
            profile: str | None = None) -> None:
        with work_area(self.args.dir, "durable-steps-") as root:
            opts: dict[str, Any] = {"dir": str(root / "data"), "system": system, "n": n,
                                    "conc": conc, "profile": profile, "warmup": WARMUP}
            if system.split("-")[1:2] == ["pg"]:
                if self.server is None:
                    raise SystemExit(f"{system} needs PostgreSQL")
                opts["dsn"] = pg_server.fresh_database(self.server)
            try:
                result = run_child(__file__, ["--child", json.dumps(opts)])
            finally:
                if "dsn" in opts:
                    pg_server.drop_database(self.server, opts["dsn"])
        self.settings[system] = result.pop("settings")
        for key, value in result.items():
            table.add(LABELS[key], value, UNITS[key])
        print(f"  {table.title}: {result['steps_per_s']:,.0f} steps/s, "
              f"{result['cpu_us']:.0f} us CPU/step", file=sys.stderr)


def ratios_of(results: dict[tuple[str, str], Table], modes: list[str]) -> Ratios:
    ratios = Ratios("durable steps, alarmtop / DBOS, the same step body on both sides")
    pairs = [("alarmtop", "dbos-pg"), ("alarmtop", "dbos-wal"), ("alarmtop", "dbos"),
             ("alarmtop-pg", "dbos-pg")]
    for mode in modes:
        for ours, peer in pairs:
            for body in ("", "-async"):
                at, other = results.get((ours + body, mode)), results.get((peer + body, mode))
                if at is None or other is None:
                    continue
                kind = "async def" if body else "def"
                name = f"{mode}, {kind} steps: {ours} / {peer}"
                ratios.add(f"{name} steps/s", paired_ratio(
                    at.rows[LABELS["steps_per_s"]], other.rows[LABELS["steps_per_s"]]),
                    bar=BARS.get((peer, mode)) if ours == "alarmtop" else None,
                    headline=peer == "dbos-pg" and ours == "alarmtop")
                ratios.add(f"{name} CPU/step", paired_ratio(
                    at.rows[LABELS["cpu_us"]], other.rows[LABELS["cpu_us"]],
                    higher_is_better=False))
    return ratios


def config(args: Any, systems: list[str], modes: list[str], pg: dict[str, Any] | None
           ) -> dict[str, Any]:
    described = {
        "alarmtop": "embedded SQLite, WAL, synchronous=FULL (read back in each run)",
        "alarmtop-pg": "PostgresBackend on the PostgreSQL below",
        "dbos-pg": f"DBOS {version_of('dbos')} on PostgreSQL (its production backend)",
        "dbos-wal": "DBOS on SQLite, WAL, synchronous=FULL (alarmtop's settings)",
        "dbos": "DBOS on SQLite as it creates it: rollback journal, synchronous=FULL",
    }
    return {
        "machine": machine(),
        "workload": f"{STEPS} steps x -> x + 1 per execution; modes "
                    + ", ".join(f"{m}: {mode_size(m, args.quick)[0]} executions, "
                                f"{mode_size(m, args.quick)[1]} in flight" for m in modes),
        "body type": "workflow async def on both sides; step body def or async def "
                     "(-async), the same on both sides of a ratio",
        "systems": {s: f"{described[parse(s)[0]]}; {parse(s)[1]} step body" for s in systems},
        "PostgreSQL": pg or "not used",
        "SQLite fsync rate (commits/s, WAL, FULL)": round(fsync_rate(args.dir)),
    }


@contextlib.contextmanager
def postgres(args: Any, systems: list[str]) -> Iterator[tuple[str | None, dict[str, Any] | None]]:
    """The PostgreSQL server to use (if a system needs one) and its settings and
    single-client commit rate."""
    if not any("-pg" in s for s in systems) and not args.postgres:
        yield None, None
        return
    with pg_server.server(args.postgres or None) as dsn:
        db = pg_server.fresh_database(dsn, "limit")
        try:
            probe = pg_server.commit_limit(db, seconds=1.0)
        finally:
            pg_server.drop_database(dsn, db)
        yield dsn, {"server": "given by --postgres" if args.postgres else
                    "a throwaway cluster from the machine's binaries",
                    "fsync": probe["fsync"], "synchronous_commit": probe["synchronous_commit"],
                    "single-client commits/s": round(probe["commits_per_s"])}


def compare(args: Any) -> list[Table]:
    systems = (args.systems or ",".join(DEFAULT)).split(",")
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise SystemExit(f"unknown systems {sorted(unknown)}: choose from {SYSTEMS}")
    modes = args.modes.split(",")
    started = time.monotonic()
    with postgres(args, systems) as (server, pg):
        cfg = config(args, systems, modes, pg)
        print_config("durable steps against DBOS", cfg)
        runner = Runner(args, server)
        results: dict[tuple[str, str], Table] = {}
        for mode in modes:
            n, conc = mode_size(mode, args.quick)
            for system in systems:
                results[(system, mode)] = Table(
                    f"{system}, {mode}: {n:,} executions of {STEPS} steps, {conc} in flight")
            rounds(args.repeats, systems, lambda system, _round, mode=mode, n=n, conc=conc:
                   runner.run(system, n, conc, results[(system, mode)]))
        fsync_after = fsync_rate(args.dir)
    for table in results.values():
        table.print()
    print("\nsettings read back on each system's own connection: " + "; ".join(
        f"{s}: {v or 'PostgreSQL (above)'}" for s, v in runner.settings.items()))
    ratios = ratios_of(results, modes)
    ratios.print((cfg["SQLite fsync rate (commits/s, WAL, FULL)"] + fsync_after) / 2)
    if pg:
        print(f"   PostgreSQL single-client commits/s: {pg['single-client commits/s']:,}")
    print(f"\nthis run took {(time.monotonic() - started) / 60:.1f} min")
    write_json(args.json_out, {
        "script": "durable_steps", "config": cfg, "settings": runner.settings,
        "fsync_after": fsync_after, "ratios": ratios.rows,
        "tables": {t.title: t.as_dict() for t in results.values()}})
    return list(results.values())


def sizes_run(args: Any) -> list[Table]:
    sizes = [int(s) for s in args.sizes.split(",")]
    print_config("durable steps, cost growth (alarmtop)", config(args, ["alarmtop"], [], None))
    runner = Runner(args, None)
    tables = []
    for n in sizes:
        conc = min(n, args.size_concurrency)
        table = Table(f"alarmtop, {n:,} executions of {STEPS} steps, {conc} in flight")
        for _ in range(max(3, args.repeats)):
            runner.run("alarmtop", n, conc, table)
        table.print()
        tables.append(table)
    print("\n== cost growth (alarmtop), against the smallest size")
    print(f"{'executions':>11}{'size x':>8}{'time x':>8}{'CPU/step':>10}{'peak RSS':>10}")
    base_t, base_n = tables[0].median(LABELS["elapsed_s"]) or 1.0, sizes[0]
    for n, t in zip(sizes, tables):
        print(f"{n:>11,}{n / base_n:>8.0f}{(t.median(LABELS['elapsed_s']) or 0) / base_t:>8.1f}"
              f"{t.median(LABELS['cpu_us']) or 0:>8.0f}us"
              f"{t.median(LABELS['peak_rss_mb']) or 0:>7.1f}MiB")
    return tables


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--systems", default=None,
                        help=f"default: {','.join(DEFAULT)}; also: alarmtop-pg, "
                             "alarmtop-pg-async, dbos-async")
    parser.add_argument("--modes", default="seq,c50")
    parser.add_argument("--sizes", default=None,
                        help="cost growth: alarmtop with these numbers of executions")
    parser.add_argument("--size-concurrency", type=int, default=500)
    parser.add_argument("--profile", default=None,
                        help="profile one alarmtop run of the first --modes (pyinstrument)")
    parser.add_argument("--postgres", nargs="?", const="", default=None, metavar="DSN",
                        help="PostgreSQL for the -pg systems: the server of DSN (a "
                        "maintenance database); without DSN, or by default, a throwaway "
                        "cluster from the machine's binaries, fsync on")
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    if args.sizes:
        tables = sizes_run(args)
    elif args.profile:
        mode = args.modes.split(",")[0]
        n, conc = mode_size(mode, args.quick)
        print_config("durable steps, profiled (one alarmtop run)",
                     config(args, ["alarmtop"], [mode], None))
        table = Table(f"alarmtop, {mode}, profiled")
        Runner(args, None).run("alarmtop", n, conc, table, args.profile)
        table.print()
        tables = [table]
    else:
        tables = compare(args)
    if args.json:
        print(json.dumps({t.title: t.as_dict() for t in tables}))


if __name__ == "__main__":
    main()
