"""The chaos workload: a real runtime on the wall clock under a mixed load, keeping
its own append-only record of everything that was acknowledged.

The harness (`harness.py`) starts this module as a child process, kills it with
SIGKILL (at a record-line count, or at a write boundary this process armed
itself) and starts it again on the same data. The record is a JSON-lines file
written with `os.write` + `os.fsync` outside the runtime, one line per fact:

- ``intent`` then ``ack`` or ``nack`` around every call into the runtime (``op``
  ties them): alarm set/delete, KV write, SQL insert, debounce hit, lease
  grant/release, execution start, callback verdict, operator action. An intent
  without either has an unknown outcome: it may or may not have happened. A
  ``nack`` (the call raised, with its error) is not acknowledged: the event
  failed and kept nothing.
- ``fire``: an alarm handler ran (object, scheduled time, retry count, and
  whether its plan makes this attempt succeed or raise an injected fault; a lock
  can still fail a planned success).
- ``body``: a step body ran (execution, operation id, step name, nonce).
- ``deliver`` / ``delivered``: a keyed delivery through the runtime's ledger was
  attempted / returned (with whether it was the first for its key).
- ``expire`` / ``flush``: the lease and debounce side effects.
- ``boot`` / ``ready``: a process started (with the boundary it armed) / its
  runtime is up; ``boundary``: the process is about to die at the write
  boundary it armed (the commit's keys); ``start_refused``: its start-up met a
  lock (it then dies as a crash would).

The harness adds ``lock`` / ``unlock`` lines around each lock it holds.

Which handlers fail is not random at run time: it is a pure function of the
seed and the thing that fails (see the ``*_plan`` functions), so the checker in
`invariants.py` can tell what each retry count and dead letter should be.

Run as ``python -m tests.chaos.workload run DATA RECORD SEED ROUND [--boundary
JSON] [--busy-timeout S]`` (until killed) or ``python -m tests.chaos.workload
settle DATA RECORD SEED STATE`` (no new load, no faults: deliver pending verdicts
and operator actions, wait until nothing is due, write the final state as JSON to
STATE and exit).

On a fleet (``--dsn DSN --node nK --nodes N --lease-s S``, see `fleet.py`) the
runtime is a node on PostgreSQL; every node appends to the one record, each line
tagged with its ``node``. Each node drives only its share of the objects and
executions (`FleetNode.drives`: one caller per object keeps each object's calls
in record order), and its calls run on the object's owner. A call whose node
went away during it (``NodeUnreachable``) is written as ``unknown``: its outcome
is unknown, like a killed caller's. SIGUSR1 arms the boundary written in
``--arm-file`` (an ``armed`` line); alarm and writer handlers write a ``span``
(node, wall-clock start and end) when they end. ``serve`` mode is a node of the
settling fleet with no load of its own, until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import json
import os
import random
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from alarmtop.core import (
    AlarmInfo,
    DurableObject,
    ObjectContext,
    PostgresBackend,
    RetryPolicy,
    Runtime,
)
from alarmtop.core.durable import (
    DurableContext,
    Duration,
    RetryStrategyConfig,
    StepConfig,
    StepError,
    create_retry_strategy,
    durable_execution,
)
from alarmtop.core.kernel.clock import SystemClock
from alarmtop.core.kernel.executions.functions import DurableFunction
from alarmtop.core.kernel.executions.invocation import current_step
from alarmtop.core.kernel.executions.ledger import Ledger
from alarmtop.core.model.errors import NodeUnreachable, StorageError
from alarmtop.core.model.execution_config import JitterStrategy
from alarmtop.core.storage.sqlite.backend import SqliteBackend
from alarmtop.examples.click_counter import ClickCounter
from alarmtop.examples.festival import FestivalServices, build_festival
from alarmtop.examples.lease_ledger import LeaseLedger
from tests.chaos.faults import BoundaryDeath, arm_boundary

# -- sizes and policies (shared with the checker) ----------------------------------------------

ALARM_OBJECTS = 40
WRITERS = 12
WRITER_KEYS = 5
LEDGERS = 6
LEASES_PER_LEDGER = 6
COUNTERS = 6
WORKERS = 6
MAX_EXECUTIONS_PER_ROUND = 2  # of each kind
ALARM_RETRIES = 3
ALARM_POLICY = RetryPolicy(max_retries=ALARM_RETRIES, initial_delay_s=0.1, backoff_rate=2.0)
FAR_MS = 3_600_000  # alarms and leases this far out stay pending through the run
SETTLE_HORIZON_MS = 600_000  # "nothing due" means nothing due within this
COMPENSATION_ATTEMPTS = 3  # the saga helper's retry budget for a compensation
HOTEL_ATTEMPTS = 3
FESTIVAL = "festival-stream"
TRIP = "trip"
CHAOS_FAULT = "ChaosFault"
CRASH_ERROR = "stopped while the handler ran"
TICK_S = 0.2
SETTLE_DEADLINE_S = 90.0


class ChaosFault(RuntimeError):
    """The failure injected into handlers and step bodies by plan."""


# -- plans: pure functions of the seed ---------------------------------------------------------

def unit(seed: int, *parts: Any) -> float:
    """A number in [0, 1) fixed by the seed and `parts`."""
    digest = hashlib.sha256(":".join(map(str, (seed, *parts))).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def alarm_failures(seed: int, obj: str, at_ms: int) -> int:
    """How many attempts of the alarm `obj` set for `at_ms` raise before one succeeds.

    Above `ALARM_RETRIES` the alarm can only end as a dead letter."""
    u = unit(seed, "alarm", obj, at_ms)
    if u < 0.62:
        return 0
    if u < 0.80:
        return 1
    if u < 0.86:
        return 2
    return 99


@dataclass(frozen=True)
class FestivalPlan:
    verdict: str | None  # "go", "cancel", or None: no verdict is ever sent
    timeout_s: int  # the verdict callback's timeout (the festival's start)
    doomed: bool  # compensate_open_viewing_page fails every attempt -> needs_human
    operator_retries: bool  # a doomed one: the operator retries (else leaves it to a human)

    @property
    def compensates(self) -> bool:
        """Cancelled by verdict, or by the verdict's timeout (the festival started)."""
        return self.verdict == "cancel" or (self.verdict is None and self.timeout_s < 3600)

    @property
    def waits(self) -> bool:
        """No verdict ever comes and the start is far off: it is still waiting at the end."""
        return self.verdict is None and not self.compensates

    @property
    def ends_with_human(self) -> bool:
        return self.compensates and self.doomed and not self.operator_retries


def festival_plan(seed: int, execution_id: str) -> FestivalPlan:
    u = unit(seed, "festival", execution_id)
    verdict, timeout = (("go", 3600) if u < 0.3 else ("cancel", 3600) if u < 0.6
                        else (None, 2) if u < 0.85 else (None, 3600))
    doomed = unit(seed, "doomed", execution_id) < 0.45
    return FestivalPlan(verdict, timeout, doomed, unit(seed, "operator", execution_id) < 0.5)


def hotel_failures(seed: int, execution_id: str) -> int:
    """How many runs of a trip's book_hotel raise; HOTEL_ATTEMPTS or more rolls it back."""
    u = unit(seed, "hotel", execution_id)
    return 0 if u < 0.5 else 1 if u < 0.72 else 2 if u < 0.82 else 9


# -- the record ------------------------------------------------------------------------------

def read_record(path: Path) -> list[dict[str, Any]]:
    """Every line of the record; a torn last line (killed mid-write) is dropped."""
    if not path.exists():
        return []
    lines = path.read_bytes().split(b"\n")
    out: list[dict[str, Any]] = []
    for i, raw in enumerate(lines):
        if not raw:
            continue
        try:
            out.append(json.loads(raw))
        except ValueError:
            if i < len(lines) - 2:
                raise ValueError(f"record line {i + 1} is damaged: {raw[:200]!r}") from None
    return out


class Record:
    """The workload's own append-only log; every line is fsync'd before `write` returns.

    On a fleet every node appends to the same file (each line is one `os.write` on an
    O_APPEND descriptor, so lines land whole, in one order for all), tagged with the
    node that wrote it. What the plans need to know (how often a step body ran, which
    times an object's alarm was set for) is learnt from the file itself, the other
    nodes' lines included: a step that ran on a node that died runs next on another.
    """

    def __init__(self, path: Path, node: str | None = None) -> None:
        self.path = path
        self.node = node
        self.runs: collections.Counter[tuple[str, str]] = collections.Counter()
        self.step_ops: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
        self.used_at: dict[str, set[int]] = collections.defaultdict(set)
        self.executions: dict[str, str] = {}  # id -> handler name
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._read_fd = os.open(path, os.O_RDONLY)
        self._offset = 0
        self._learning = threading.Lock()  # step bodies write from worker threads
        self.refresh()

    def refresh(self) -> None:
        """Learn from the lines appended since the last look (by any process); a line
        still being written (no newline yet) waits for the next look."""
        with self._learning:
            size = os.fstat(self._read_fd).st_size
            if size <= self._offset:
                return
            chunk = os.pread(self._read_fd, size - self._offset, self._offset)
            end = chunk.rfind(b"\n") + 1
            self._offset += end
            for raw in chunk[:end].split(b"\n"):
                if raw:
                    try:
                        self._learn(json.loads(raw))
                    except ValueError:
                        continue  # a line torn by a kill mid-write

    def _learn(self, line: dict[str, Any]) -> None:
        kind = line["k"]
        if kind == "body":
            self.runs[(line["exec"], line["step"])] += 1
            self.step_ops[(line["exec"], line["step"])].add(line["op"])
        elif kind == "intent" and line["what"] == "set":
            self.used_at[line["obj"]].add(line["at"])
        elif kind == "intent" and line["what"] == "start":
            self.executions[line["exec"]] = line["name"]

    def write(self, **line: Any) -> None:
        self.note(**line)
        self.refresh()

    def note(self, **line: Any) -> None:
        """Append a line without learning from it: safe from any thread (one `os.write`
        on an O_APPEND descriptor lands whole)."""
        if self.node is not None:
            line.setdefault("node", self.node)
        data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
        if os.write(self._fd, data) != len(data):
            raise OSError(f"short write to the chaos record {self.path}")
        os.fsync(self._fd)

    def body(self, ok: bool = True) -> str:
        """Record a step body run (from inside the step) and return its nonce."""
        step = current_step.get()
        if step is None:
            raise RuntimeError("Record.body() runs inside a step body")
        nonce = uuid.uuid4().hex[:12]
        self.write(k="body", exec=step[0], op=step[1], step=step[2], nonce=nonce, ok=ok)
        return nonce

    def close(self) -> None:
        os.close(self._fd)
        os.close(self._read_fd)

    def span(self, obj: str, what: str, start_us: int) -> None:
        """On a fleet: where and when a handler of `obj` ran (wall clock, microseconds),
        for the check that no two nodes ran one object's handlers at once."""
        if self.node is not None:
            self.note(k="span", obj=obj, what=what, t0=start_us, t1=wall_us())


def wall_us() -> int:
    return time.time_ns() // 1000


# -- objects ---------------------------------------------------------------------------------

async def set_busy_timeout(ctx: ObjectContext, env: Any) -> None:
    """The object's own database gets the workload's short busy timeout (when locks are
    on), through the object's SQL: `SqliteBackend(busy_timeout_s=)` reaches only
    runtime.sqlite (see test_found_object_busy_timeout.py), and a lock on an object's
    database must bite as it does on the runtime's. Runs on every wake: each wake has
    its own connection."""
    if env.busy_timeout_ms is not None:
        await ctx.storage.sql.exec(f"PRAGMA busy_timeout = {int(env.busy_timeout_ms)}")


class ChaosAlarm(DurableObject):
    """An object whose alarm is set, overwritten and deleted from outside.

    Its handler fails by plan (`alarm_failures`) and records every attempt."""

    def __init__(self, ctx: ObjectContext, env: Any) -> None:
        super().__init__(ctx, env)
        if env.busy_timeout_ms is not None:
            ctx.block_concurrency_while(lambda: set_busy_timeout(ctx, env))

    async def arm(self, at_ms: int) -> int:
        await self.ctx.storage.put("armed", at_ms)
        await self.ctx.storage.set_alarm(at_ms)
        return at_ms

    async def disarm(self) -> None:
        await self.ctx.storage.put("armed", None)
        await self.ctx.storage.delete_alarm()

    async def view(self) -> int | None:
        """The alarm as the object's own code sees it (its committed intent): the truth
        the alarm index may only ever be early against."""
        return await self.ctx.storage.get_alarm()

    async def alarm(self, info: AlarmInfo) -> None:
        env = self.env
        obj = f"ChaosAlarm/{self.ctx.id}"
        start = wall_us()
        failures = alarm_failures(env.seed, obj, info.scheduled_ms)
        ok = info.retry_count >= failures
        env.record.write(k="fire", obj=obj, at=info.scheduled_ms, retry=info.retry_count, ok=ok)
        await self.ctx.storage.put("fires", int(await self.ctx.storage.get("fires") or 0) + 1)
        env.record.span(obj, "alarm", start)
        if not ok:
            raise ChaosFault(f"{CHAOS_FAULT}: attempt {info.retry_count} of {obj} fails by plan "
                             f"({failures} failures)")


class Writer(DurableObject):
    """Plain storage writes: KV overwrites and SQL inserts."""

    def __init__(self, ctx: ObjectContext, env: Any) -> None:
        super().__init__(ctx, env)
        ctx.block_concurrency_while(self._setup)

    async def _setup(self) -> None:
        await set_busy_timeout(self.ctx, self.env)
        await self.ctx.storage.sql.exec(
            "CREATE TABLE IF NOT EXISTS rows (id TEXT PRIMARY KEY, v TEXT NOT NULL)")

    async def write(self, key: str, value: str) -> None:
        start = wall_us()
        await self.ctx.storage.put(key, value)
        self.env.record.span(f"Writer/{self.ctx.id}", "write", start)

    async def insert(self, row: str) -> None:
        start = wall_us()
        await self.ctx.storage.sql.exec("INSERT INTO rows (id, v) VALUES (?, ?)", row, row)
        self.env.record.span(f"Writer/{self.ctx.id}", "insert", start)

    async def dump(self) -> dict[str, Any]:
        rows = await self.ctx.storage.sql.exec("SELECT id FROM rows ORDER BY id")
        return {"kv": await self.ctx.storage.list(prefix="k"), "rows": [r["id"] for r in rows]}


class Sinks:
    """The outside world of the lease ledgers and click counters: it writes the record."""

    def __init__(self, record: Record) -> None:
        self.record = record

    async def lease_expired(self, ledger: str, lease_id: str, expires_ms: int) -> None:
        self.record.write(k="expire", obj=f"LeaseLedger/{ledger}", lease=lease_id,
                          expires=expires_ms)

    async def flushed(self, counter: str, count: int) -> None:
        self.record.write(k="flush", obj=f"ClickCounter/{counter}", count=count)


# -- executions ------------------------------------------------------------------------------

class ChaosServices(FestivalServices):
    """The festival's systems; every call is a recorded step body returning a nonce."""

    def __init__(self, ledger: Ledger, record: Record, seed: int) -> None:
        super().__init__(ledger)
        self.record = record
        self.seed = seed

    async def reserve_streaming(self, event_id: str) -> str:
        return self.record.body()

    async def release_streaming(self, event_id: str) -> str:  # type: ignore[override]
        return self.record.body()

    async def open_viewing_page(self, event_id: str) -> str:
        return self.record.body()

    async def close_viewing_page(self, event_id: str) -> str:  # type: ignore[override]
        step = current_step.get()
        assert step is not None
        # Doomed: every attempt of the first compensation step fails; the step an
        # operator's retry runs (another operation id) succeeds.
        if (festival_plan(self.seed, event_id).doomed
                and self.record.step_ops[(step[0], step[2])] <= {step[1]}):
            self.record.body(ok=False)
            raise ChaosFault(f"{CHAOS_FAULT}: the viewing page of {event_id} will not close")
        return self.record.body()

    async def notify_partners(self, key: str, message: str) -> str:  # type: ignore[override]
        await deliver(self.ledger, self.record, key, message)
        return self.record.body()

    async def record_cancellation(self, event_id: str, reason: str) -> str:  # type: ignore[override]
        return self.record.body()

    async def start_streaming(self, event_id: str) -> str:  # type: ignore[override]
        return self.record.body()


async def deliver(ledger: Ledger, record: Record, key: str, value: Any) -> bool:
    """A keyed delivery through the runtime's ledger, recorded before and after."""
    step = current_step.get()
    where = {"exec": step[0], "op": step[1]} if step else {}
    record.write(k="deliver", key=key, **where)
    first = await ledger.deliver(key, value)
    record.write(k="delivered", key=key, first=first, **where)
    return first


HOTEL_CONFIG = StepConfig(retry_strategy=create_retry_strategy(RetryStrategyConfig(
    max_attempts=HOTEL_ATTEMPTS, initial_delay=Duration(1), backoff_rate=1.0,
    jitter_strategy=JitterStrategy.NONE)))


def build_trip(record: Record, ledger: Ledger, seed: int) -> DurableFunction:
    """Book a flight, wait, book a hotel (flaky by plan), charge once by key; roll back
    the flight when the hotel fails for good."""

    def ok() -> str:
        return record.body()

    def book_hotel() -> str:
        step = current_step.get()
        assert step is not None
        if record.runs[(step[0], step[2])] < hotel_failures(seed, step[0]):
            record.body(ok=False)
            raise ChaosFault(f"{CHAOS_FAULT}: no room at the hotel for {step[0]}")
        return record.body()

    @durable_execution(name=TRIP)
    async def trip(event: Any, ctx: DurableContext) -> dict[str, Any]:
        saga = ctx.saga()
        await ctx.step(ok, name="book_flight")
        saga.push("book_flight", ok)
        await ctx.wait(Duration(1))
        try:
            await ctx.step(book_hotel, name="book_hotel", config=HOTEL_CONFIG)
        except StepError:
            await ctx.step(ok, name="note_failure")
            return {"status": "rolled_back", "saga": await saga.compensate()}
        saga.push("book_hotel", ok)

        async def charge() -> str:
            await deliver(ledger, record, ctx.idempotency_key("charge"), event)
            return record.body()

        await ctx.step(charge, name="charge")
        return {"status": "booked"}

    return trip


# -- the runtime -----------------------------------------------------------------------------

@dataclass(frozen=True)
class FleetNode:
    """This process as one node of a fleet on PostgreSQL."""

    dsn: str
    node: str
    nodes: int  # how many nodes run the load (each drives its share of the objects)
    lease_s: float

    @property
    def index(self) -> int:
        return int(self.node.removeprefix("n")) - 1

    def drives(self, obj: str) -> bool:
        """Whether this node makes the calls to `obj`: one caller per object keeps each
        object's calls in record order (the checker's premise), while its events run
        wherever its shard is (most calls are forwarded)."""
        return int(unit(0, "driver", obj) * self.nodes) == self.index


FLEET_SHARDS = 16


def make_runtime(data_dir: Path, record: Record, seed: int,
                 busy_timeout_s: float | None = None, fleet: FleetNode | None = None) -> Runtime:
    """The workload's runtime; `busy_timeout_s` (when locks are on) is how long its
    writes wait for a lock another connection holds, in runtime.sqlite and in the
    databases of the objects that set it (ChaosAlarm, Writer). With `fleet`: a node
    on PostgreSQL (short leases) instead of SQLite files."""
    sinks = Sinks(record)
    env = SimpleNamespace(seed=seed, record=record, expiry_sink=sinks, flush_sink=sinks,
                          busy_timeout_ms=None if busy_timeout_s is None
                          else round(busy_timeout_s * 1000))
    backend: Any = None if busy_timeout_s is None else SqliteBackend(
        data_dir, busy_timeout_s=busy_timeout_s)
    if fleet is not None:
        backend = PostgresBackend(fleet.dsn, node_id=fleet.node, shards=FLEET_SHARDS,
                                  lease_s=fleet.lease_s)
    rt = Runtime(data_dir, clock=SystemClock(), env=env, hibernate_after=0.5, max_resident=48,
                 sweep_interval=2.0, backend=backend)
    rt.register(ChaosAlarm, retry_policy=ALARM_POLICY)
    rt.register(Writer)
    rt.register(LeaseLedger)
    rt.register(ClickCounter)
    rt.register_execution(build_festival(ChaosServices(rt.ledger, record, seed), name=FESTIVAL))
    rt.register_execution(build_trip(record, rt.ledger, seed))
    return rt


FAILED: Any = object()  # what `Load.call` returns when the call raised


class Load:
    """The mixed load of one process life: workers issuing recorded calls."""

    def __init__(self, rt: Runtime, record: Record, seed: int, round_no: int,
                 fleet: FleetNode | None = None) -> None:
        self.rt = rt
        self.fleet = fleet
        self.record = record
        self.seed = seed
        self.round = round_no
        self.rng = random.Random(f"{seed}:{round_no}")
        self.locks: dict[str, asyncio.Lock] = collections.defaultdict(asyncio.Lock)
        self.ops = 0
        self.started = {FESTIVAL: 0, TRIP: 0}
        self.refused: set[str] = set()  # executions whose verdict or retry was refused
        # Retried once by this process: the status stays needs_human until the next
        # invocation runs, and a second retry would be refused.
        self.retried: set[str] = set()

    def drives(self, obj: str) -> bool:
        return self.fleet is None or self.fleet.drives(obj)

    def _op_id(self) -> str:
        self.ops += 1
        return f"{self.round}.{self.ops}"

    async def call(self, obj: str, what: str, fn: Any, **args: Any) -> Any:
        """One recorded call: intent, the call, then ack (or nack with the error; the
        call then returns `FAILED`)."""
        async with self.locks[obj]:
            op = self._op_id()
            self.record.write(k="intent", op=op, obj=obj, what=what, **args)
            try:
                result = await fn()
            except NodeUnreachable as exc:
                # Forwarded to a node that died (or did not answer) during the call: it
                # may or may not have run there, an unknown outcome like a kill's.
                self.record.write(k="unknown", op=op, error=f"{type(exc).__name__}: {exc}"[:300])
                return FAILED
            except Exception as exc:
                self.record.write(k="nack", op=op, error=f"{type(exc).__name__}: {exc}"[:300])
                return FAILED
            self.record.write(k="ack", op=op, result=result)
            return result

    # -- one operation of each kind -------------------------------------------------------

    async def alarm_op(self) -> None:
        # Skewed: low numbers are overwritten all the time, high ones are left to run
        # their whole retry ladder (and die as dead letters when they always fail).
        name = f"a{min(int(self.rng.expovariate(1 / 10)), ALARM_OBJECTS - 1)}"
        obj = f"ChaosAlarm/{name}"
        if not self.drives(obj):
            return
        stub = self.rt.get(ChaosAlarm, name)
        if self.rng.random() < 0.18:
            await self.call(obj, "delete", stub.disarm)
            return
        r = self.rng.random()
        delay = 0 if r < 0.2 else FAR_MS if r < 0.3 else self.rng.randint(50, 1500)
        at = self.rt.clock.now_ms() + delay
        while at in self.record.used_at[obj]:  # every set of one object has its own time
            at += 1
        # Taken now, not when its intent is written: another worker may pick the same
        # object and millisecond while this one waits for the object's call lock.
        self.record.used_at[obj].add(at)
        await self.call(obj, "set", lambda: stub.arm(at), at=at)

    async def writer_op(self) -> None:
        name = f"w{self.rng.randrange(WRITERS)}"
        if not self.drives(f"Writer/{name}"):
            return
        stub = self.rt.get(Writer, name)
        token = uuid.uuid4().hex[:12]
        if self.rng.random() < 0.6:
            key = f"k{self.rng.randrange(WRITER_KEYS)}"
            await self.call(f"Writer/{name}", "write", lambda: stub.write(key, token),
                            key=key, value=token)
        else:
            await self.call(f"Writer/{name}", "insert", lambda: stub.insert(token), row=token)

    async def counter_op(self) -> None:
        name = f"c{self.rng.randrange(COUNTERS)}"
        if not self.drives(f"ClickCounter/{name}"):
            return
        stub = self.rt.get(ClickCounter, name)
        n = self.rng.randint(1, 5)
        await self.call(f"ClickCounter/{name}", "hit", lambda: stub.hit(n), n=n)

    async def lease_op(self) -> None:
        name = f"l{self.rng.randrange(LEDGERS)}"
        stub = self.rt.get(LeaseLedger, name)
        lease = f"lease{self.rng.randrange(LEASES_PER_LEDGER)}"
        obj = f"LeaseLedger/{name}"
        if not self.drives(f"{obj}#{lease}"):
            return
        if self.rng.random() < 0.2:
            await self.call(f"{obj}#{lease}", "release", lambda: stub.release(lease), lease=lease)
            return
        ttl = FAR_MS if self.rng.random() < 0.1 else self.rng.randint(100, 2500)
        await self.call(f"{obj}#{lease}", "grant", lambda: stub.grant(lease, ttl), lease=lease,
                        ttl=ttl)

    async def start_op(self) -> None:
        kind = FESTIVAL if self.rng.random() < 0.5 else TRIP
        if self.started[kind] >= MAX_EXECUTIONS_PER_ROUND:
            return
        self.started[kind] += 1
        eid = f"{'fest' if kind == FESTIVAL else 'trip'}-{self.round}-{self.started[kind]}"
        event: dict[str, Any] = {"eventId": eid}
        if kind == FESTIVAL:
            event["startsInSeconds"] = festival_plan(self.seed, eid).timeout_s
        execs = self.rt.executions
        await self.call(f"Execution/{eid}", "start",
                        lambda: execs.start(kind, event, execution_id=eid), exec=eid, name=kind)

    async def worker(self) -> None:
        kinds = [(self.alarm_op, 40), (self.writer_op, 22), (self.counter_op, 14),
                 (self.lease_op, 16), (self.start_op, 3)]
        fns, weights = zip(*kinds)
        while True:
            await self.rng.choices(fns, weights)[0]()
            if self.fleet is not None:
                await asyncio.sleep(0)  # an object another node drives made no call

    # -- verdicts and operators -----------------------------------------------------------

    async def tick(self) -> int:
        """Send planned verdicts and operator retries; returns how many were sent.

        A refused one is recorded (the checker judges it) and not sent again by this
        process."""
        sent = 0
        execs = self.rt.executions
        for e in await execs.list(status="suspended", limit=100_000):
            eid = e["execution_id"]
            if (e["name"] != FESTIVAL or eid in self.refused or not self.drives(f"Execution/{eid}")
                    or festival_plan(self.seed, eid).verdict is None):
                continue
            d = await execs.describe(eid)
            for cb in d["callbacks"]:
                if cb["name"] == "verdict" and cb["status"] == "started":
                    verdict = festival_plan(self.seed, eid).verdict
                    cb_id = cb["callback_id"]
                    out = await self.call(
                        f"Execution/{eid}", "verdict",
                        lambda c=cb_id, v=verdict: execs.send_callback_success(c, v),
                        exec=eid, verdict=verdict)
                    sent += out is not FAILED
                    if out is FAILED:
                        self.refused.add(eid)
        for e in await execs.list(status="needs_human", limit=100_000):
            eid = e["execution_id"]
            if (e["name"] != FESTIVAL or eid in self.refused | self.retried
                    or not self.drives(f"Execution/{eid}")
                    or not festival_plan(self.seed, eid).operator_retries):
                continue
            d = await execs.describe(eid)
            if any(cb["kind"] == "HumanDecision" and cb["status"] == "started"
                   for cb in d["callbacks"]):  # else a decision is recorded already
                out = await self.call(f"Execution/{eid}", "retry_compensation",
                                      lambda i=eid: execs.retry_compensation(i, actor="chaos"),
                                      exec=eid)
                sent += out is not FAILED
                (self.refused if out is FAILED else self.retried).add(eid)
        return sent

    async def ticker(self) -> None:
        while True:
            await self.tick()
            await asyncio.sleep(TICK_S)  # pacing of the operator, not a wait for a timer


# -- the two modes ---------------------------------------------------------------------------

def arm(record: Record, round_no: int, boundary: BoundaryDeath) -> None:
    """Die at `boundary`, writing where to the record the instant before."""
    def died(info: dict[str, Any]) -> None:
        record.note(k="boundary", round=round_no, point=boundary.point,
                    kind=boundary.kind, nth=boundary.nth, obj=boundary.obj,
                    keys=[list(k) for k in info.get("keys") or [info.get("key")] if k],
                    extras=info.get("extras"))
    arm_boundary(boundary, died)


def arm_on_signal(record: Record, round_no: int, arm_file: Path) -> None:
    """On a fleet: SIGUSR1 arms the boundary the harness wrote to `arm_file` (a node
    is armed while it runs, among the others, rather than at its start)."""
    def armed() -> None:
        boundary = BoundaryDeath.from_json(arm_file.read_text())
        record.write(k="armed", round=round_no, boundary=json.loads(boundary.to_json()))
        arm(record, round_no, boundary)
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, armed)


async def run(data_dir: Path, record_path: Path, seed: int, round_no: int,
              boundary: BoundaryDeath | None = None,
              busy_timeout_s: float | None = None, fleet: FleetNode | None = None,
              arm_file: Path | None = None) -> None:
    """Load the runtime until killed (by the harness, or at the boundary it armed)."""
    record = Record(record_path, None if fleet is None else fleet.node)
    if arm_file is not None:
        arm_on_signal(record, round_no, arm_file)  # the harness signals after the boot line
    record.write(k="boot", mode="run", round=round_no, pid=os.getpid(),
                 boundary=None if boundary is None else json.loads(boundary.to_json()))
    if boundary is not None:
        arm(record, round_no, boundary)  # before start: recovery's commits count too
    rt = make_runtime(data_dir, record, seed, busy_timeout_s, fleet)
    try:
        await rt.start()
    except StorageError as exc:
        if busy_timeout_s is None or "locked" not in str(exc):
            raise
        # A lock held through start-up (a backup running when the service starts):
        # start fails loudly, and this process ends as a crash would, mid-recovery.
        record.write(k="start_refused", round=round_no, error=str(exc)[:300])
        os.kill(os.getpid(), signal.SIGKILL)
    record.write(k="ready", round=round_no)
    load = Load(rt, record, seed, round_no, fleet)
    tasks = [asyncio.ensure_future(load.worker()) for _ in range(WORKERS)]
    tasks.append(asyncio.ensure_future(load.ticker()))
    if fleet is not None:
        tasks.append(asyncio.ensure_future(watch_leases(rt, record)))
    await asyncio.gather(*tasks)  # until SIGKILL (a failure ends the process loudly)


async def watch_leases(rt: Runtime, record: Record) -> None:
    """On a fleet: write down when this node's lease renewals run late (past the lease,
    other nodes may take its shards while it still runs their handlers), each clean
    hand-over it starts and every change of the shards it holds, for the checker and
    for whoever reads the record."""
    backend = rt.backend
    assert isinstance(backend, PostgresBackend)
    changed = backend._changed

    def noted(gained: set[int], lost: set[int]) -> None:
        record.write(k="shards", gained=sorted(gained), lost=sorted(lost), t=wall_us())
        changed(gained, lost)

    backend._changed = noted  # type: ignore[method-assign]
    keep = backend.keep_leases_once

    async def timed() -> None:
        # A round that starts past the lease its last one wrote: the others may have
        # taken this node's shards meanwhile (written before the round finds out).
        renewed = backend.renewed_at
        age_ms = 0 if renewed is None else round((time.monotonic() - renewed) * 1000)
        if renewed is not None and age_ms > backend.lease_ms:
            record.write(k="lease_late", age_ms=age_ms, t=wall_us())
        await keep()

    backend.keep_leases_once = timed  # type: ignore[method-assign]
    hand_over = backend.hand_over

    async def handing(shards: Any, to: str | None) -> None:
        record.write(k="handover", shards=sorted(shards), to=to, t=wall_us())
        await hand_over(shards, to)

    backend.hand_over = handing  # type: ignore[method-assign]
    await asyncio.Event().wait()  # the hooks stay until the process is killed


async def settled(rt: Runtime, load: Load) -> list[str]:
    """What still keeps the run from being settled (empty: nothing)."""
    waiting: list[str] = []
    if await load.tick():
        waiting.append("verdicts or operator actions were just sent")
    horizon = rt.clock.now_ms() + SETTLE_HORIZON_MS
    for a in await rt.alarms():
        if a.state != "dead" and (a.next_attempt_ms is None or a.next_attempt_ms < horizon):
            waiting.append(f"alarm {a.object} {a.state} due {a.next_attempt_ms}")
    for e in await rt.executions.list(status="running", limit=100_000):
        # Running with no alarm: nothing will ever move it; waiting is pointless, the
        # checker reports it.
        if await rt.alarm("Execution", e["execution_id"]) is not None:
            waiting.append(f"execution {e['execution_id']} running")
    return waiting


async def dump(rt: Runtime, record: Record) -> dict[str, Any]:
    """The final state, read through the public API."""
    state: dict[str, Any] = {"now_ms": rt.clock.now_ms()}
    state["alarms"] = [a.to_dict() for a in await rt.alarms()]
    state["alarm_views"] = {f"ChaosAlarm/a{i}": await rt.get(ChaosAlarm, f"a{i}").view()
                            for i in range(ALARM_OBJECTS)}
    state["writers"] = {f"Writer/w{i}": await rt.get(Writer, f"w{i}").dump()
                        for i in range(WRITERS)}
    state["counters"] = {f"ClickCounter/c{i}": await rt.get(ClickCounter, f"c{i}").totals()
                         for i in range(COUNTERS)}
    state["leases"] = {f"LeaseLedger/l{i}": await rt.get(LeaseLedger, f"l{i}").leases()
                       for i in range(LEDGERS)}
    executions: dict[str, Any] = {}
    for eid in record.executions:
        try:
            executions[eid] = await rt.executions.describe(eid)
        except LookupError:
            executions[eid] = None
    state["executions"] = executions
    keys = {line["key"] for line in read_record(record.path) if line["k"] == "deliver"}
    state["ledger"] = {key: await rt.ledger.get(key) for key in sorted(keys)}
    return state


async def serve(data_dir: Path, record_path: Path, seed: int, fleet: FleetNode) -> None:
    """On a fleet's settle: a node with no load of its own (the settler, another node,
    sends what is owed), running the events of its shards until SIGTERM."""
    record = Record(record_path, fleet.node)
    record.write(k="boot", mode="serve", pid=os.getpid())
    rt = make_runtime(data_dir, record, seed, fleet=fleet)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await rt.start()
    record.write(k="ready", round="serve")
    await stop.wait()
    await rt.stop()
    record.close()


async def settle(data_dir: Path, record_path: Path, seed: int, state_path: Path,
                 deadline_s: float = SETTLE_DEADLINE_S, fleet: FleetNode | None = None) -> None:
    """No new load: finish what is owed, wait for quiet, write the final state."""
    record = Record(record_path, None if fleet is None else fleet.node)
    record.write(k="boot", mode="settle", pid=os.getpid())
    rt = make_runtime(data_dir, record, seed, fleet=fleet)
    await rt.start()
    record.write(k="ready", round="settle")
    load = Load(rt, record, seed, 10**6)
    loop = asyncio.get_running_loop()
    until = loop.time() + deadline_s
    quiet, waiting = 0, ["not checked yet"]
    while loop.time() < until:
        waiting = await settled(rt, load)
        quiet = 0 if waiting else quiet + 1
        if quiet >= 2:
            break
        await asyncio.sleep(TICK_S)  # polling this process's own state with a deadline
    state = await dump(rt, record)
    state["settled"] = quiet >= 2
    state["waiting"] = waiting[:20]
    await rt.stop()
    record.write(k="settled", ok=state["settled"])
    record.close()
    tmp = state_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(state_path)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.workload")
    parser.add_argument("mode", choices=["run", "settle", "serve"])
    parser.add_argument("data", type=Path)
    parser.add_argument("record", type=Path)
    parser.add_argument("seed", type=int)
    parser.add_argument("last", help="run: the round number; settle: where the state goes")
    parser.add_argument("--boundary", type=BoundaryDeath.from_json, default=None,
                        help="run: die at this write boundary (JSON, see faults.py)")
    parser.add_argument("--busy-timeout", type=float, default=None,
                        help="run: how long writes wait for another connection's lock (s)")
    parser.add_argument("--dsn", default=None, help="a fleet node on this PostgreSQL")
    parser.add_argument("--node", default="n1", help="fleet: this node's id (n1..nN)")
    parser.add_argument("--nodes", type=int, default=1, help="fleet: how many nodes run the load")
    parser.add_argument("--lease-s", type=float, default=1.5, help="fleet: the shard leases")
    parser.add_argument("--arm-file", type=Path, default=None,
                        help="fleet run: SIGUSR1 arms the boundary written in this file")
    args = parser.parse_args(argv)
    fleet = None if args.dsn is None else FleetNode(args.dsn, args.node, args.nodes, args.lease_s)
    if args.mode == "run":
        asyncio.run(run(args.data, args.record, args.seed, int(args.last), args.boundary,
                        args.busy_timeout, fleet, args.arm_file))
    elif args.mode == "serve":
        if fleet is None:
            parser.error("serve is a fleet node's mode: give --dsn")
        asyncio.run(serve(args.data, args.record, args.seed, fleet))
    else:
        asyncio.run(settle(args.data, args.record, args.seed, Path(args.last), fleet=fleet))


if __name__ == "__main__":
    main(sys.argv[1:])
