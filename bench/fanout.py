"""Scenario 5, the server side: fan-out of the ops feed to 100 viewers while alarms fire.

A runtime on the wall clock (`SystemClock`) with 1,000 objects whose alarms re-arm
themselves one period later (object i is due at t0 + i ms, then every second), so
about 1,000 alarms/s fire, durable, for as long as the run lasts. An `OpsServer`
(delta tick 0.25 s, the default) serves it; a second process (this script with
`--clients-only URL TOKEN N SECONDS`) opens N viewer connections on `/ops`, says hello,
reads welcome and snapshot, and once every client has its snapshot reads deltas for
SECONDS. The clients run in their own process so that the server process's CPU is
its own.

Figures, over the measured window (from "every client has its snapshot" to the end):

- runtime events/s into the feed (`Feed.events_in`), alarms fired/s (handler starts)
  against the 1,000/s they are due at, and their lateness at handler start (a fixed
  schedule: an alarm that falls behind stays behind, so a rate not kept shows here);
- delta frames/s out of the server (`Feed.frames_out`, summed over clients) and as
  received by the clients, total and per client; bytes/s received;
- per-client delta latency = client receive wall time - the delta's `at_ms` (same
  machine, same wall clock): p50/p99/max over every delta of every client. `at_ms` is
  read while the delta is built, after its alarm rows and before its counts are
  queried, so the latency covers the rest of the build, encoding, the fan-out to every
  client's queue and socket, and the client process reading it; the build time is
  reported on its own. Also the age of the newest event in each delta at receipt;
- dropped deltas (gaps in `seq`), deltas whose `seq` is not after the last one seen
  (the first delta after a snapshot may carry the snapshot's own seq), resync
  snapshots (a snapshot after the first), per client, and the server's own count of
  deltas it dropped (`ClientChannel.dropped`);
- CPU of the server process and of its event-loop thread, and of the client process,
  as % of one core; the load average before and after.

    .venv/bin/python bench/fanout.py [--quick] [--repeats 3] [--clients 0,100]
        [--seconds 60] [--objects 1000] [--rate 1000]
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
    Table,
    base_parser,
    emit_child,
    loadavg,
    machine,
    peak_rss_mb,
    percentile,
    print_config,
    run_child,
    work_area,
    write_json,
)

from alarmtop.core import AlarmInfo, DurableObject, Runtime, SystemClock

OPERATOR = "operator-token-for-the-fanout-bench"
VIEWER = "viewer-token-for-the-fanout-bench"
TICK_S = 0.25
ARM_CONCURRENCY = 500
WARMUP_S = 2.0  # firing steadily before the clients connect
CONNECT_TIMEOUT_S = 60.0


__all__ = ["Plan", "Ticker", "loadavg"]  # loadavg: for the scripts that imported it here


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


# -- the server process ------------------------------------------------------------------


class Plan:
    """Object i fires at t0 + i * period / objects, then every period (fixed schedule)."""

    def __init__(self, objects: int, rate: float) -> None:
        self.objects = objects
        self.period_ms = objects / rate * 1000
        self.t0_ms = 0.0
        self.recording = False
        self.fired = 0
        self.late = array("d")

    def first_due(self, i: int) -> int:
        return int(self.t0_ms + i * self.period_ms / self.objects)

    def on_fire(self, scheduled_ms: int) -> int:
        if self.recording:
            self.fired += 1
            self.late.append(time.time() * 1000 - scheduled_ms)
        return int(scheduled_ms + self.period_ms)


class Ticker(DurableObject):
    async def arm(self, at_ms: int) -> None:
        await self.ctx.storage.set_alarm(at_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        await self.ctx.storage.set_alarm(self.env.on_fire(info.scheduled_ms))


async def serve_run(opts: dict[str, Any]) -> dict[str, float]:
    from alarmtop.server.app import OpsServer
    from alarmtop.server.auth import Tokens

    plan = Plan(opts["objects"], opts["rate"])
    rt = Runtime(Path(opts["dir"]), clock=SystemClock(), env=plan)
    rt.register(Ticker)
    await rt.start()
    names = [f"t{i:05d}" for i in range(plan.objects)]
    plan.t0_ms = time.time() * 1000 + 1000
    for lo in range(0, len(names), ARM_CONCURRENCY):
        await asyncio.gather(*(rt.get(Ticker, n).arm(plan.first_due(lo + k))
                               for k, n in enumerate(names[lo:lo + ARM_CONCURRENCY])))
    server = OpsServer(rt, Tokens(OPERATOR, VIEWER), "127.0.0.1", 0, tick_s=TICK_S)
    await server.start()
    await asyncio.sleep(max(0.0, plan.t0_ms / 1000 - time.time()) + WARMUP_S)
    load_before = loadavg()

    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--clients-only", server.url, VIEWER, str(opts["clients"]),
        str(opts["seconds"]), stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), CONNECT_TIMEOUT_S)
    if line.strip() != b"ready":
        raise SystemExit(f"clients failed to connect: {line!r}")
    feed = server.feed
    build_ms = array("d")
    build = feed.build_delta

    async def timed_build(events: list[Any]) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            return await build(events)
        finally:
            if plan.recording:
                build_ms.append((time.perf_counter() - started) * 1000)

    feed.build_delta = timed_build  # type: ignore[method-assign]
    t0, cpu0, loop0 = time.perf_counter(), cpu_s(), time.thread_time()
    events0, frames0 = feed.events_in, feed.frames_out
    dropped0 = sum(c.dropped for c in feed.clients)
    plan.recording = True
    line = await proc.stdout.readline()
    if line.strip() != b"done":
        raise SystemExit(f"clients failed: {line!r}")
    plan.recording = False
    window = time.perf_counter() - t0
    cpu1, loop1 = cpu_s(), time.thread_time()
    events, frames = feed.events_in - events0, feed.frames_out - frames0
    dropped = sum(c.dropped for c in feed.clients) - dropped0
    out = json.loads((await proc.stdout.read()).decode().strip().splitlines()[-1])
    await proc.wait()
    load_after = loadavg()
    await server.stop()
    await rt.stop()
    n = max(1, opts["clients"])
    result = {
        "events_in_per_s": events / window,
        "fired_per_s": plan.fired / window,
        "fire_late_p50_ms": percentile(plan.late, 50),
        "fire_late_p99_ms": percentile(plan.late, 99),
        "fire_late_max_ms": max(plan.late, default=0.0),
        "frames_out_per_s": frames / window,
        "build_p50_ms": percentile(build_ms, 50),
        "build_p99_ms": percentile(build_ms, 99),
        "server_dropped_per_client": dropped / n,
        "server_cpu_pct": (cpu1 - cpu0) / window * 100,
        "server_loop_cpu_pct": (loop1 - loop0) / window * 100,
        "server_peak_rss_mb": peak_rss_mb(),
        **out,
    }
    result["window_s"] = window
    result["load_before"], result["load_after"] = load_before, load_after
    return result


# -- the clients process -----------------------------------------------------------------


class Viewer:
    def __init__(self) -> None:
        self.deltas = 0
        self.bytes = 0
        self.gaps = 0
        self.repeats = 0
        self.resyncs = 0
        self.seq = 0


async def clients_run(url: str, token: str, n: int, seconds: float) -> None:
    from websockets.asyncio.client import connect

    latency, event_age = array("d"), array("d")
    viewers = [Viewer() for _ in range(n)]
    connected = 0
    all_in = asyncio.Event()
    stop = asyncio.Event()
    recording = False

    async def one(v: Viewer) -> None:
        nonlocal connected
        async with connect(url, max_size=None, open_timeout=CONNECT_TIMEOUT_S) as ws:
            await ws.send(json.dumps({"op": "hello", "token": token}))
            assert json.loads(await ws.recv())["type"] == "welcome"
            snap = json.loads(await ws.recv())
            assert snap["type"] == "snapshot", snap["type"]
            v.seq = snap["seq"]
            connected += 1
            if connected == n:
                all_in.set()
            while not stop.is_set():
                try:
                    raw = await asyncio.wait_for(ws.recv(), 0.5)
                except TimeoutError:
                    continue
                now = time.time() * 1000
                frame = json.loads(raw)
                if not recording:
                    v.seq = frame.get("seq", v.seq)
                    continue
                v.bytes += len(raw)
                if frame["type"] == "delta":
                    v.deltas += 1
                    step = frame["seq"] - v.seq
                    v.gaps += max(0, step - 1)
                    v.repeats += step < 1  # not after the last seq seen (e.g. the snapshot's)
                    v.seq = frame["seq"]
                    latency.append(now - frame["at_ms"])
                    if frame["events"]:
                        event_age.append(now - frame["events"][-1]["at_ms"])
                elif frame["type"] == "snapshot":
                    v.resyncs += 1
                    v.seq = frame["seq"]

    tasks = [asyncio.create_task(one(v)) for v in viewers]
    if n:
        waiting = asyncio.create_task(all_in.wait())
        done, _ = await asyncio.wait([waiting, *tasks], timeout=CONNECT_TIMEOUT_S,
                                     return_when=asyncio.FIRST_COMPLETED)
        if waiting not in done:
            for t in done:
                t.result()  # a client that failed says why
            raise SystemExit("clients did not all connect in time")
    print("ready", flush=True)
    t0, cpu0 = time.perf_counter(), cpu_s()
    recording = True
    await asyncio.sleep(seconds)
    recording = False
    window, cpu = time.perf_counter() - t0, cpu_s() - cpu0
    print("done", flush=True)
    stop.set()
    await asyncio.gather(*tasks)
    per = max(1, n)
    deltas = sum(v.deltas for v in viewers)
    emit_child({
        "deltas_in_per_s": deltas / window,
        "deltas_in_per_client_per_s": deltas / window / per,
        "mib_in_per_s": sum(v.bytes for v in viewers) / window / 2**20,
        "latency_p50_ms": percentile(latency, 50),
        "latency_p99_ms": percentile(latency, 99),
        "latency_max_ms": max(latency, default=0.0),
        "event_age_p50_ms": percentile(event_age, 50),
        "event_age_p99_ms": percentile(event_age, 99),
        "gaps_per_client": sum(v.gaps for v in viewers) / per,
        "gaps_max_client": float(max((v.gaps for v in viewers), default=0)),
        "repeats_per_client": sum(v.repeats for v in viewers) / per,
        "resyncs_per_client": sum(v.resyncs for v in viewers) / per,
        "client_cpu_pct": cpu / window * 100,
    })


# -- the parent --------------------------------------------------------------------------

UNITS = {
    "events_in_per_s": "/s", "fired_per_s": "/s", "fire_late_p50_ms": "ms",
    "fire_late_p99_ms": "ms", "fire_late_max_ms": "ms", "frames_out_per_s": "/s",
    "build_p50_ms": "ms", "build_p99_ms": "ms",
    "deltas_in_per_s": "/s", "deltas_in_per_client_per_s": "/s", "mib_in_per_s": "MiB/s",
    "latency_p50_ms": "ms", "latency_p99_ms": "ms", "latency_max_ms": "ms",
    "event_age_p50_ms": "ms", "event_age_p99_ms": "ms",
    "gaps_per_client": "", "gaps_max_client": "", "repeats_per_client": "",
    "resyncs_per_client": "",
    "server_dropped_per_client": "",
    "server_cpu_pct": "%", "server_loop_cpu_pct": "%", "client_cpu_pct": "%",
    "server_peak_rss_mb": "MiB", "window_s": "s", "load_before": "", "load_after": "",
}
LABELS = {
    "events_in_per_s": "runtime events/s into the feed",
    "fired_per_s": "alarms fired/s (handler starts)",
    "fire_late_p50_ms": "alarm lateness at start p50",
    "fire_late_p99_ms": "alarm lateness at start p99",
    "fire_late_max_ms": "alarm lateness at start max",
    "frames_out_per_s": "delta frames/s out (all clients)",
    "build_p50_ms": "time to build a delta p50",
    "build_p99_ms": "time to build a delta p99",
    "deltas_in_per_s": "deltas/s received (all clients)",
    "deltas_in_per_client_per_s": "deltas/s received per client",
    "mib_in_per_s": "received (all clients)",
    "latency_p50_ms": "delta latency p50 (recv - at_ms)",
    "latency_p99_ms": "delta latency p99",
    "latency_max_ms": "delta latency max",
    "event_age_p50_ms": "newest event's age at receipt p50",
    "event_age_p99_ms": "newest event's age at receipt p99",
    "gaps_per_client": "deltas missed (seq gaps) per client",
    "gaps_max_client": "deltas missed, worst client",
    "repeats_per_client": "deltas whose seq is not new, per client",
    "resyncs_per_client": "resync snapshots per client",
    "server_dropped_per_client": "deltas dropped by the server per client",
    "server_cpu_pct": "server process CPU (% of a core)",
    "server_loop_cpu_pct": "server event-loop thread CPU",
    "client_cpu_pct": "clients process CPU (% of a core)",
    "server_peak_rss_mb": "server peak RSS",
    "window_s": "measured window",
    "load_before": "load average (1 min) before",
    "load_after": "load average (1 min) after",
}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--clients-only":
        url, token, n, seconds = sys.argv[2:6]
        asyncio.run(clients_run(url, token, int(n), float(seconds)))
        return
    parser = base_parser(__doc__)
    parser.add_argument("--clients", default="100",
                        help="viewer counts to run, comma-separated (0: the runtime alone)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="measured window (quick 10, full 60)")
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=1000.0, help="alarms due per second")
    args = parser.parse_args()
    if args.child:
        emit_child(asyncio.run(serve_run(json.loads(args.child))))
        return
    seconds = args.seconds or (10.0 if args.quick else 60.0)
    print_config("fan-out of the ops feed", {
        "machine": machine(), "runtime": f"{args.objects:,} objects firing {args.rate:,.0f} "
        "alarms/s, embedded SQLite (WAL, synchronous=FULL), OpsServer tick 0.25 s",
        "viewers": args.clients, "window": f"{seconds:g} s"})
    tables = []
    for clients in (int(c) for c in args.clients.split(",")):
        table = Table(f"fan-out: {clients} viewers, {args.objects:,} objects firing "
                      f"{args.rate:,.0f}/s, {seconds:g} s windows")
        for _ in range(max(3, args.repeats)):
            with work_area(args.dir, "fanout-") as root:
                opts = {"dir": str(root / "data"), "objects": args.objects, "rate": args.rate,
                        "clients": clients, "seconds": seconds}
                result = run_child(__file__, ["--child", json.dumps(opts)])
            for key in UNITS:
                table.add(LABELS[key], result[key], UNITS[key])
            print(f"  {clients} viewers: fired {result['fired_per_s']:,.0f}/s, delta p99 "
                  f"{result['latency_p99_ms'] or 0:.1f} ms, server CPU "
                  f"{result['server_cpu_pct']:.0f}%", file=sys.stderr)
        table.print()
        tables.append(table)
    print(f"load average at the end: {loadavg()}")
    if args.json:
        print(json.dumps({t.title: t.as_dict() for t in tables}))
    write_json(args.json_out, {"script": "fanout",
                               "tables": {t.title: t.as_dict() for t in tables}})


if __name__ == "__main__":
    main()
