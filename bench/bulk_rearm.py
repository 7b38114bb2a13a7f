"""Bulk re-arm of dead letters: rate, and other alarms' lateness while it runs.

N dead letters (written as the runtime keeps them) are re-armed by one bulk action
(`rt.bulk.start("rearm", {"kind": "alarms", "state": "dead"})`) on the wall clock
(`SystemClock`), durable: the batch counts as done when its last group's commit
(alarm rows, item outcomes, audit rows) has landed. The re-armed alarms fall due a
day later, so the figure is the bulk path itself, not their firing.

Meanwhile `--tickers` objects each fire an alarm every `--period-ms` (re-armed by
their handler): their lateness (handler start minus scheduled time) is measured
for `--base-s` seconds before the batch (the baseline) and while it runs. The
bar: at least 5,000 items per second, and the tickers' p99 lateness at most 10 ms
above the baseline.

    .venv/bin/python bench/bulk_rearm.py [--quick] [--items 100000]
        [--max-in-flight 1000] [--tickers 100] [--period-ms 50]
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from typing import Any

from common import base_parser, percentile, work_dir

from alarmtop.core import AlarmInfo, DurableObject, Runtime, SystemClock
from alarmtop.core.model.alarm_policy import AlarmRecord, AlarmState

DAY_MS = 24 * 3600 * 1000
WRITE_CHUNK = 10_000


class Ticker(DurableObject):
    async def start(self, at_ms: int) -> None:
        await self.ctx.storage.set_alarm(at_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        now = self.ctx.now_ms()
        bench = self.env
        if bench["on"]:
            bench["late"].append((time.monotonic(), now - info.scheduled_ms))
            await self.ctx.storage.set_alarm(info.scheduled_ms + bench["period_ms"])


async def run(args: Any) -> dict[str, Any]:
    data = work_dir(args.dir, "alarmtop-bulk-")
    env: dict[str, Any] = {"on": True, "late": [], "period_ms": args.period_ms}
    rt = Runtime(data, clock=SystemClock(), env=env)
    rt.register(Ticker)
    await rt.start()
    try:
        now = rt.clock.now_ms()
        for i in range(0, args.items, WRITE_CHUNK):
            await rt.backend.database.write([
                AlarmRecord("Dead", f"d{j:07d}", now - 60_000, AlarmState.DEAD, 6, None,
                            f"boom {j}") for j in range(i, min(args.items, i + WRITE_CHUNK))])
        first = rt.clock.now_ms() + 200
        for i in range(args.tickers):
            await rt.get(Ticker, f"t{i}").start(first + i * args.period_ms // args.tickers)
        await asyncio.sleep(args.base_s + 0.2)
        t_bulk = time.monotonic()
        bid = await rt.bulk.start("rearm", {"kind": "alarms", "state": "dead"},
                                  max_in_flight=args.max_in_flight,
                                  at_ms=rt.clock.now_ms() + DAY_MS)
        t_started = time.monotonic()
        batch = await rt.bulk.wait(bid)
        t_done = time.monotonic()
        env["on"] = False
        assert batch["done"] == args.items and batch["failed"] == 0, batch
        counts = await rt.backend.alarm_rows.counts()
        assert counts["dead"] == 0, counts
        audit = await rt.audit.list(limit=3)
        assert any(r["action"] == "bulk_rearm" for r in audit)
    finally:
        await rt.stop()
        shutil.rmtree(data, ignore_errors=True)
    base = [ms for t, ms in env["late"] if t < t_bulk]
    during = [ms for t, ms in env["late"] if t_bulk <= t <= t_done]
    return {
        "items": args.items, "max_in_flight": args.max_in_flight,
        "record_keys_s": round(t_started - t_bulk, 3),
        "total_s": round(t_done - t_bulk, 3),
        "rate_per_s": round(args.items / (t_done - t_bulk)),
        "apply_rate_per_s": round(args.items / (t_done - t_started)),
        "tickers": args.tickers, "period_ms": args.period_ms,
        "base_firings": len(base), "during_firings": len(during),
        "base_p50_ms": percentile(base, 50), "base_p99_ms": percentile(base, 99),
        "during_p50_ms": percentile(during, 50), "during_p99_ms": percentile(during, 99),
        "p99_added_ms": percentile(during, 99) - percentile(base, 99),
    }


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--max-in-flight", type=int, default=1000)
    parser.add_argument("--tickers", type=int, default=100)
    parser.add_argument("--period-ms", type=int, default=50)
    parser.add_argument("--base-s", type=float, default=3.0)
    args = parser.parse_args()
    if args.quick:
        args.items, args.base_s = 10_000, 1.0
    result = asyncio.run(run(args))
    for key, value in result.items():
        print(f"{key:>18}: {value}")
    rate_ok = result["rate_per_s"] >= 5000
    late_ok = result["p99_added_ms"] <= 10
    print(f"bar: rate >= 5,000/s {'met' if rate_ok else 'NOT met'}; p99 lateness "
          f"+<=10 ms {'met' if late_ok else 'NOT met'}")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
