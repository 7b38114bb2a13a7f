"""The short chaos run on a fleet: three nodes on one PostgreSQL, killed one at a time.

The long run is `python -m tests.chaos.harness --backend postgres --nodes 3 --kills
100 --seed N`. This one fixes its kills (`KILLS`) so that every run meets each kind
of death on a fleet: SIGKILLs at record-line counts (one while the node starts and
recovers, one that keeps the node down past its lease, so the others take its
shards over), and deaths before and after an object commit, an alarm-index commit
and an execution-log commit of the PostgreSQL backend. The seed still drives the
load and its planned failures: set CHAOS_SEED to rerun it with another.

Then the checker's fleet invariant is checked itself: a handler run made to overlap
another node's must be reported.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from typing import Any

import pytest

from tests import pg
from tests.chaos.faults import BoundaryDeath
from tests.chaos.fleet import FleetKill, run
from tests.chaos.harness import BOUNDARY_FALLBACK_LINES, RoundPlan
from tests.chaos.invariants import check
from tests.chaos.test_chaos import (
    deliver_twice,
    drop_pending_alarm,
    fire_after_replacement,
    lose_kv_write,
)
from tests.chaos.workload import read_record
from tests.conftest import RESET_SQL

SEED = int(os.environ.get("CHAOS_SEED", "20260601"))
NODES = 3
LEASE_S = 1.5


def _boundary(node: int, point: str, kind: str, nth: int) -> FleetKill:
    return FleetKill(node, RoundPlan(BOUNDARY_FALLBACK_LINES, BoundaryDeath(point, kind, nth)),
                     0.0)


KILLS = [
    FleetKill(0, RoundPlan(300), 0.0),
    _boundary(1, "object.commit.after", "object", 40),
    FleetKill(2, RoundPlan(400), 2.5),  # down past its lease: its shards move
    _boundary(0, "index.commit.before", "index", 60),
    _boundary(1, "index.commit.after", "execlog", 1),
    FleetKill(1, RoundPlan(3), 0.0),  # while it starts again and recovers
    _boundary(2, "object.commit.before", "object", 30),
]

Lines = list[dict[str, Any]]
State = dict[str, Any]


@pytest.fixture(scope="module")
def fleet_run(pg_cluster: pg.Cluster, tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[Lines, State]:
    pg_cluster.run(str(pg_cluster.bin / "psql"), "-h", "127.0.0.1", "-p", str(pg_cluster.port),
                   "-U", "postgres", "-q", "-v", "ON_ERROR_STOP=1", "-c", RESET_SQL)
    workdir = tmp_path_factory.mktemp("chaos-fleet")
    report = run(SEED, len(KILLS), workdir, pg_cluster.dsn, nodes=NODES, lease_s=LEASE_S,
                 plans=KILLS)
    print(report.summary())  # shown with -s, and on failure
    assert not report.violations, (
        f"fleet chaos seed {SEED}: {len(report.violations)} violations; reproduce with "
        f"`CHAOS_SEED={SEED} pytest {__file__}`:\n" + "\n".join(report.violations[:30]))
    # The run must have exercised what it claims to check.
    assert report.kills == len(KILLS), report.summary()
    assert set(report.fleet_kills) == {"n1", "n2", "n3"}, report.summary()
    assert sum(report.boundary_deaths.values()) >= 2, report.summary()
    assert report.alarms_checked >= 30 and report.steps_checked >= 5, report.summary()
    assert report.writes_checked >= 30 and report.spans_checked >= 20, report.summary()
    state: State = json.loads((workdir / "state.json").read_text())
    return read_record(workdir / "record.jsonl"), state


@pytest.mark.timeout(240)
def test_node_deaths_lose_nothing_acknowledged(fleet_run: tuple[Lines, State]) -> None:
    lines, state = fleet_run
    assert state["settled"], state["waiting"]
    nodes = {line.get("node") for line in lines if line["k"] == "ack"}
    assert nodes == {"n1", "n2", "n3"}  # every node acknowledged calls
    assert not check(lines, state, SEED, len(KILLS)).violations


def overlap_handlers(lines: Lines, state: State) -> str:
    """Another node ran one object's handler while the first still ran it."""
    span = next((x for x in lines if x["k"] == "span"), None)
    if span is None:
        pytest.skip(f"this run had no handler span (seed {SEED})")
    other = "n2" if span.get("node") != "n2" else "n3"
    lines.append(dict(span, node=other, t0=span["t0"] + 1, t1=span["t1"] + 5))
    return "handlers ran on two nodes at once"


DAMAGE = [overlap_handlers, drop_pending_alarm, fire_after_replacement, lose_kv_write,
          deliver_twice]


@pytest.mark.parametrize("damage", DAMAGE, ids=[d.__name__ for d in DAMAGE])
def test_the_checker_reports_damage_on_a_fleet(fleet_run: tuple[Lines, State],
                                               damage: Callable[[Lines, State], str]) -> None:
    lines, state = copy.deepcopy(fleet_run[0]), copy.deepcopy(fleet_run[1])
    expected = damage(lines, state)
    violations = check(lines, state, SEED, len(KILLS)).violations
    assert any(expected in v for v in violations), (expected, violations)
