"""Load: 1,000 objects re-arming every second for a minute while 50 viewers watch.

One process runs the runtime (on the wall clock, `SystemClock`) and its ops
server, as `alarmtop serve` does; a second process holds the viewers (WebSocket
clients with the viewer token), as remote consoles would. Object i first fires at
t0 + i/N s and then re-arms itself on a fixed one-second grid, so alarms are due
evenly, N per second. Each handler also writes a counter to the object's own
database (`--no-write` to re-arm only).

Reported:

- alarm lateness (handler start minus scheduled time) p50/p99/max, fires, fires
  missed (slots skipped because the object was over a period late);
- for the viewers: deltas received, deltas dropped (gaps in the feed's sequence
  numbers: the server dropped them for a viewer that fell behind and sent a fresh
  snapshot instead), deltas late (arrival more than `--late-ms` after the server
  built them), delta delay and event staleness (arrival minus the time of the
  newest event in the delta) p50/p99/max;
- the server process's CPU and peak RSS.

    .venv/bin/python bench/load.py [--quick] [--objects 1000] [--viewers 50]
        [--duration 60] [--no-write] [--dir DIR] [--json]

`--quick` runs 10 s. Each of the (at least 3) repeats is a fresh runtime on a fresh
data dir, in this process, with a fresh viewers process; the figures are printed for
each run, then as medians with min-max. Lateness includes the machine's own noise;
see bench/physical_limits.py for what the disk and asyncio allow.

Full: about 4 min (3 x 60 s measured, plus warm-up); --quick: about 1.5 min.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import resource
import shutil
import sys
import time
from array import array
from typing import Any

from common import (
    Table,
    base_parser,
    machine,
    peak_rss_mb,
    percentile,
    print_config,
    work_dir,
    write_json,
)

from alarmtop.core import AlarmInfo, DurableObject, Runtime, SystemClock
from alarmtop.server.app import OpsServer
from alarmtop.server.auth import Tokens

PERIOD_MS = 1000
VIEWER_TOKEN = "load-viewer"
OPERATOR_TOKEN = "load-operator"
ARM_CONCURRENCY = 250
WARMUP_S = 10.0  # every object's database is created on its first fire: let that pass


class Env:
    """Shared by every object: the measurement and the stop switch."""

    def __init__(self, write: bool) -> None:
        self.write = write
        self.measuring = False
        self.stopping = False
        self.lateness = array("d")
        self.fires = 0
        self.missed = 0


class Beat(DurableObject):
    async def arm(self, at_ms: int) -> None:
        await self.ctx.storage.set_alarm(at_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        env: Env = self.env
        now = self.ctx.now_ms()
        late = now - info.scheduled_ms
        if env.measuring:
            env.lateness.append(late)
            env.fires += 1
        if env.write:
            await self.ctx.storage.put("beats", int(await self.ctx.storage.get("beats") or 0) + 1)
        if env.stopping:
            return
        # Stay on the grid; a slot already past is skipped (and counted).
        slots = max(1, math.ceil((late + 1) / PERIOD_MS))
        if env.measuring:
            env.missed += slots - 1
        await self.ctx.storage.set_alarm(info.scheduled_ms + slots * PERIOD_MS)


# -- the viewers (their own process) ---------------------------------------------------------

async def viewer(url: str, stats: dict[str, Any], stop: asyncio.Event, late_ms: float) -> None:
    from websockets.asyncio.client import connect

    async with connect(url, max_size=None, open_timeout=30) as ws:
        await ws.send(json.dumps({"op": "hello", "token": VIEWER_TOKEN}))
        last_seq: int | None = None
        while not stop.is_set():
            try:
                raw = await asyncio.wait_for(ws.recv(), 0.5)
            except TimeoutError:
                continue
            now = time.time() * 1000
            frame = json.loads(raw)
            kind = frame.get("type")
            if kind == "snapshot":
                stats["snapshots"] += 1
                last_seq = frame.get("seq", last_seq)
                continue
            if kind != "delta" or not stats["measuring"]:
                last_seq = frame.get("seq", last_seq)
                continue
            seq = frame["seq"]
            if last_seq is not None and seq > last_seq + 1:
                stats["dropped"] += seq - last_seq - 1
            last_seq = seq
            stats["deltas"] += 1
            delay = now - frame["at_ms"]
            stats["delay"].append(delay)
            stats["late"] += delay > late_ms
            if frame["events"]:
                stats["staleness"].append(now - max(e["at_ms"] for e in frame["events"]))


async def viewers_main(url: str, n: int, late_ms: float) -> None:
    """Connect `n` viewers, say READY, measure after GO, report after STOP (on stdin)."""
    stats: dict[str, Any] = {"deltas": 0, "dropped": 0, "late": 0, "snapshots": 0,
                             "delay": array("d"), "staleness": array("d"), "measuring": False}
    stop = asyncio.Event()
    tasks = [asyncio.ensure_future(viewer(url, stats, stop, late_ms)) for _ in range(n)]
    loop = asyncio.get_running_loop()
    await asyncio.sleep(1.0)
    print("READY", flush=True)
    for word in ("GO", "STOP"):
        line = await loop.run_in_executor(None, sys.stdin.readline)
        assert line.strip() == word, line
        stats["measuring"] = word == "GO"
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    failed = sum(1 for t in tasks if t.exception() is not None)
    delay, stale = stats["delay"], stats["staleness"]
    print(json.dumps({
        "viewers": n, "viewers_failed": failed, "deltas": stats["deltas"],
        "dropped": stats["dropped"], "late": stats["late"],
        "resync_snapshots": stats["snapshots"] - n,
        "delay_p50_ms": percentile(delay, 50), "delay_p99_ms": percentile(delay, 99),
        "delay_max_ms": max(delay, default=0.0),
        "stale_p50_ms": percentile(stale, 50), "stale_p99_ms": percentile(stale, 99),
        "stale_max_ms": max(stale, default=0.0),
    }), flush=True)


# -- the runtime and server ------------------------------------------------------------------

async def arm_all(rt: Runtime, n: int, t0_ms: int) -> None:
    names = [f"b{i:05d}" for i in range(n)]
    for lo in range(0, n, ARM_CONCURRENCY):
        await asyncio.gather(*(rt.get(Beat, name).arm(t0_ms + i * PERIOD_MS // n)
                               for i, name in enumerate(names[lo:lo + ARM_CONCURRENCY], lo)))


async def run(opts: Any) -> dict[str, Any]:
    data = work_dir(opts.dir, "alarmtop-load-")
    env = Env(write=not opts.no_write)
    rt = Runtime(data, clock=SystemClock(), env=env)
    rt.register(Beat)
    await rt.start()
    server = OpsServer(rt, Tokens(operator=OPERATOR_TOKEN, viewer=VIEWER_TOKEN), "127.0.0.1", 0)
    await server.start()
    child = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--viewers-child", server.url, str(opts.viewers),
        str(opts.late_ms), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    ready = await child.stdout.readline()
    if ready.strip() != b"READY":
        raise SystemExit(f"the viewers did not connect: {ready!r}")
    t0 = int(time.time() * 1000) + 2000
    await arm_all(rt, opts.objects, t0)
    await asyncio.sleep(max(0.0, t0 / 1000 - time.time()) + opts.warmup)  # the benchmark's pace
    env.measuring = True
    child.stdin.write(b"GO\n")
    await child.stdin.drain()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    started = time.monotonic()
    await asyncio.sleep(opts.duration)
    elapsed = time.monotonic() - started
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    env.measuring = False
    child.stdin.write(b"STOP\n")
    await child.stdin.drain()
    seen = json.loads(await child.stdout.readline())
    await child.wait()
    env.stopping = True
    feed = {"feed_deltas_built": server.feed.seq, "events_in": server.feed.events_in}
    await server.stop()
    await rt.stop()
    shutil.rmtree(data, ignore_errors=True)
    late = env.lateness
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    expected = opts.objects * elapsed * 1000 / PERIOD_MS
    return {
        "objects": opts.objects, "duration_s": round(elapsed, 1), "write": env.write,
        "late_ms": opts.late_ms, "warmup_s": opts.warmup,
        "fires": env.fires, "fires_per_s": env.fires / elapsed,
        "fires_expected": round(expected), "slots_missed": env.missed,
        "lateness_p50_ms": percentile(late, 50), "lateness_p99_ms": percentile(late, 99),
        "lateness_max_ms": max(late, default=0.0),
        "server_cpu_pct": 100 * cpu / elapsed, "server_peak_rss_mb": peak_rss_mb(),
        **feed, **{f"viewer_{k}": v for k, v in seen.items()},
    }


def report(result: dict[str, Any]) -> None:
    r = {k: (0.0 if v is None else v) for k, v in result.items()}  # n/a percentiles: 0
    print(f"\n== load: {r['objects']} objects re-arming every {PERIOD_MS} ms for "
          f"{r['duration_s']} s, {r['viewer_viewers']} viewers "
          f"({'handler writes a counter' if r['write'] else 're-arm only'})")
    print(f"alarms   fires {r['fires']:,} ({r['fires_per_s']:.0f}/s, expected "
          f"~{r['fires_expected']:,}), slots missed {r['slots_missed']}")
    print(f"         lateness p50 {r['lateness_p50_ms']:.1f} ms, "
          f"p99 {r['lateness_p99_ms']:.1f} ms, max {r['lateness_max_ms']:.1f} ms")
    print(f"viewers  deltas received {r['viewer_deltas']:,} "
          f"({r['viewer_deltas'] / max(1, r['viewer_viewers']):.0f} per viewer), "
          f"dropped {r['viewer_dropped']}, late (> {r['late_ms']:g} ms) {r['viewer_late']}, "
          f"resync snapshots {r['viewer_resync_snapshots']}, viewers failed "
          f"{r['viewer_viewers_failed']}")
    print(f"         delta delay p50 {r['viewer_delay_p50_ms']:.1f} ms, p99 "
          f"{r['viewer_delay_p99_ms']:.1f} ms, max {r['viewer_delay_max_ms']:.1f} ms")
    print(f"         newest event age p50 {r['viewer_stale_p50_ms']:.1f} ms, p99 "
          f"{r['viewer_stale_p99_ms']:.1f} ms, max {r['viewer_stale_max_ms']:.1f} ms")
    print(f"server   CPU {r['server_cpu_pct']:.0f}% of one core, peak RSS "
          f"{r['server_peak_rss_mb']:.0f} MiB, deltas built {r['feed_deltas_built']}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--viewers-child":
        asyncio.run(viewers_main(sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
        return
    parser = base_parser(__doc__)
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--viewers", type=int, default=50)
    parser.add_argument("--duration", type=float, default=None,
                        help="measured seconds (default 60, 10 with --quick)")
    parser.add_argument("--late-ms", type=float, default=1000.0,
                        help="a delta arriving this long after it was built counts as late")
    parser.add_argument("--no-write", action="store_true", help="handlers only re-arm")
    parser.add_argument("--warmup", type=float, default=WARMUP_S,
                        help="seconds of load before measuring")
    opts = parser.parse_args()
    opts.duration = opts.duration or (10.0 if opts.quick else 60.0)
    print_config("load: alarms and viewers", {
        "machine": machine(), "runtime": "embedded SQLite (WAL, synchronous=FULL), "
        "OpsServer", "objects": opts.objects, "viewers": opts.viewers,
        "measured": f"{opts.duration:g} s after {opts.warmup:g} s of warm-up"})
    table = Table(f"load: {opts.objects} objects every {PERIOD_MS} ms, {opts.viewers} viewers, "
                  f"{opts.duration:g} s")
    results = []
    for _ in range(max(3, opts.repeats)):
        result = asyncio.run(run(opts))
        report(result)
        results.append(result)
        for key, value in result.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                table.add(key, value)
    table.print()
    if opts.json:
        print(json.dumps(results))
    write_json(opts.json_out, {"script": "load", "runs": results,
                               "tables": {table.title: table.as_dict()}})


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
