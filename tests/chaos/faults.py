"""The harness's deterministic faults: a death at a write boundary, and a transient lock.

A SIGKILL at a random moment rarely lands between two writes. A *boundary death*
puts it there: the workload process arms one of the storage layer's fault points
(`alarmtop.core.storage.faultpoints`) to SIGKILL itself at the Nth commit of a
chosen kind, optionally only commits that concern one chosen object:

- ``object``: an object database's commit (points ``object.commit.before/after``);
- ``state``: SQLite's record of whether the runtime database was closed cleanly,
  written at start-up (``index.state.before/after``);
- ``index``: any commit of the runtime database (``index.commit.before/after``:
  alarm rows, wake hints, attempt starts and ends);
- ``execlog``: a runtime-database commit that carries other writes with it and no
  alarm row but an execution's: an execution's log checkpoint (alone, or with the
  execution's alarm), a keyed delivery of the ledger.

The workload writes a ``boundary`` line to its record the instant before it dies,
so the checker knows which boundary each such round ended on.

A *transient lock* is another connection holding the write lock of a database
(``BEGIN IMMEDIATE``) for a while, as a backup or a stray ``sqlite3`` shell does:
the workload runs with a busy timeout shorter than the hold, so its writes fail
with "database is locked" meanwhile. The harness writes a ``lock`` line to the
record before it asks for the lock and an ``unlock`` line (with the wall-clock
window it held it) after it let go, so the checker can tell which failures a lock
explains: in record order, anything the lock made fail lies between the two lines.

Everything is drawn from the harness's seeded generator.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alarmtop.core.storage.faultpoints import FAULT_POINTS, POINTS, kill

KINDS = {"object": ("object.commit.before", "object.commit.after"),
         "index": ("index.commit.before", "index.commit.after"),
         "execlog": ("index.commit.before", "index.commit.after"),
         # SQLite's record of a clean stop, written at start-up (and at a clean stop):
         # on a fleet it is never hit, and the round falls back to a line count.
         "state": ("index.state.before", "index.state.after")}
# Objects a boundary death may be aimed at, and whose databases a lock may take: the
# workload's busiest (its alarm names are skewed towards low numbers).
ALARM_TARGETS = [f"ChaosAlarm/a{i}" for i in range(10)]
WRITER_TARGETS = [f"Writer/w{i}" for i in range(12)]
OTHER_TARGETS = [f"LeaseLedger/l{i}" for i in range(6)] + [f"ClickCounter/c{i}" for i in range(6)]
RUNTIME_DB = "runtime"
LOCK_HOLD_S = (0.5, 3.0)
LOCK_WAIT_S = 10.0  # how long the lock taker itself waits for a writer in the way
WORKLOAD_BUSY_TIMEOUT_S = 0.3  # what the workload runs with while locks are on


def wall_ms() -> int:
    """The wall clock in ms, as the runtime's SystemClock stamps attempts (the harness is
    not runtime code: it compares its lock windows with those stamps)."""
    return int(time.time() * 1000)


@dataclass(frozen=True)
class BoundaryDeath:
    """Die at the `nth` hit of `point` among the commits of `kind` (for `obj`, if set)."""

    point: str
    kind: str
    nth: int
    obj: str | None = None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> BoundaryDeath:
        spec = BoundaryDeath(**json.loads(text))
        if spec.point not in POINTS or spec.point not in KINDS.get(spec.kind, ()):
            raise ValueError(f"no such boundary: {spec.kind} at {spec.point}")
        return spec

    def matches(self, info: dict[str, Any]) -> bool:
        """Whether a hit of the armed point is one of the commits this death counts."""
        want = None if self.obj is None else tuple(self.obj.split("/", 1))
        if self.kind == "state":
            return True
        if self.kind == "object":
            return want is None or tuple(info.get("key") or ()) == want
        keys = [tuple(k) for k in info.get("keys") or ()]
        if self.kind == "execlog" and not (
                info.get("extras", 0) > 0 and all(k[0] == "Execution" for k in keys)):
            return False
        return want is None or want in keys


def boundary_plan(rng: random.Random) -> BoundaryDeath:
    """A seeded boundary: which kind of commit, which side of it, which hit."""
    kind = rng.choices(["object", "index", "execlog", "state"], [0.4, 0.33, 0.22, 0.05])[0]
    point = rng.choice(KINDS[kind])
    if kind == "state":
        return BoundaryDeath(point, kind, 1)  # the start-up's record
    obj: str | None = None
    if kind != "execlog" and rng.random() < 0.5:
        pool = ALARM_TARGETS + WRITER_TARGETS + OTHER_TARGETS
        obj = rng.choice(pool)
    if obj is not None or kind == "execlog":
        nth = 1 + min(int(rng.expovariate(1 / 2)), 7)  # few such commits per round
    else:
        # Small: during start-up and crash recovery; larger: in the middle of the load.
        nth = 1 + min(int(rng.expovariate(1 / 40)), 400)
    return BoundaryDeath(point, kind, nth, obj)


def arm_boundary(spec: BoundaryDeath, before_death: Callable[[dict[str, Any]], None]) -> None:
    """In the workload: SIGKILL this process at the `spec.nth` matching hit, right after
    `before_death(info)` (which records where it died). Index points are hit on the
    runtime database's thread, hence the lock around the count."""
    hits = [0]
    count_lock = threading.Lock()

    def action(info: dict[str, Any]) -> None:
        if not spec.matches(info):
            return
        with count_lock:
            hits[0] += 1
            now = hits[0]
        if now == spec.nth:
            before_death(info)
            kill(info)

    FAULT_POINTS.arm(spec.point, action)


# -- transient locks --------------------------------------------------------------------------

@dataclass(frozen=True)
class LockPlan:
    """Take the write lock of `db` once the round's record has grown `after_lines`, for
    `hold_s` (or until the round ends, whichever is first)."""

    after_lines: int
    db: str  # RUNTIME_DB or "Class/name"
    hold_s: float


def lock_plans(rng: random.Random, round_lines: int) -> list[LockPlan]:
    """The locks of a round expected to write about `round_lines` record lines: none in
    about half the rounds, else one or two, taken before the round ends (a few at
    its very start, while the runtime starts and recovers); most on runtime.sqlite,
    some on the database of an object whose code sets the short busy timeout
    (`workload.set_busy_timeout`)."""
    n = rng.choices([0, 1, 2], [0.5, 0.35, 0.15])[0]
    plans = []
    for _ in range(n):
        db = RUNTIME_DB if rng.random() < 0.7 else rng.choice(ALARM_TARGETS + WRITER_TARGETS)
        after = rng.randint(1, 4) if rng.random() < 0.1 else rng.randint(1, max(1, round_lines))
        plans.append(LockPlan(after, db, round(rng.uniform(*LOCK_HOLD_S), 2)))
    return sorted(plans, key=lambda p: p.after_lines)


class RecordNotes:
    """Lines the harness adds to the workload's record (O_APPEND: each line lands whole
    between the workload's own; fsync'd like them)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def write(self, **line: Any) -> None:
        data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                if os.write(fd, data) != len(data):
                    raise OSError(f"short write to the chaos record {self.path}")
                os.fsync(fd)
            finally:
                os.close(fd)


class Locker(threading.Thread):
    """Holds the write lock of one database file from another connection.

    Opens the file read-write without creating it: an object that has no database
    yet is skipped (a file made here would be an empty database the runtime never
    made). The hold ends early when `release()` is called (the round ended)."""

    def __init__(self, lock_id: str, db: str, path: Path, hold_s: float,
                 notes: RecordNotes) -> None:
        super().__init__(name=f"chaos-lock-{lock_id}", daemon=True)
        self.lock_id = lock_id
        self.db = db
        self.path = path
        self.hold_s = hold_s
        self.notes = notes
        self._let_go = threading.Event()
        self.held_ms: int | None = None  # how long it held the lock, once done

    def release(self) -> None:
        self._let_go.set()

    def run(self) -> None:
        if not self.path.exists():
            self.notes.write(k="unlock", id=self.lock_id, db=self.db, skipped="no database")
            return
        self.notes.write(k="lock", id=self.lock_id, db=self.db)
        try:
            conn = sqlite3.connect(f"file:{self.path}?mode=rw", uri=True, timeout=LOCK_WAIT_S,
                                   isolation_level=None)
        except sqlite3.Error as exc:
            self.notes.write(k="unlock", id=self.lock_id, db=self.db, skipped=str(exc))
            return
        try:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                self.notes.write(k="unlock", id=self.lock_id, db=self.db, skipped=str(exc))
                return
            start = wall_ms()
            self._let_go.wait(self.hold_s)  # holding the lock is the point: a timed wait
            conn.execute("ROLLBACK")
            end = wall_ms()
            self.held_ms = end - start
            self.notes.write(k="unlock", id=self.lock_id, db=self.db, from_ms=start,
                             to_ms=end)
        finally:
            conn.close()
