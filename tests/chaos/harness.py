"""The chaos harness: kill a loaded runtime again and again, hold its databases locked
now and then, then prove nothing acknowledged was lost.

Each round starts the workload (`workload.py`, a real runtime process on the
wall clock) on the same data folder and ends it with SIGKILL, in one of two ways
drawn from the seeded generator:

- at a record-line count: once its record has grown by a seeded number of lines
  (sometimes during start-up and crash recovery, sometimes mid-load), the harness
  kills it;
- at a write boundary (a `--boundary-share` of the rounds, a third by default):
  the workload arms a storage fault point that kills it at the Nth commit of a
  seeded kind (an object database, the alarm index, an execution log: see
  `faults.py`), before or after that commit, optionally only commits of one
  seeded object. A boundary the round never reaches falls back to a line-count
  kill.

With `--locks` (the default; `--no-locks` turns it off) the harness also takes,
at seeded record-line counts of about half the rounds, the write lock of
runtime.sqlite (or, less often, of one object's database) from a connection of
its own (``BEGIN IMMEDIATE``) and holds it for a seeded 0.5-3 s, while the
workload runs with a busy timeout of 0.3 s: its writes fail meanwhile, as under a
backup or a stray ``sqlite3`` shell. A lock still held when the round ends is let
go before the next one starts; a start-up that meets one fails and the process
dies (a `start_refused` round). The harness writes its locks into the record.

After the last round the workload runs once more in settle mode (no new load, no
faults; verdicts and operator actions still owed are sent; it waits until nothing
is due) and dumps the final state; `invariants.check` compares it with the record.

    python -m tests.chaos.harness --kills 200 --seed 7

prints the kills survived (by kind), the boundary deaths by point, the locks
held, the alarms, steps, writes and deliveries checked and the violations found,
and exits 1 when there is any (with the seed, to reproduce the run). The seed
fixes the load, the injected faults, the kill points (in record lines), the
boundaries and the locks; the exact instants still depend on the machine's speed.

    python -m tests.chaos.harness --backend postgres --nodes 3 --kills 100 --seed 3

runs it on a fleet instead (`fleet.py`): three nodes on one PostgreSQL (a
throwaway cluster unless `--dsn` names a database), leases of `--lease-s` 1.5 s,
a seeded node killed at each seeded moment and restarted under its id while the
others run on; no SQLite locks.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from alarmtop.core.storage.sqlite.backend import SqliteBackend
from tests.chaos.faults import (
    RUNTIME_DB,
    WORKLOAD_BUSY_TIMEOUT_S,
    BoundaryDeath,
    Locker,
    LockPlan,
    RecordNotes,
    boundary_plan,
    lock_plans,
)
from tests.chaos.invariants import Report, check
from tests.chaos.workload import SETTLE_DEADLINE_S, read_record

POLL_S = 0.005
# The record not growing for this long: the round is stuck. A bound on a stall, not on
# the time a round's line count takes to come: a loaded machine may be slow.
STALL_S = 60.0
BOUNDARY_FALLBACK_LINES = 1500  # a boundary not reached by then: killed by line count
BOUNDARY_SHARE = 1 / 3
ROOT = Path(__file__).resolve().parents[2]


class HarnessError(RuntimeError):
    """The harness itself could not do its job (the workload died on its own, hung...)."""


@dataclass
class Paths:
    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def record(self) -> Path:
        return self.root / "record.jsonl"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    def stderr(self, name: str) -> Path:
        return self.root / f"stderr-{name}.txt"


@dataclass(frozen=True)
class RoundPlan:
    """How one round ends and what it meets on the way."""

    kill_after: int  # record lines (a boundary round's fallback)
    boundary: BoundaryDeath | None = None
    locks: tuple[LockPlan, ...] = ()


def plan_round(rng: random.Random, boundary_share: float, locks: bool) -> RoundPlan:
    if rng.random() < boundary_share:
        plan = RoundPlan(BOUNDARY_FALLBACK_LINES, boundary_plan(rng))
    else:
        plan = RoundPlan(kill_target(rng))
    if locks:
        # A boundary round's length is unknown: most die within a few hundred lines.
        span = 300 if plan.boundary is not None else plan.kill_after
        plan = RoundPlan(plan.kill_after, plan.boundary, tuple(lock_plans(rng, span)))
    return plan


def lines_from(path: Path, offset: int) -> list[dict[str, object]]:
    """The record's whole lines after byte `offset` (a torn last one is left out)."""
    with path.open("rb") as f:
        f.seek(offset)
        chunk = f.read()
    out: list[dict[str, object]] = []
    for raw in chunk.split(b"\n"):
        try:
            out.append(json.loads(raw))
        except ValueError:
            continue
    return out


class LineCounter:
    """Counts the record's lines incrementally (the file only grows)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.lines = 0

    def count(self) -> int:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return 0
        self.offset += len(chunk)
        self.lines += chunk.count(b"\n")
        return self.lines


def _spawn(args: list[str], stderr: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with stderr.open("ab") as err:
        return subprocess.Popen([sys.executable, "-m", "tests.chaos.workload", *args],
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, env=env)


def _tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except FileNotFoundError:
        return "(no stderr)"


def kill_target(rng: random.Random) -> int:
    """How many record lines a round may add before its kill.

    A few lines: during start-up and crash recovery; more: in the middle of the load."""
    r = rng.random()
    if r < 0.15:
        return rng.randint(1, 4)
    if r < 0.6:
        return rng.randint(5, 120)
    return rng.randint(120, 900)


def db_path(paths: Paths, db: str) -> Path:
    if db == RUNTIME_DB:
        return paths.data / "runtime.sqlite"
    cls, name = db.split("/", 1)
    return SqliteBackend(paths.data).object_path(cls, name)


def kill_round(paths: Paths, seed: int, round_no: int, plan: RoundPlan, counter: LineCounter,
               notes: RecordNotes, busy_timeout_s: float | None) -> str:
    """Start the workload; take the round's locks when the record has grown to their
    line counts; end it by SIGKILL at its line count, unless it dies first at the
    boundary it armed (or at a start-up a lock refused). Returns how it ended:
    "lines", "boundary" or "start_refused"."""
    start_lines, start_offset = counter.count(), counter.offset
    target = start_lines + plan.kill_after
    args = ["run", str(paths.data), str(paths.record), str(seed), str(round_no)]
    if plan.boundary is not None:
        args += ["--boundary", plan.boundary.to_json()]
    if busy_timeout_s is not None:
        args += ["--busy-timeout", str(busy_timeout_s)]
    stderr = paths.stderr(f"round{round_no}")
    proc = _spawn(args, stderr)
    pending = list(plan.locks)
    lockers: list[Locker] = []
    seen, deadline = start_lines, time.monotonic() + STALL_S
    died = False
    try:
        while (lines := counter.count()) < target:
            if proc.poll() is not None:
                died = True
                break
            if lines > seen:  # progress, however slow: the target comes, lines only grow
                seen, deadline = lines, time.monotonic() + STALL_S
            while pending and lines - start_lines >= pending[0].after_lines:
                lp = pending.pop(0)
                locker = Locker(f"{round_no}.{len(lockers)}", lp.db, db_path(paths, lp.db),
                                lp.hold_s, notes)
                locker.start()
                lockers.append(locker)
            if time.monotonic() > deadline:
                raise HarnessError(f"round {round_no}: the record stopped growing for "
                                   f"{STALL_S:g} s at {lines} lines, short of {target}:\n"
                                   f"{_tail(stderr)}")
            time.sleep(POLL_S)  # polling another process, with a deadline
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        # A lock outliving its round would meet the next start-up every time: let go.
        for locker in lockers:
            locker.release()
        for locker in lockers:
            locker.join()
    if not died:
        return "lines"
    kinds = {line["k"] for line in lines_from(paths.record, start_offset)
             if line.get("round") == round_no}
    if proc.returncode == -signal.SIGKILL and "boundary" in kinds:
        return "boundary"
    if proc.returncode == -signal.SIGKILL and "start_refused" in kinds and lockers:
        return "start_refused"
    raise HarnessError(f"round {round_no}: the workload exited by itself "
                       f"(code {proc.returncode}):\n{_tail(stderr)}")


def settle(paths: Paths, seed: int) -> dict[str, object]:
    """Run the workload to quiet and read back its final state."""
    proc = _spawn(["settle", str(paths.data), str(paths.record), str(seed), str(paths.state)],
                  paths.stderr("settle"))
    try:
        proc.wait(timeout=SETTLE_DEADLINE_S + 60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise HarnessError(f"settle did not finish:\n{_tail(paths.stderr('settle'))}") from None
    if proc.returncode != 0:
        raise HarnessError(f"settle failed (code {proc.returncode}):\n"
                           f"{_tail(paths.stderr('settle'))}")
    state: dict[str, object] = json.loads(paths.state.read_text())
    return state


def run(seed: int, kills: int, workdir: Path, progress: bool = False, *,
        boundary_share: float = BOUNDARY_SHARE, locks: bool = True,
        plans: list[RoundPlan] | None = None) -> Report:
    """`kills` SIGKILL rounds and a settle on one data folder; the invariants' report.

    `plans` replaces the seeded rounds (tests use it to make sure a short run meets
    each kind of fault)."""
    paths = Paths(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    counter = LineCounter(paths.record)
    notes = RecordNotes(paths.record)
    busy_timeout_s = WORKLOAD_BUSY_TIMEOUT_S if locks else None
    ends: dict[str, int] = {}
    started = time.monotonic()
    for round_no in range(kills):
        plan = plans[round_no] if plans is not None else plan_round(rng, boundary_share, locks)
        end = kill_round(paths, seed, round_no, plan, counter, notes, busy_timeout_s)
        ends[end] = ends.get(end, 0) + 1
        if progress and (round_no + 1) % 10 == 0:
            how = ", ".join(f"{k} {v}" for k, v in sorted(ends.items()))
            print(f"  {round_no + 1}/{kills} kills ({how}), {counter.count()} record lines, "
                  f"{time.monotonic() - started:.0f} s", flush=True)
    state = settle(paths, seed)
    return check(read_record(paths.record), state, seed, kills=kills)


def repro(seed: int, kills: int, boundary_share: float = BOUNDARY_SHARE,
          locks: bool = True, fleet: str = "") -> str:
    extra = "" if boundary_share == BOUNDARY_SHARE else f" --boundary-share {boundary_share:g}"
    return (f"python -m tests.chaos.harness{fleet} --kills {kills} --seed {seed}{extra}"
            f"{'' if locks or fleet else ' --no-locks'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=200, help="SIGKILL rounds (default 200)")
    parser.add_argument("--seed", type=int, default=None, help="seed (default: random, printed)")
    parser.add_argument("--dir", type=Path, default=None,
                        help="work folder (default: a temporary one, removed on success)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--boundary-share", type=float, default=BOUNDARY_SHARE,
                        help="the share of rounds that die at a write boundary rather than "
                             "at a line count (default 1/3)")
    parser.add_argument("--locks", action=argparse.BooleanOptionalAction, default=True,
                        help="hold runtime.sqlite or an object database locked for 0.5-3 s at "
                             "seeded moments, with a 0.3 s busy timeout in the workload "
                             "(default: on; SQLite only)")
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite",
                        help="sqlite: one runtime process on a data folder (default); "
                             "postgres: a fleet of --nodes processes on one database, one "
                             "node killed and restarted at a time (tests/chaos/fleet.py)")
    parser.add_argument("--nodes", type=int, default=None,
                        help="postgres: how many nodes (default 3)")
    parser.add_argument("--dsn", default=None,
                        help="postgres: an empty database to run on (default: a throwaway "
                             "cluster started for the run, tests/pg.py)")
    parser.add_argument("--lease-s", type=float, default=None,
                        help="postgres: the nodes' shard leases in s (default 1.5: short, "
                             "so failovers happen within the run)")
    args = parser.parse_args(argv)
    if not 0 <= args.boundary_share <= 1:
        parser.error("--boundary-share is a fraction between 0 and 1")
    fleet = args.backend == "postgres"
    if not fleet and (args.nodes, args.dsn, args.lease_s) != (None, None, None):
        parser.error("--nodes, --dsn and --lease-s are for --backend postgres")
    if fleet and args.nodes is not None and args.nodes < 2:
        parser.error("--nodes: a fleet has at least 2 nodes")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    workdir = args.dir or Path(tempfile.mkdtemp(prefix=f"chaos-{seed}-"))
    started = time.monotonic()
    errors: tuple[type[Exception], ...] = (HarnessError,)
    if fleet:
        from tests.chaos import fleet as chaos_fleet
        # Run as a script, this module is __main__: `fleet` raises the imported one's.
        errors += (chaos_fleet.HarnessError,)

        nodes = args.nodes or chaos_fleet.DEFAULT_NODES
        lease_s = args.lease_s or chaos_fleet.DEFAULT_LEASE_S
        again = repro(seed, args.kills, args.boundary_share, fleet=(
            f" --backend postgres --nodes {nodes} --lease-s {lease_s:g}"))
        print(f"chaos: seed {seed}, {args.kills} kills on a fleet of {nodes} nodes on "
              f"PostgreSQL (leases {lease_s:g} s), boundary share {args.boundary_share:.2f}, "
              f"work folder {workdir}", flush=True)
    else:
        again = repro(seed, args.kills, args.boundary_share, args.locks)
        print(f"chaos: seed {seed}, {args.kills} kills, boundary share "
              f"{args.boundary_share:.2f}, locks {'on' if args.locks else 'off'}, work folder "
              f"{workdir}", flush=True)
    try:
        if fleet:
            with chaos_fleet.database(args.dsn) as dsn:
                report = chaos_fleet.run(seed, args.kills, workdir, dsn, nodes=nodes,
                                         lease_s=lease_s, boundary_share=args.boundary_share,
                                         progress=True)
        else:
            report = run(seed, args.kills, workdir, progress=True,
                         boundary_share=args.boundary_share, locks=args.locks)
    except errors as exc:
        print(f"HARNESS ERROR (seed {seed}): {exc}\nreproduce: {again}")
        return 2
    print(report.summary())
    print(f"time: {time.monotonic() - started:.0f} s")
    for v in report.violations[:50]:
        print(f"  VIOLATION: {v}")
    if report.violations:
        print(f"FAILED with seed {seed}; data kept in {workdir}; reproduce: {again}")
        return 1
    if args.dir is None and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
