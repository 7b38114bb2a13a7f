"""The machine's limits that bound alarmtop: fsync'd SQLite commits and asyncio timers.

- SQLite commits per second in WAL mode with synchronous=FULL (each commit is on
  disk when it returns), one row per transaction and batches of 100 rows, with the
  plain `sqlite3` module and through `aiosqlite` (one thread hop per statement).
- asyncio timer lateness: timers due at 10,000/s, how late their callbacks run.

    .venv/bin/python bench/physical_limits.py [--quick] [--repeats 3] [--dir DIR]
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path

import aiosqlite
from common import Table, base_parser, machine, percentile, print_config, work_area, write_json

SCHEMA = "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)"
PAYLOAD = "x" * 100


def _open(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(SCHEMA)
    return conn


def sqlite_commits(path: Path, transactions: int, rows_per: int) -> float:
    """Seconds for `transactions` commits of `rows_per` rows each."""
    conn = _open(path)
    rows = [(PAYLOAD,)] * rows_per
    t0 = time.perf_counter()
    for _ in range(transactions):
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO t (v) VALUES (?)", rows)
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - t0
    conn.close()
    return elapsed


async def aiosqlite_commits(path: Path, transactions: int, rows_per: int) -> float:
    async with aiosqlite.connect(path, isolation_level=None) as conn:
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA synchronous=FULL")
        await conn.execute(SCHEMA)
        rows = [(PAYLOAD,)] * rows_per
        t0 = time.perf_counter()
        for _ in range(transactions):
            await conn.execute("BEGIN")
            if rows_per == 1:
                await conn.execute("INSERT INTO t (v) VALUES (?)", rows[0])
            else:
                await conn.executemany("INSERT INTO t (v) VALUES (?)", rows)
            await conn.execute("COMMIT")
        return time.perf_counter() - t0


async def timer_lateness(rate: int, seconds: float) -> list[float]:
    """Lateness in ms of `rate * seconds` timers due `1/rate` s apart (loop.call_at)."""
    loop = asyncio.get_running_loop()
    n = int(rate * seconds)
    late: list[float] = []
    done = loop.create_future()
    start = loop.time() + 0.2

    def fire(when: float) -> None:
        late.append((loop.time() - when) * 1000)
        if len(late) == n:
            done.set_result(None)

    for i in range(n):
        when = start + i / rate
        loop.call_at(when, fire, when)
    await done
    return late


def main() -> None:
    args = base_parser(__doc__).parse_args()
    single, batches = (500, 100) if args.quick else (3000, 500)
    timer_s = 1.0 if args.quick else 5.0
    print_config("physical limits", {"machine": machine(),
                                     "SQLite": "WAL, synchronous=FULL, one row or 100 per "
                                               "transaction"})
    table = Table(f"physical limits ({'quick' if args.quick else 'full'})")
    for i in range(max(3, args.repeats)):
        with work_area(args.dir, "physical-") as root:
            t = sqlite_commits(root / f"a{i}.db", single, 1)
            table.add("sqlite3 commits/s (1 row/txn)", single / t, "/s")
            t = sqlite_commits(root / f"b{i}.db", batches, 100)
            table.add("sqlite3 rows/s (100 rows/txn)", batches * 100 / t, "/s")
            table.add("sqlite3 commits/s (100 rows/txn)", batches / t, "/s")
            t = asyncio.run(aiosqlite_commits(root / f"c{i}.db", single, 1))
            table.add("aiosqlite commits/s (1 row/txn)", single / t, "/s")
            t = asyncio.run(aiosqlite_commits(root / f"d{i}.db", batches, 100))
            table.add("aiosqlite rows/s (100 rows/txn)", batches * 100 / t, "/s")
            late = asyncio.run(timer_lateness(10_000, timer_s))
            table.add("asyncio timers at 10,000/s: lateness p50", percentile(late, 50), "ms")
            table.add("asyncio timers at 10,000/s: lateness p99", percentile(late, 99), "ms")
            table.add("asyncio timers at 10,000/s: lateness max", max(late), "ms")
    table.print()
    if args.json:
        print(json.dumps(table.as_dict()))
    write_json(args.json_out, {"script": "physical_limits", "tables": {
        table.title: table.as_dict()}})


if __name__ == "__main__":
    main()
