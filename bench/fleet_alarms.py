"""Alarm firing on PostgreSQL with 1 and 2 nodes, and the failover time.

Each node is its own process (`Runtime` on `PostgresBackend`, `SystemClock`,
trivial handlers) on one PostgreSQL server (a throwaway cluster with fsync on,
unless `--postgres DSN` names one). A setup process arms N objects' alarms (one
each) through their stubs and stops; then the nodes start, settle on their share
of the 64 shards, and fire.

- **burst**: every alarm due at one t0, a few seconds after the nodes start:
  fired/s = N / (last durable completion - t0), counted as the SQLite figures are:
  an alarm is done when `alarm.succeeded` is emitted, after its outcome was
  committed; lateness at handler start and at durable completion; process CPU
  per alarm of the nodes and of PostgreSQL (its server processes, from /proc).
- **failover** (2 nodes): alarms due evenly over 20 s; node n2 is SIGKILLed 5 s
  in; the failover time is from the kill to the first handler start, on n1, of an
  object whose shard n2 held: n2's leases run out `lease_s` (here 3 s) after its
  last renewal (every `lease_s / 3`), then n1's next lease round claims them.

This machine has 2 cores, shared by the nodes and PostgreSQL: the scaling from 1
to 2 nodes is reported as measured, not as what more machines would give.

Everything a run writes (the nodes' data dirs, their reports) goes under one work
folder, removed at the end however the run ends (an error, Ctrl-C, SIGTERM); the
node processes are stopped first.

    .venv/bin/python bench/fleet_alarms.py [--quick] [--repeats 3] [--postgres DSN]

Full: about 8 min (--quick: about 4 min), most of it the lead time before each burst.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pg_server
from common import Table, base_parser, machine, percentile, print_config, work_area

HERE = Path(__file__).resolve().parent
LEASE_S = 3.0
SHARDS = 64


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


# -- the processes ------------------------------------------------------------------------


class Fires:
    """What a node saw: per alarm, its scheduled time, its handler's start and its
    durable completion (`alarm.succeeded`, emitted once the outcome is committed)."""

    def __init__(self) -> None:
        self.started: dict[str, int] = {}
        self.done: list[tuple[str, int, int, int]] = []  # name, scheduled, start, done

    def on_start(self, name: str) -> None:
        self.started[name] = wall_ms()

    def on_event(self, event: Any) -> None:
        if event.type != "alarm.succeeded":
            return
        name = event.data["object"].partition("/")[2]
        start = self.started.pop(name, None)
        if start is not None:
            self.done.append((name, int(event.data.get("scheduled_ms", 0)), start, wall_ms()))


def build(dsn: str, node_id: str, data: str, fires: Fires | None = None) -> Any:
    from alarmtop.core import AlarmInfo, DurableObject, PostgresBackend, Runtime, SystemClock

    class Beat(DurableObject):
        async def arm(self, at_ms: int) -> None:
            await self.ctx.storage.set_alarm(at_ms)

        async def alarm(self, info: AlarmInfo) -> None:
            if fires is not None:
                fires.on_start(self.ctx.id)

    backend = PostgresBackend(dsn, node_id=node_id, shards=SHARDS, lease_s=LEASE_S)
    rt = Runtime(data, clock=SystemClock(), backend=backend, max_concurrent_alarms=256,
                 hibernate_after=2.0)
    rt.register(Beat)
    if fires is not None:
        rt.events.listen(fires.on_event)
    return rt


async def setup(dsn: str, n: int, t0: int, spread_ms: int, data: str) -> None:
    rt = build(dsn, "setup", data)
    await rt.start()
    sem = asyncio.Semaphore(200)

    async def one(i: int) -> None:
        async with sem:
            at = t0 + (i * spread_ms // n if spread_ms else 0)
            await rt.get("Beat", f"b{i}").arm(at)
    await asyncio.gather(*(one(i) for i in range(n)))
    await rt.stop()


def _dump(path: str, data: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(data))


async def node(dsn: str, node_id: str, out: str, data: str) -> None:
    fires = Fires()
    rt = build(dsn, node_id, data, fires)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await rt.start()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    print("ready", flush=True)
    last = 0
    while not stop.is_set():  # written as it goes: a killed node leaves what it fired
        await asyncio.sleep(0.2)
        if len(fires.done) != last:
            await asyncio.to_thread(_dump, out, {"fires": list(fires.done)})
            last = len(fires.done)
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    await asyncio.to_thread(_dump, out, {"fires": fires.done, "cpu_s": (
        cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)})
    await rt.stop()


# -- the parent ---------------------------------------------------------------------------


def postgres_cpu_s(dsn: str) -> float:
    """CPU seconds of the PostgreSQL server's processes (postmaster and children)."""
    import asyncpg

    async def data_dir() -> str:
        conn = await asyncpg.connect(dsn)
        try:
            return str(await conn.fetchval("SHOW data_directory"))
        finally:
            await conn.close()
    pid = int(Path(asyncio.run(data_dir()), "postmaster.pid").read_text().split()[0])
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry.name) == pid or int(fields[1]) == pid:
            total += int(fields[11]) + int(fields[12])
    return total / tick


CHILDREN: list[subprocess.Popen[str]] = []  # every process this run started


def spawn(*args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, str(Path(__file__)), "--child", json.dumps(args)],
                            cwd=HERE, stdout=subprocess.PIPE, text=True)
    CHILDREN.append(proc)
    return proc


def end_children() -> None:
    """Stop every process this run started that still runs (SIGTERM, then SIGKILL),
    so that none writes into the work folder while it is removed."""
    for proc in CHILDREN:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in CHILDREN:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    CHILDREN.clear()


def run_setup(db: str, n: int, t0: int, spread_ms: int, work: Path) -> None:
    proc = spawn("setup", db, str(n), str(t0), str(spread_ms), str(work / "setup"))
    if proc.wait() != 0:
        raise SystemExit("the setup process failed")


def start_nodes(db: str, k: int, work: Path) -> list[tuple[subprocess.Popen[str], Path]]:
    nodes = []
    for i in range(1, k + 1):
        out = work / f"n{i}.json"
        proc = spawn("node", db, f"n{i}", str(out), str(work / f"n{i}"))
        nodes.append((proc, out))
    for proc, _ in nodes:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise SystemExit("a node did not start")
    return nodes


def remaining(db: str) -> int:
    import asyncpg

    async def count() -> int:
        conn = await asyncpg.connect(db)
        try:
            return int(await conn.fetchval("SELECT count(*) FROM alarmtop.alarms WHERE "
                                           "state <> 'dead'"))
        finally:
            await conn.close()
    return asyncio.run(count())


def stop_nodes(nodes: list[tuple[subprocess.Popen[str], Path]]) -> list[dict[str, Any]]:
    for proc, _ in nodes:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    results = []
    for proc, out in nodes:
        proc.wait(timeout=60)
        results.append(json.loads(out.read_text()) if out.exists() else {"fires": []})
    return results


def burst(server: str, k: int, n: int, work: Path, lead_ms: int) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="burst-", dir=work))  # this run's alone
    db = pg_server.fresh_database(server, "fire")
    try:
        # Far enough ahead for the setup, the nodes' start and their settling on their
        # shares (lease rounds every lease_s / 3).
        t0 = wall_ms() + lead_ms
        run_setup(db, n, t0, 0, work)
        nodes = start_nodes(db, k, work)
        if wall_ms() > t0 - 2 * LEASE_S * 1000:
            raise SystemExit(f"the setup took too long for a lead of {lead_ms} ms: --lead-s more")
        time.sleep(max(0.0, (t0 - wall_ms()) / 1000 - 1))
        cpu_pg0 = postgres_cpu_s(db)
        deadline = time.monotonic() + 300
        while remaining(db) and time.monotonic() < deadline:
            time.sleep(0.2)
        cpu_pg = postgres_cpu_s(db) - cpu_pg0
        results = stop_nodes(nodes)
    finally:
        end_children()  # before the database goes
        pg_server.drop_database(server, db)
    fires = [f for r in results for f in r["fires"]]
    late = [f[2] - t0 for f in fires]
    done_late = [f[3] - t0 for f in fires]
    cpu_nodes = sum(r.get("cpu_s", 0.0) for r in results)
    return {"fired_per_s": len(fires) / max(0.001, max(done_late) / 1000),
            "late_p50_ms": percentile(late, 50), "late_p99_ms": percentile(late, 99),
            "done_p50_ms": percentile(done_late, 50), "done_p99_ms": percentile(done_late, 99),
            "node_cpu_us": cpu_nodes / len(fires) * 1e6, "pg_cpu_us": cpu_pg / len(fires) * 1e6,
            "fired": float(len(fires))}


def failover(server: str, n: int, work: Path) -> dict[str, float]:
    import asyncpg

    from alarmtop.core.storage.postgres.backend import shard_of

    work = Path(tempfile.mkdtemp(prefix="failover-", dir=work))
    db = pg_server.fresh_database(server, "failover")
    try:
        start = wall_ms() + 15_000
        run_setup(db, n, start, 20_000, work)
        nodes = start_nodes(db, 2, work)
        time.sleep(max(0.0, (start - wall_ms()) / 1000) + 5)

        async def held() -> set[int]:
            conn = await asyncpg.connect(db)
            try:
                rows = await conn.fetch("SELECT shard FROM alarmtop.shards WHERE owner = 'n2'")
                return {int(r[0]) for r in rows}
            finally:
                await conn.close()
        moved = asyncio.run(held())
        killed_ms = wall_ms()
        nodes[1][0].send_signal(signal.SIGKILL)
        nodes[1][0].wait()
        time.sleep(LEASE_S + 5)
        results = stop_nodes(nodes[:1])
    finally:
        end_children()  # before the database goes
        pg_server.drop_database(server, db)
    after = [f[2] for f in results[0]["fires"] if f[2] > killed_ms
             and shard_of(("Beat", f[0]), SHARDS) in moved]
    if not after:
        raise SystemExit("no alarm of the dead node's shards fired on the other")
    return {"failover_ms": float(min(after) - killed_ms), "shards_moved": float(len(moved))}


LABELS = {"fired_per_s": ("fired/s (durable completion)", "/s"),
          "late_p50_ms": ("lateness at handler start p50", "ms"),
          "late_p99_ms": ("lateness at handler start p99", "ms"),
          "done_p50_ms": ("lateness at durable completion p50", "ms"),
          "done_p99_ms": ("lateness at durable completion p99", "ms"),
          "node_cpu_us": ("nodes' CPU per alarm", "us"),
          "pg_cpu_us": ("PostgreSQL CPU per alarm", "us"), "fired": ("fired", "")}


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--postgres", default=None, metavar="DSN")
    parser.add_argument("--alarms", type=int, default=None)
    parser.add_argument("--lead-s", type=float, default=None,
                        help="seconds from the setup's start to the burst (default 40, quick 20)")
    args = parser.parse_args()
    if args.child:
        what, *rest = json.loads(args.child)
        if what == "setup":
            asyncio.run(setup(rest[0], int(rest[1]), int(rest[2]), int(rest[3]), rest[4]))
        else:
            asyncio.run(node(*rest))
        return
    # Ctrl-C stops the run and removes its work folder even when the run was started
    # with SIGINT ignored (a background job of a shell, a test runner's worker): Python
    # keeps an inherited "ignore" and would then run on to the end.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    n = args.alarms or (2_000 if args.quick else 10_000)
    lead_ms = int((args.lead_s or (20.0 if args.quick else 40.0)) * 1000)
    with work_area(args.dir, "fleet-alarms-") as work:
        try:
            with pg_server.server(args.postgres) as server:
                measure(server, args, n, work, lead_ms)
        finally:
            end_children()


def measure(server: str, args: Any, n: int, work: Path, lead_ms: int) -> None:
    db = pg_server.fresh_database(server, "limit")
    try:
        probe = pg_server.commit_limit(db, seconds=1.0)
    finally:
        pg_server.drop_database(server, db)
    print_config("alarms on PostgreSQL, 1 and 2 nodes", {
        "machine": machine(),
        "PostgreSQL": {"server": "given by --postgres" if args.postgres else
                       "a throwaway cluster from the machine's binaries",
                       "fsync": probe["fsync"], "synchronous_commit": probe["synchronous_commit"],
                       "single-client commits/s": round(probe["commits_per_s"])},
        "nodes": f"one process each, PostgresBackend(shards={SHARDS}, lease_s={LEASE_S:g}), "
                 "max_concurrent_alarms=256; an alarm counts at durable completion"})
    medians: dict[int, float] = {}
    for k in (1, 2):
        table = Table(f"burst: {n:,} alarms, {k} node(s)")
        for _ in range(max(3, args.repeats)):
            result = burst(server, k, n, work, lead_ms)
            for key, value in result.items():
                table.add(LABELS[key][0], value, LABELS[key][1])
            print(f"  {k} node(s): {result['fired_per_s']:,.0f} fired/s", file=sys.stderr)
        table.print()
        medians[k] = table.median(LABELS["fired_per_s"][0]) or 0.0
    print(f"\n2 nodes / 1 node, fired/s: {medians[2] / medians[1]:.2f}x (2 cores, shared "
          "with PostgreSQL)")
    table = Table(f"failover: {n:,} alarms over 20 s, n2 killed 5 s in, lease_s={LEASE_S:g}")
    for _ in range(max(3, args.repeats)):
        result = failover(server, n, work)
        table.add("kill to first fire of a moved alarm", result["failover_ms"], "ms")
        table.add("shards moved", result["shards_moved"], "")
    table.print()


if __name__ == "__main__":
    main()
