"""A process writing a random workload to the runtime database, killed by SIGKILL, for
`test_counters.py`.

    python -m tests.storage.counters_worker batches DATA SEED KILL_AT
    python -m tests.storage.counters_worker runtime DATA SEED
    python -m tests.storage.counters_worker check DATA

`batches` writes random alarm rows, deletions, execution checkpoints and object
listings straight to the alarm index, many writers at a time (so commits are
shared), and at the KILL_AT-th round queues a write that kills the process from
inside the transaction: that batch's rows are written and not committed.
`runtime` runs a real runtime on the system clock: objects whose alarms fail at
random, retry, die, re-arm, set new alarms and delete theirs, until the parent
kills it. `check` opens the database again and prints the counters and a recount
as one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

from alarmtop.core import AlarmInfo, DurableObject, RetryPolicy, Runtime, SystemClock
from alarmtop.core.model.alarm_policy import AlarmRecord, AlarmState
from alarmtop.core.model.operations import ExecutionRecord, ExecutionStatus
from alarmtop.core.model.storage_values import Counts
from alarmtop.core.storage.sqlite.execution_log import SqliteExecutionLog
from tests.storage.runtime_db import RuntimeDb

START_MS = 1_800_000_000_000
NAMES = 60


def random_record(rng: random.Random) -> AlarmRecord:
    state = rng.choice(list(AlarmState))
    retries = 0 if state is AlarmState.PENDING and rng.random() < 0.7 else rng.randint(0, 8)
    nxt = None if state is AlarmState.DEAD else START_MS + rng.randint(0, 10**6)
    return AlarmRecord(rng.choice(["A", "B"]), f"n{rng.randrange(NAMES)}", START_MS, state,
                       retries, nxt)


def random_execution(rng: random.Random) -> ExecutionRecord:
    eid = f"e{rng.randrange(NAMES // 2)}"
    return ExecutionRecord(eid, "job", "1", rng.choice(list(ExecutionStatus)), "{}", START_MS,
                           START_MS + rng.randint(0, 10**6))


def random_round(index: RuntimeDb, store: SqliteExecutionLog,
                 rng: random.Random) -> list[asyncio.Future[None]]:
    """A few writers at once: their writes share one commit (or a few)."""
    futures = []
    for _ in range(rng.randint(1, 8)):
        roll = rng.random()
        if roll < 0.5:
            futures.append(index.submit([random_record(rng) for _ in range(rng.randint(1, 4))]))
        elif roll < 0.7:
            futures.append(index.submit((), [(rng.choice(["A", "B"]),
                                              f"n{rng.randrange(NAMES)}")]))
        elif roll < 0.9:
            rec = random_execution(rng)
            futures.append(store.checkpoint(rec.id, rec))
        else:
            key = (rng.choice(["A", "B"]), f"n{rng.randrange(NAMES)}")
            futures.append(index.submit(extra=index.object_write(key, f"{key[1]}.sqlite",
                                                                 START_MS)))
    return futures


def die_here(conn: sqlite3.Connection) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


async def batches(data: Path, seed: int, kill_at: int) -> None:
    index = RuntimeDb(data / "runtime.sqlite")
    await index.open()
    store = index.log
    rng = random.Random(seed)
    for round_ in range(kill_at + 1):
        futures = random_round(index, store, rng)
        if round_ == kill_at:
            # Rows and a deletion first, then the death, in one transaction.
            futures.append(index.submit([random_record(rng) for _ in range(3)],
                                        [("A", f"n{rng.randrange(NAMES)}")], extra=die_here))
        await asyncio.gather(*futures)
    raise SystemExit("the kill did not happen")


class Chaotic(DurableObject):
    """Fails half its attempts; on success sets a new alarm or none."""

    async def arm(self, delay_ms: int) -> None:
        await self.ctx.storage.set_alarm(self.ctx.now_ms() + delay_ms)

    async def drop(self) -> None:
        await self.ctx.storage.delete_alarm()

    async def alarm(self, info: AlarmInfo) -> None:
        rng = random.Random(f"{self.ctx.id}-{info.retry_count}-{self.ctx.now_ms()}")
        if rng.random() < 0.5:
            raise RuntimeError("chaos")
        if rng.random() < 0.6:
            await self.ctx.storage.set_alarm(self.ctx.now_ms() + rng.randint(0, 30))


class Bare(Chaotic):
    """The same, never touching its storage but for the alarm (no database)."""


async def run_runtime(data: Path, seed: int) -> None:
    rng = random.Random(seed)
    rt = Runtime(data, clock=SystemClock(), hibernate_after=0.05)
    policy = RetryPolicy(max_retries=3, initial_delay_s=0.005)
    rt.register(Chaotic, retry_policy=policy)
    rt.register(Bare, retry_policy=policy)
    await rt.start()
    print("started", flush=True)
    while True:  # until killed
        cls = rng.choice([Chaotic, Bare])
        name = f"o{rng.randrange(NAMES)}"
        roll = rng.random()
        try:
            if roll < 0.7:
                await rt.get(cls, name).arm(rng.randint(0, 20))
            elif roll < 0.8:
                await rt.get(cls, name).drop()
            elif roll < 0.9:
                dead = await rt.dead_letters(limit=3)
                for d in dead:
                    await rt.rearm(d.object_class, d.object_name)
            else:
                dead = await rt.dead_letters(limit=1)
                for d in dead:
                    await rt.clear_dead_letter(d.object_class, d.object_name)
        except Exception:
            pass  # an operator's action may race a firing; the workload goes on
        await asyncio.sleep(0.001)


def as_json(c: Counts) -> dict[str, Any]:
    return {"alarms": {k: v for k, v in sorted(c.alarms.items())},
            "retries": sorted([cls, r, n] for (cls, r), n in c.retries.items()),
            "executions": dict(sorted(c.executions.items())), "stored": c.stored,
            "known": c.known}


async def check(data: Path) -> None:
    index = RuntimeDb(data / "runtime.sqlite")
    await index.open()
    print(json.dumps({"counters": as_json(index.counters()),
                      "recount": as_json(await index.recount()),
                      "rows": sum(index.counters().alarms.values())}), flush=True)
    await index.close()


def main(argv: list[str]) -> None:
    mode, data = argv[0], Path(argv[1])
    if mode == "batches":
        asyncio.run(batches(data, int(argv[2]), int(argv[3])))
    elif mode == "runtime":
        asyncio.run(run_runtime(data, int(argv[2])))
    elif mode == "check":
        asyncio.run(check(data))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
