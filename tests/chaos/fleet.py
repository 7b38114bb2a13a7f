"""The chaos harness on a fleet: N workload nodes on one PostgreSQL, one killed at a time.

`harness.py --backend postgres --nodes N` comes here. Nodes n1..nN each run the
workload (`workload.py run --dsn ...`) on the same database with short shard
leases; each drives its share of the objects (one caller per object), and its
calls run wherever the object's shard is owned (most are forwarded). All append
to one record (each line one O_APPEND write, tagged with its node).

Each kill picks a seeded node and ends it with SIGKILL, in one of two ways:

- at a record-line count: once the record (all nodes') has grown by a seeded
  number of lines;
- at a write boundary (a `--boundary-share` of the kills): the harness writes a
  seeded boundary (`faults.py`: an object commit or an alarm-index or
  execution-log commit of the PostgreSQL backend, before or after it) to the
  node's arm file and sends it SIGUSR1; the node dies at that commit. One not
  reached within `BOUNDARY_FALLBACK_LINES` falls back to a line-count kill.

The harness writes a ``kill`` line, then restarts the node under the same id
(its epochs move on: fencing), at once or after a seeded pause of up to twice
the lease (the other nodes take its shards over meanwhile, and give some back).
The others keep running throughout. SQLite's locks do not apply here.

Then every node is killed a last time and the fleet settles: n1 in settle mode
(it sends what is owed, waits until nothing is due fleet-wide, dumps the state),
the others serving their shards; `invariants.check` then judges the record and
the state as on SQLite, plus the fleet's own invariant (no two nodes ran one
object's handlers at once).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.chaos.faults import RecordNotes, boundary_plan
from tests.chaos.harness import (
    BOUNDARY_FALLBACK_LINES,
    POLL_S,
    ROOT,
    HarnessError,
    LineCounter,
    Paths,
    RoundPlan,
    kill_target,
    lines_from,
)
from tests.chaos.invariants import Report, check
from tests.chaos.workload import SETTLE_DEADLINE_S, read_record

DEFAULT_NODES = 3
DEFAULT_LEASE_S = 1.5
# The record not growing for this long: stuck. A bound on a stall, not on the time a
# kill's line count takes to come: a loaded machine may be slow, never stopped.
STALL_S = 45.0
READY_S = 60.0


@dataclass(frozen=True)
class FleetKill:
    """One kill: which node, how it dies, how long it stays down."""

    node: int  # 0-based
    plan: RoundPlan
    down_s: float


def plan_kill(rng: random.Random, nodes: int, boundary_share: float,
              lease_s: float) -> FleetKill:
    node = rng.randrange(nodes)
    if rng.random() < boundary_share:
        plan = RoundPlan(BOUNDARY_FALLBACK_LINES, boundary_plan(rng))
    else:
        plan = RoundPlan(kill_target(rng))
    down = 0.0 if rng.random() < 0.6 else round(rng.uniform(0.0, 2 * lease_s), 2)
    return FleetKill(node, plan, down)


class Fleet:
    """The node processes of one run, by node id."""

    def __init__(self, paths: Paths, seed: int, dsn: str, nodes: int, lease_s: float) -> None:
        self.paths = paths
        self.seed = seed
        self.dsn = dsn
        self.nodes = nodes
        self.lease_s = lease_s
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.lives = 0  # process lives so far: each gets its own round number
        self.booted_from: dict[str, tuple[int, int]] = {}  # node -> (round, record offset)

    @staticmethod
    def node_id(index: int) -> str:
        return f"n{index + 1}"

    def arm_file(self, node: str) -> Path:
        return self.paths.root / f"arm-{node}.json"

    def spawn(self, node: str, mode: str, *extra: str) -> subprocess.Popen[bytes]:
        data = self.paths.root / f"data-{node}"
        data.mkdir(parents=True, exist_ok=True)
        args = [mode, str(data), str(self.paths.record), str(self.seed), *extra,
                "--dsn", self.dsn, "--node", node, "--nodes", str(self.nodes),
                "--lease-s", str(self.lease_s)]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with self.paths.stderr(node).open("ab") as err:
            proc = subprocess.Popen([sys.executable, "-m", "tests.chaos.workload", *args],
                                    cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, env=env)
        self.procs[node] = proc
        return proc

    def start(self, node: str) -> None:
        round_no = self.lives
        self.lives += 1
        size = self.paths.record.stat().st_size if self.paths.record.exists() else 0
        self.booted_from[node] = (round_no, size)
        self.spawn(node, "run", str(round_no), "--arm-file", str(self.arm_file(node)))

    def wait_booted(self, node: str) -> None:
        """Until the node's current process wrote its boot line: it takes SIGUSR1 from
        then on (before, the signal would kill it)."""
        round_no, offset = self.booted_from[node]
        deadline = time.monotonic() + READY_S
        while not any(line["k"] == "boot" and line.get("round") == round_no
                      for line in lines_from(self.paths.record, offset)):
            self.check_alive()
            if time.monotonic() > deadline:
                raise HarnessError(f"node {node} did not boot within {READY_S:g} s:\n"
                                   f"{tail(self.paths.stderr(node))}")
            time.sleep(0.02)  # polling another process, with a deadline

    def kill(self, node: str) -> int | None:
        proc = self.procs.pop(node)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        return proc.wait()

    def check_alive(self, skip: str | None = None) -> None:
        for node, proc in self.procs.items():
            if node != skip and proc.poll() is not None:
                raise HarnessError(f"node {node} exited by itself (code {proc.returncode}):\n"
                                   f"{tail(self.paths.stderr(node))}")

    def stop_all(self) -> None:
        for node in list(self.procs):
            self.kill(node)


def tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except FileNotFoundError:
        return "(no stderr)"


SESSIONS_SQL = (
    "SELECT pid, application_name, state, wait_event_type, wait_event, "
    "round(extract(epoch FROM now() - xact_start)::numeric, 1) AS xact_s, "
    "pg_blocking_pids(pid) AS blocked_by, left(regexp_replace(query, '\\s+', ' ', 'g'), 140) "
    "AS query FROM pg_stat_activity WHERE datname IS NOT NULL AND pid <> pg_backend_pid() "
    "ORDER BY xact_start NULLS LAST")


def sessions(dsn: str) -> str:
    """What every session of the database is doing (a stuck fleet's diagnosis)."""
    from tests import pg

    bin_dir = pg.binaries()
    psql = str(bin_dir / "psql") if bin_dir is not None else "psql"
    try:
        out = subprocess.run([psql, dsn, "-X", "-c", SESSIONS_SQL], capture_output=True,
                             text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(psql failed: {exc})"
    return (out.stdout + out.stderr)[-6000:]


def wait_ready(paths: Paths, node: str, mode: str = "run") -> None:
    """Until `node` wrote its ready line (the first start: it makes the schema)."""
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if any(line["k"] == "ready" and line.get("node") == node
               for line in read_record(paths.record)):
            return
        time.sleep(0.05)  # polling another process, with a deadline
    raise HarnessError(f"node {node} was not ready within {READY_S:g} s:\n"
                       f"{tail(paths.stderr(node))}")


def kill_one(fleet: Fleet, kill_no: int, kill: FleetKill, counter: LineCounter,
             notes: RecordNotes) -> str:
    """Kill one node as planned and restart it; "lines" or "boundary"."""
    node = fleet.node_id(kill.node)
    proc = fleet.procs[node]
    start_lines = counter.count()
    target = start_lines + kill.plan.kill_after
    if kill.plan.boundary is not None:
        fleet.wait_booted(node)
        fleet.arm_file(node).write_text(kill.plan.boundary.to_json())
        os.kill(proc.pid, signal.SIGUSR1)
    seen, deadline = start_lines, time.monotonic() + STALL_S
    died = False
    while (lines := counter.count()) < target:
        if proc.poll() is not None:
            died = True
            break
        fleet.check_alive(skip=node)
        if lines > seen:  # progress, however slow: the target comes, the lines only grow
            seen, deadline = lines, time.monotonic() + STALL_S
        if time.monotonic() > deadline:
            raise HarnessError(f"kill {kill_no}: the record stopped growing for {STALL_S:g} s "
                               f"at {lines} lines, short of {target}:\n"
                               f"{tail(fleet.paths.stderr(node))}"
                               f"\nPostgreSQL meanwhile:\n{sessions(fleet.dsn)}")
        time.sleep(POLL_S)  # polling other processes, with a deadline
    code = fleet.kill(node)
    how = "lines"
    if died:
        if code != -signal.SIGKILL or kill.plan.boundary is None:
            raise HarnessError(f"kill {kill_no}: node {node} exited by itself (code {code}):\n"
                               f"{tail(fleet.paths.stderr(node))}")
        how = "boundary"
    notes.write(k="kill", node=node, kill=kill_no, how=how, down_s=kill.down_s,
                t=time.time_ns() // 1000)
    if kill.down_s:
        deadline = time.monotonic() + kill.down_s
        while time.monotonic() < deadline:
            fleet.check_alive()
            time.sleep(0.05)  # the node stays down this long, the others run on
    fleet.start(node)
    return how


def settle_fleet(fleet: Fleet, notes: RecordNotes) -> dict[str, object]:
    """Kill every node, then n1 settles while the others serve; n1's final state."""
    for node in list(fleet.procs):
        fleet.kill(node)
        notes.write(k="kill", node=node, kill="settle", how="settle", down_s=0,
                    t=time.time_ns() // 1000)
    paths = fleet.paths
    helpers = [fleet.node_id(i) for i in range(1, fleet.nodes)]
    for node in helpers:
        fleet.spawn(node, "serve", "-")
    settler = fleet.spawn("n1", "settle", str(paths.state))
    try:
        settler.wait(timeout=SETTLE_DEADLINE_S + 60)
    except subprocess.TimeoutExpired:
        raise HarnessError(f"settle did not finish:\n{tail(paths.stderr('n1'))}") from None
    finally:
        fleet.procs.pop("n1", None)
        if settler.poll() is None:
            settler.kill()
            settler.wait()
        for node in helpers:
            proc = fleet.procs.pop(node)
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    if settler.returncode != 0:
        raise HarnessError(f"settle failed (code {settler.returncode}):\n"
                           f"{tail(paths.stderr('n1'))}")
    state: dict[str, object] = json.loads(paths.state.read_text())
    return state


@contextlib.contextmanager
def database(dsn: str | None) -> Iterator[str]:
    """The DSN given, or a throwaway PostgreSQL cluster's for the run."""
    if dsn is not None:
        yield dsn
        return
    from tests import pg

    with pg.cluster() as cluster:
        yield cluster.dsn


def run(seed: int, kills: int, workdir: Path, dsn: str, *, nodes: int = DEFAULT_NODES,
        lease_s: float = DEFAULT_LEASE_S, boundary_share: float = 1 / 3,
        progress: bool = False, plans: list[FleetKill] | None = None) -> Report:
    """`kills` node kills and restarts on a fleet, a settle; the invariants' report.

    `dsn` must name an empty database (or one this run's earlier nodes made);
    `plans` replaces the seeded kills (tests use it to meet each kind of death)."""
    if nodes < 2:
        raise ValueError("a fleet has at least 2 nodes")
    paths = Paths(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    counter = LineCounter(paths.record)
    notes = RecordNotes(paths.record)
    fleet = Fleet(paths, seed, dsn, nodes, lease_s)
    ends: dict[str, int] = {}
    started = time.monotonic()
    try:
        fleet.start("n1")
        wait_ready(paths, "n1")  # the first node makes the schema and the shards
        for i in range(1, nodes):
            fleet.start(fleet.node_id(i))
        for kill_no in range(kills):
            kill = plans[kill_no] if plans is not None else plan_kill(rng, nodes,
                                                                      boundary_share, lease_s)
            end = kill_one(fleet, kill_no, kill, counter, notes)
            ends[end] = ends.get(end, 0) + 1
            if progress and (kill_no + 1) % 10 == 0:
                how = ", ".join(f"{k} {v}" for k, v in sorted(ends.items()))
                print(f"  {kill_no + 1}/{kills} kills ({how}), {counter.count()} record "
                      f"lines, {time.monotonic() - started:.0f} s", flush=True)
        state = settle_fleet(fleet, notes)
    finally:
        fleet.stop_all()
    return check(read_record(paths.record), state, seed, kills=kills)
