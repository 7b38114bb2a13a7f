"""Reads at a million alarms: a page at any depth, a console paging, /metrics scraped,
while 1,000 alarms/s fire (issues 12 and 13).

A data dir holds `--alarms` pending alarms (1,000,000: two hours and more ahead,
written straight into the alarm index in batches of 10,000), plus 1,000 retrying
ones at every retry count and 100 dead letters, so every rank of the urgency order
is there. A server process starts a runtime on it (a restart: the scheduler loads
its window), arms 1,000 objects that fire and re-arm on a fixed schedule (1,000
alarms/s, `fanout.py`'s `Ticker`), serves it with `OpsServer`, and after a warm-up
measures for `--seconds`:

- `pages`: the time of the `alarms` query handler in the server process (what the
  console waits for, less the socket), 20 times each: the first page (100 rows), a
  window of 400 rows at depths 1,000 / 50,000 / 500,000 / the last page, a state
  (pending) page at depth 500,000, a text filter that matches many (`Quiet/p0`) and
  one that matches ten (`p099999`), and the header's counts. The code under test
  pages by key (`after` the cursor of the row before, fetched once beforehand);
  code that has no cursors pages by `offset`, as its console did.
- `console`: a second process pages like an operator holding pagedown: a window of
  400 rows every 50 ms, 100 rows deeper each time (by cursor, or by offset where
  the server gives no cursors), plus the live refresh of the page shown every fourth
  step; against `none`, the same second process idle. Alarm lateness at handler
  start (scheduled time to handler start, a fixed schedule) in the server process.
- `metrics`: the second process GETs `/metrics` 10 times a second; against `none`.

`--baseline DIR` runs every scenario on another copy of the code too, in the same
run, interleaved with this one's (DIR is a source tree, e.g.
`git archive 1145161 | tar -x -C DIR`): its own data dir, filled by its own code.

    .venv/bin/python bench/reads_scale.py [--quick] [--alarms 1000000]
        [--scenarios pages,console,metrics] [--seconds 20] [--baseline DIR]
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from array import array
from pathlib import Path
from typing import Any

from common import Table, base_parser, loadavg, machine, percentile, print_config, work_area
from fanout import Plan, Ticker

from alarmtop.core import AlarmInfo, DurableObject, Runtime, SystemClock

OPERATOR = "operator-token-for-the-reads-bench"
VIEWER = "viewer-token-for-the-reads-bench"
BATCH = 10_000
HOUR_MS = 3_600_000
WARMUP_S = 3.0
GAP_S = 0.05  # between the pager's steps
SCRAPE_EVERY_S = 0.1
TIMED = 20  # repeats of each timed page


class Quiet(DurableObject):
    async def alarm(self, info: AlarmInfo) -> None:
        pass


def layout(tree: str) -> str:
    """A folder where `alarmtop.*` imports resolve to `tree` (as `make lint` links
    them), to put first on PYTHONPATH; "" for this checkout (the installed one)."""
    if not tree:
        return ""
    root = Path(tree).resolve()
    out = root.parent / f".{root.name}-path"
    (out / "alarmtop").mkdir(parents=True, exist_ok=True)
    for d in ("core", "server", "tui", "examples"):
        link = out / "alarmtop" / d
        if not link.exists():
            link.symlink_to(root / d)
    return str(out)


def run_with(code: str, args: list[str]) -> dict[str, Any]:
    env = dict(os.environ)
    if code:
        env["PYTHONPATH"] = layout(code) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                          env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"child run failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


# -- filling -------------------------------------------------------------------------------


async def fill(data: Path, pending: int) -> dict[str, float]:
    from alarmtop.core.model.alarm_policy import AlarmRecord, AlarmState

    rt = Runtime(data, clock=SystemClock())
    rt.register(Quiet)
    await rt.start()
    base = int(time.time() * 1000) + 2 * HOUR_MS
    db = rt.backend.database
    t0 = time.perf_counter()
    for lo in range(0, pending, BATCH):
        await db.write([AlarmRecord("Quiet", f"p{i:06d}", base + i, next_attempt_ms=base + i)
                           for i in range(lo, min(pending, lo + BATCH))])
    await db.write([AlarmRecord("Quiet", f"r{i:04d}", base, AlarmState.RETRYING,
                                   retry_count=1 + i % 6, next_attempt_ms=base + i,
                                   last_error="RuntimeError: flaky") for i in range(1000)])
    await db.write([AlarmRecord("Quiet", f"d{i:03d}", base, AlarmState.DEAD, retry_count=6,
                                   last_error="RuntimeError: gone") for i in range(100)])
    took = time.perf_counter() - t0
    await rt.stop()
    return {"fill_s": took}


# -- the server process --------------------------------------------------------------------


async def start(opts: dict[str, Any]) -> tuple[Runtime, Any, Plan]:
    from alarmtop.server.app import OpsServer
    from alarmtop.server.auth import Tokens

    plan = Plan(opts["objects"], opts["rate"])
    rt = Runtime(Path(opts["dir"]), clock=SystemClock(), env=plan)
    rt.register(Quiet)
    rt.register(Ticker)
    await rt.start()
    plan.t0_ms = time.time() * 1000 + 500
    await asyncio.gather(*(rt.get(Ticker, f"t{i:05d}").arm(plan.first_due(i))
                           for i in range(plan.objects)))
    server = OpsServer(rt, Tokens(OPERATOR, VIEWER), "127.0.0.1", 0, tick_s=0.25)
    await server.start()
    await asyncio.sleep(WARMUP_S)
    return rt, server, plan


async def timed(fn: Any, n: int = TIMED) -> tuple[float | None, float]:
    """p50 and max of `n` timings: 20 timings have no p99 (it would be their max)."""
    took = array("d")
    for _ in range(n):
        t = time.perf_counter()
        await fn()
        took.append((time.perf_counter() - t) * 1000)
        await asyncio.sleep(0.01)
    return percentile(took, 50), max(took)


async def pages_run(opts: dict[str, Any]) -> dict[str, float]:
    from alarmtop.server import listing_commands
    from alarmtop.server.protocol import Request

    rt, server, plan = await start(opts)
    ops = server.ops

    async def alarms(args: dict[str, Any]) -> Any:
        """The `alarms` query's handler, timed without the channel around it."""
        return await listing_commands.alarms(ops.services, Request(args, "bench", "viewer"))

    total = (await alarms({"limit": 1}))["total"]
    keyed = "cursors" in await alarms({"limit": 1})
    out: dict[str, float] = {"total": float(total), "keyed": float(keyed)}
    plan.recording = True

    async def at(depth: int, limit: int, **args: Any) -> Any:
        listed = (await alarms({"limit": 1, **args}))["total"]
        depth = min(depth, max(0, listed - limit))  # a --quick listing is shorter
        if not keyed or depth == 0:
            return lambda: alarms({"offset": depth, "limit": limit, **args})
        before = await alarms({"offset": depth - 1, "limit": 1, **args})  # not timed
        after = before["cursors"][0]
        return lambda: alarms({"after": after, "limit": limit, **args})

    cases: list[tuple[str, Any]] = [
        ("first page (100)", await at(0, 100)),
        ("window of 400 at 1,000", await at(1_000, 400)),
        ("window of 400 at 50,000", await at(50_000, 400)),
        ("window of 400 at 500,000", await at(500_000, 400)),
        ("last page (100)", await at(total - 100, 100)),
        ("pending only, 400 at 500,000", await at(500_000, 400, state="pending")),
        ("text matching many (Quiet/p0), first 100", await at(0, 100, filter="Quiet/p0")),
        ("text matching ten (p099999), first 100", await at(0, 100, filter="p099999")),
    ]
    for name, fn in cases:
        p50, top = await timed(fn, opts["timed"])
        out[f"{name} p50"], out[f"{name} max"] = p50, top
    out["header counts p50"], out["header counts max"] = await timed(ops.counts,
                                                                     opts["timed"])
    out["metrics render p50"], out["metrics render max"] = await timed(
        lambda: server.metrics.render(0), opts["timed"])
    plan.recording = False
    out["alarm lateness p99 meanwhile"] = percentile(plan.late, 99)
    await server.stop()
    await rt.stop()
    return out


async def load_run(opts: dict[str, Any]) -> dict[str, float]:
    rt, server, plan = await start(opts)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--reader", opts["mode"], server.url,
        f"http://127.0.0.1:{server.port}/metrics", str(opts["seconds"]),
        stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    if line.strip() != b"ready":
        raise SystemExit(f"reader failed to start: {line!r}")
    load0, t0 = loadavg(), time.perf_counter()
    plan.recording = True
    line = await proc.stdout.readline()
    plan.recording = False
    window = time.perf_counter() - t0
    if line.strip() != b"done":
        raise SystemExit(f"reader failed: {line!r}")
    reader = json.loads((await proc.stdout.read()).decode().strip().splitlines()[-1])
    await proc.wait()
    await server.stop()
    await rt.stop()
    return {"late_p50_ms": percentile(plan.late, 50), "late_p99_ms": percentile(plan.late, 99),
            "late_max_ms": max(plan.late, default=0.0), "fired_per_s": plan.fired / window,
            **reader, "load_before": load0, "load_after": loadavg()}


# -- the reading process (a console paging, or a scraper) ----------------------------------


async def reader(mode: str, url: str, metrics_url: str, seconds: float) -> None:
    from websockets.asyncio.client import connect

    took = array("d")
    stop = time.perf_counter() + 3600.0
    async with connect(url, max_size=None) as ws:
        await ws.send(json.dumps({"op": "hello", "token": VIEWER}))
        await ws.recv()
        await ws.recv()  # welcome, snapshot
        ids = iter(range(1, 10**9))
        answers: dict[int, asyncio.Future[Any]] = {}

        async def listen() -> None:
            async for raw in ws:
                frame = json.loads(raw)
                fut = answers.pop(frame.get("id", -1), None) if frame["type"] == "result" else None
                if fut is not None:
                    fut.set_result(frame)

        async def ask(**fields: Any) -> Any:
            cid = next(ids)
            fut = answers[cid] = asyncio.get_running_loop().create_future()
            await ws.send(json.dumps({"op": "alarms", "id": cid, **fields}))
            t = time.perf_counter()
            frame = await fut
            if time.perf_counter() < stop:
                took.append((time.perf_counter() - t) * 1000)
            return frame["data"]

        listener = asyncio.create_task(listen())
        print("ready", flush=True)
        stop = time.perf_counter() + seconds
        steps = 0
        if mode == "console":
            depth, after = 0, None
            while time.perf_counter() < stop:
                fields: dict[str, Any] = {"limit": 400}
                fields.update({"after": after} if after else {"offset": depth})
                data = await ask(**fields)
                cursors = data.get("cursors")
                if steps % 4 == 3:  # the live refresh of the page shown
                    await ask(limit=100, **({"after": after} if after else {"offset": depth}))
                depth += 100
                after = cursors[99] if cursors and len(cursors) > 100 else None
                if not data["rows"] or (cursors is not None and after is None):
                    depth, after = 0, None  # the end: back to the top
                steps += 1
                await asyncio.sleep(GAP_S)
        elif mode == "metrics":
            loop = asyncio.get_running_loop()

            def scrape() -> None:
                with urllib.request.urlopen(metrics_url, timeout=10) as resp:
                    resp.read()

            nxt = time.perf_counter()
            while time.perf_counter() < stop:
                t = time.perf_counter()
                await loop.run_in_executor(None, scrape)
                took.append((time.perf_counter() - t) * 1000)
                steps += 1
                nxt += SCRAPE_EVERY_S
                await asyncio.sleep(max(0.0, nxt - time.perf_counter()))
        else:
            await asyncio.sleep(seconds)
        print("done", flush=True)
        listener.cancel()
    print(json.dumps({"reads": float(steps), "read_p50_ms": percentile(took, 50),
                      "read_p99_ms": percentile(took, 99),
                      "read_max_ms": max(took, default=0.0)}), flush=True)


# -- the parent ----------------------------------------------------------------------------


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--reader":
        asyncio.run(reader(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--fill":
        print(json.dumps(asyncio.run(fill(Path(sys.argv[2]), int(sys.argv[3])))))
        return
    parser = base_parser(__doc__)
    parser.add_argument("--alarms", type=int, default=None, help="pending alarms (1,000,000)")
    parser.add_argument("--scenarios", default="pages,console,metrics")
    parser.add_argument("--seconds", type=float, default=None, help="window (quick 8, full 20)")
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--baseline", default=None, help="a source tree of older code to run too")
    args = parser.parse_args()
    if args.child:
        opts = json.loads(args.child)
        body = pages_run(opts) if opts["scenario"] == "pages" else load_run(opts)
        print(json.dumps(asyncio.run(body)))
        return
    alarms = args.alarms or (100_000 if args.quick else 1_000_000)
    seconds = args.seconds or (8.0 if args.quick else 20.0)
    codes = {"this code": ""} | ({"baseline": args.baseline} if args.baseline else {})
    print_config("reads at a million alarms", {
        "machine": machine(), "pending alarms": alarms, "alarms/s firing": args.rate,
        "runtime": "embedded SQLite (WAL, synchronous=FULL), OpsServer tick 0.25 s",
        "code": codes})
    with work_area(args.dir, "reads-scale-") as root:
        data = {}
        for label, code in codes.items():
            data[label] = root / label.replace(" ", "-")
            t = time.perf_counter()
            out = run_with(code, ["--fill", str(data[label]), str(alarms)])
            print(f"  {label}: {alarms:,} pending alarms written in {out['fill_s']:.1f} s "
                  f"({time.perf_counter() - t:.1f} s with start and stop)", file=sys.stderr)
        for scenario in args.scenarios.split(","):
            run_scenario(scenario, args, codes, data, alarms, seconds)
    print(f"load average at the end: {loadavg()}")


def run_scenario(scenario: str, args: Any, codes: dict[str, str], data: dict[str, Path],
                 alarms: int, seconds: float) -> None:
    modes = ["pages"] if scenario == "pages" else ["none", scenario]
    tables = {(label, mode): Table(f"{scenario}: {label}, {mode}, {alarms:,} pending, "
                                   f"{args.rate:,.0f} alarms/s firing")
              for label in codes for mode in modes}
    for _ in range(max(3, args.repeats)):
        for label, code in codes.items():
            for mode in modes:
                opts = {"dir": str(data[label]), "objects": args.objects, "rate": args.rate,
                        "seconds": seconds, "scenario": scenario, "mode": mode,
                        "timed": 5 if args.quick else TIMED}
                result = run_with(code, ["--child", json.dumps(opts)])
                for key, value in result.items():
                    tables[(label, mode)].add(key, value, "ms" if "ms" in key or
                                              key.endswith(("p50", "p99", "max")) else "")
                if mode != "pages":
                    print(f"  {label}, {mode}: lateness p99 {result['late_p99_ms'] or 0:.1f} ms"
                          f", reads {result['reads']:.0f}, max {result['read_max_ms']:.1f} ms",
                          file=sys.stderr)
    for table in tables.values():
        table.print()


if __name__ == "__main__":
    main()
