"""Bulk re-arm of dead letters: rate, and other alarms' lateness while it runs.

N dead letters (written as the runtime keeps them) are re-armed by one bulk action
(`rt.bulk.start("rearm", {"kind": "alarms", "state": "dead"})`) on the wall clock
(`SystemClock`), embedded SQLite (WAL, synchronous=FULL, read back in every run),
durable: the batch counts as done when its last group's commit (alarm rows, item
outcomes, audit rows) has landed. The re-armed alarms fall due a day later, so the
figure is the bulk path itself, not their firing.

Meanwhile `--tickers` objects each fire an alarm every `--period-ms` (re-armed by
their handler): their lateness (handler start minus scheduled time) is measured
for `--base-s` seconds before the batch (the baseline, after 2 s of warm-up in
which each ticker opens its database) and while it runs. The
bars: at least 5,000 items per second, and the tickers' p99 lateness at most 10 ms
above the baseline. `--hog 0,1` runs the whole set once on its own and once with a
process keeping one core busy beside it (a neighbour on a shared machine).

Each repeat (at least 3) is a fresh process on a fresh data dir; figures are
medians with min-max.

    .venv/bin/python bench/bulk_rearm.py [--quick] [--repeats 3] [--items 100000]
        [--max-in-flight 1000] [--tickers 100] [--period-ms 50] [--hog 0,1]

Full: about 1.5 min per --hog value (--quick: about 40 s).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from common import (
    Table,
    alarmtop_sqlite_settings,
    base_parser,
    cpu_hogs,
    emit_child,
    fsync_rate,
    machine,
    percentile,
    print_config,
    run_child,
    work_area,
    write_json,
)

from alarmtop.core import AlarmInfo, DurableObject, Runtime, SystemClock
from alarmtop.core.model.alarm_policy import AlarmRecord, AlarmState

DAY_MS = 24 * 3600 * 1000
WRITE_CHUNK = 10_000
RATE_BAR = 5000.0
ADDED_BAR_MS = 10.0
WARMUP_S = 2.0  # tickers firing before the baseline is taken


class Ticker(DurableObject):
    async def start(self, at_ms: int) -> None:
        await self.ctx.storage.set_alarm(at_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        now = self.ctx.now_ms()
        bench = self.env
        if bench["on"]:
            if time.monotonic() >= bench["from"]:  # after the warm-up
                bench["late"].append((time.monotonic(), now - info.scheduled_ms))
            await self.ctx.storage.set_alarm(info.scheduled_ms + bench["period_ms"])


async def one_run(opts: dict[str, Any]) -> dict[str, Any]:
    env: dict[str, Any] = {"on": True, "late": [], "period_ms": opts["period_ms"],
                           "from": float("inf")}
    items = opts["items"]
    rt = Runtime(Path(opts["dir"]), clock=SystemClock(), env=env)
    rt.register(Ticker)
    await rt.start()
    try:
        settings = await alarmtop_sqlite_settings(rt)
        now = rt.clock.now_ms()
        for i in range(0, items, WRITE_CHUNK):
            await rt.backend.database.write([
                AlarmRecord("Dead", f"d{j:07d}", now - 60_000, AlarmState.DEAD, 6, None,
                            f"boom {j}") for j in range(i, min(items, i + WRITE_CHUNK))])
        first = rt.clock.now_ms() + 200
        tickers, period = opts["tickers"], opts["period_ms"]
        for i in range(tickers):
            await rt.get(Ticker, f"t{i}").start(first + i * period // tickers)
        # A ticker's first firings open its object's database: not the baseline.
        await asyncio.sleep(WARMUP_S + 0.2)
        env["from"] = time.monotonic()
        await asyncio.sleep(opts["base_s"])
        t_bulk = time.monotonic()
        bid = await rt.bulk.start("rearm", {"kind": "alarms", "state": "dead"},
                                  max_in_flight=opts["max_in_flight"],
                                  at_ms=rt.clock.now_ms() + DAY_MS)
        t_started = time.monotonic()
        batch = await rt.bulk.wait(bid)
        t_done = time.monotonic()
        env["on"] = False
        if batch["done"] != items or batch["failed"]:
            raise SystemExit(f"the batch did not re-arm every item: {batch}")
        counts = await rt.backend.alarm_rows.counts()
        if counts["dead"]:
            raise SystemExit(f"dead letters left: {counts}")
        audit = await rt.audit.list(limit=3)
        if not any(r["action"] == "bulk_rearm" for r in audit):
            raise SystemExit("no bulk_rearm audit row")
    finally:
        await rt.stop()
    base = [ms for t, ms in env["late"] if t < t_bulk]
    during = [ms for t, ms in env["late"] if t_bulk <= t <= t_done]
    base_p99, during_p99 = percentile(base, 99), percentile(during, 99)
    return {
        "record_keys_s": t_started - t_bulk,
        "total_s": t_done - t_bulk,
        "rate_per_s": items / (t_done - t_bulk),
        "apply_rate_per_s": items / (t_done - t_started),
        "base_firings": float(len(base)), "during_firings": float(len(during)),
        "base_p50_ms": percentile(base, 50), "base_p99_ms": base_p99,
        "during_p50_ms": percentile(during, 50), "during_p99_ms": during_p99,
        "p99_added_ms": (during_p99 - base_p99
                         if during_p99 is not None and base_p99 is not None else None),
        "settings": settings,
    }


UNITS = {"record_keys_s": "s", "total_s": "s", "rate_per_s": "/s", "apply_rate_per_s": "/s",
         "base_firings": "", "during_firings": "", "base_p50_ms": "ms", "base_p99_ms": "ms",
         "during_p50_ms": "ms", "during_p99_ms": "ms", "p99_added_ms": "ms"}
LABELS = {"record_keys_s": "time to record the selection",
          "total_s": "total time (durable)",
          "rate_per_s": "re-armed per second (durable)",
          "apply_rate_per_s": "re-armed per second after the selection",
          "base_firings": "ticker firings before (samples)",
          "during_firings": "ticker firings during (samples)",
          "base_p50_ms": "tickers' lateness before p50",
          "base_p99_ms": "tickers' lateness before p99",
          "during_p50_ms": "tickers' lateness during p50",
          "during_p99_ms": "tickers' lateness during p99",
          "p99_added_ms": "p99 added by the batch"}


def measure(args: Any, hogs: int) -> tuple[Table, dict[str, Any]]:
    table = Table(f"bulk re-arm: {args.items:,} dead letters, max_in_flight "
                  f"{args.max_in_flight:,}, {args.tickers} tickers every {args.period_ms} ms, "
                  f"{hogs} CPU hog(s) beside")
    settings: dict[str, Any] = {}
    with cpu_hogs(hogs):
        for i in range(max(3, args.repeats)):
            with work_area(args.dir, "bulk-rearm-") as root:
                opts = {"dir": str(root / "data"), "items": args.items,
                        "max_in_flight": args.max_in_flight, "tickers": args.tickers,
                        "period_ms": args.period_ms, "base_s": args.base_s}
                result = run_child(__file__, ["--child", json.dumps(opts)])
            settings = result.pop("settings")
            for key, value in result.items():
                table.add(LABELS[key], value, UNITS[key])
            print(f"  run {i + 1}, {hogs} hog(s): {result['rate_per_s']:,.0f}/s, p99 added "
                  f"{result['p99_added_ms'] or 0:+.1f} ms", file=sys.stderr)
    table.print()
    rate = table.median(LABELS["rate_per_s"]) or 0.0
    added = table.median(LABELS["p99_added_ms"])
    late_ok = added is not None and added <= ADDED_BAR_MS
    print(f"bars ({hogs} hog(s), medians, this machine): rate >= {RATE_BAR:,.0f}/s "
          f"{'met' if rate >= RATE_BAR else 'NOT met'} ({rate:,.0f}/s); p99 lateness "
          f"+<= {ADDED_BAR_MS:g} ms {'met' if late_ok else 'NOT met'} "
          f"({'n/a' if added is None else f'{added:+.1f} ms'})")
    return table, settings


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--items", type=int, default=None, help="full 100,000; quick 10,000")
    parser.add_argument("--max-in-flight", type=int, default=1000)
    parser.add_argument("--tickers", type=int, default=100)
    parser.add_argument("--period-ms", type=int, default=50)
    parser.add_argument("--base-s", type=float, default=None, help="full 3 s; quick 1 s")
    parser.add_argument("--hog", default="0",
                        help="CPU hogs beside, one set of runs per value (e.g. 0,1)")
    args = parser.parse_args()
    if args.child:
        emit_child(asyncio.run(one_run(json.loads(args.child))))
        return
    args.items = args.items or (10_000 if args.quick else 100_000)
    args.base_s = args.base_s or (1.0 if args.quick else 3.0)
    hogs = [int(h) for h in args.hog.split(",")]
    cfg = {"machine": machine(),
           "fsync rate (SQLite commits/s, WAL, FULL)": round(fsync_rate(args.dir)),
           "alarmtop": "embedded SQLite, WAL, synchronous=FULL (read back in every run)",
           "CPU hogs": hogs}
    print_config("bulk re-arm", cfg)
    tables = [measure(args, h) for h in hogs]
    if args.json:
        print(json.dumps({t.title: t.as_dict() for t, _ in tables}))
    write_json(args.json_out, {"script": "bulk_rearm", "config": cfg,
                               "settings": tables[-1][1],
                               "tables": {t.title: t.as_dict() for t, _ in tables}})


if __name__ == "__main__":
    main()
