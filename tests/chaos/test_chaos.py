"""The short chaos run: a handful of deaths under a mixed load, then the invariants.

The long run is `python -m tests.chaos.harness --kills 200 --seed N` (seeded
rounds: a third die at a write boundary, about half meet a lock). This short one
fixes its rounds (`ROUNDS`) so that every run meets each kind of fault: SIGKILLs
at line counts (one during start-up), deaths before and after an object
database's commit, an alarm index commit and an execution log's commit, and
locks held on runtime.sqlite and on an object's database for longer than the
workload's busy timeout. The seed still drives the load and its planned
failures: set CHAOS_SEED to rerun it with another; a failure prints the seed.

The second half checks the checker: the final state and record of the run are
damaged on purpose, one way at a time, and each kind of loss must be reported.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.faults import RUNTIME_DB, BoundaryDeath, LockPlan
from tests.chaos.harness import BOUNDARY_FALLBACK_LINES, RoundPlan, run
from tests.chaos.invariants import check
from tests.chaos.workload import read_record

SEED = int(os.environ.get("CHAOS_SEED", "20260601"))
ROUNDS = [
    # Load, a lock on runtime.sqlite longer than the busy timeout, then a kill.
    RoundPlan(600, locks=(LockPlan(60, RUNTIME_DB, 1.5),)),
    RoundPlan(BOUNDARY_FALLBACK_LINES, BoundaryDeath("object.commit.after", "object", 150)),
    # A lock on the database of the busiest alarm object (made in the first round).
    RoundPlan(BOUNDARY_FALLBACK_LINES, BoundaryDeath("index.commit.before", "index", 250),
              locks=(LockPlan(20, "ChaosAlarm/a0", 1.5),)),
    RoundPlan(BOUNDARY_FALLBACK_LINES, BoundaryDeath("index.commit.after", "execlog", 2)),
    # Killed during start-up and crash recovery.
    RoundPlan(3),
    RoundPlan(BOUNDARY_FALLBACK_LINES, BoundaryDeath("object.commit.before", "object", 150),
              locks=(LockPlan(30, RUNTIME_DB, 1.0),)),
    # Killed on each side of the start-up's record that the last stop was not clean.
    RoundPlan(BOUNDARY_FALLBACK_LINES, BoundaryDeath("index.state.before", "state", 1)),
    RoundPlan(BOUNDARY_FALLBACK_LINES, BoundaryDeath("index.state.after", "state", 1)),
    RoundPlan(400),
]
KILLS = len(ROUNDS)


def repro() -> str:
    return (f"CHAOS_SEED={SEED} pytest tests/chaos/test_chaos.py (the long run: python -m "
            f"tests.chaos.harness --kills 200 --seed {SEED})")

Lines = list[dict[str, Any]]
State = dict[str, Any]


@pytest.fixture(scope="module")
def chaos_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Lines, State, Path]:
    workdir = tmp_path_factory.mktemp("chaos")
    report = run(SEED, KILLS, workdir, plans=ROUNDS)
    print(report.summary())  # shown with -s, and on failure
    assert report.kills == KILLS
    assert not report.violations, (
        f"chaos seed {SEED}: {len(report.violations)} violations; reproduce with "
        f"`{repro()}`:\n" + "\n".join(report.violations[:30]))
    # The run must have exercised what it claims to check.
    assert report.alarms_checked >= 50 and report.steps_checked >= 10, report.summary()
    assert report.writes_checked >= 50 and report.deliveries_checked >= 1, report.summary()
    assert sum(report.boundary_deaths.values()) >= 2, report.summary()
    assert report.locks["runtime.sqlite"] >= 1 and report.locks["object db"] >= 1, \
        report.summary()
    assert report.lock_failed_calls >= 1, report.summary()  # the locks bit
    state = json.loads((workdir / "state.json").read_text())
    return read_record(workdir / "record.jsonl"), state, workdir


@pytest.mark.timeout(120)
def test_deaths_and_locks_lose_nothing_acknowledged(chaos_run: tuple[Lines, State, Path]
                                                    ) -> None:
    lines, state, _ = chaos_run
    assert sum(1 for line in lines if line["k"] == "boot") == KILLS + 1
    assert state["settled"], state["waiting"]
    report = check(lines, state, SEED, KILLS)
    assert not report.violations, report.violations


def test_a_boundary_death_lands_on_its_boundary(chaos_run: tuple[Lines, State, Path]) -> None:
    """The round armed to die at the first execution-log commit died there: its record
    says so, and the commit it died at carried an execution's log."""
    lines, _, _ = chaos_run
    deaths = [line for line in lines if line["k"] == "boundary"]
    assert any(d["kind"] == "execlog" and d["round"] == 3 for d in deaths), deaths
    for d in deaths:
        if d["kind"] == "execlog":
            assert d["extras"] >= 1 and all(k[0] == "Execution" for k in d["keys"]), d


# -- the checker finds each kind of damage -----------------------------------------------------

def _first(items: list[Any], pred: Callable[[Any], bool], what: str) -> Any:
    for item in items:
        if pred(item):
            return item
    pytest.skip(f"this run had no {what} to damage (seed {SEED})")


def _acked_ops(lines: Lines) -> set[str]:
    return {line["op"] for line in lines if line["k"] == "ack"}


def drop_pending_alarm(lines: Lines, state: State) -> str:
    # One its object still wants: a row the object no longer wants (left early by an
    # index write a kill cut off, reconciled when it falls due) may go unnoticed.
    views = state["alarm_views"]
    row = _first(state["alarms"], lambda a: a["state"] == "pending"
                 and a["object_class"] == "ChaosAlarm"
                 and views.get(f"{a['object_class']}/{a['object_name']}") is not None,
                 "far pending alarm")
    state["alarms"].remove(row)
    return "alarm vanished"


def drop_successful_fire(lines: Lines, state: State) -> str:
    """The last call to an object set its alarm, acknowledged, and it ran: drop the run."""
    acked = _acked_ops(lines)
    last: dict[str, dict[str, Any]] = {}
    for line in lines:
        if line["k"] == "intent" and line["what"] in ("set", "delete"):
            last[line["obj"]] = line
    last = {obj: line for obj, line in last.items() if line["op"] in acked}
    fired = {(line["obj"], line["at"]) for line in lines if line["k"] == "fire" and line["ok"]}
    target = _first(list(last.values()), lambda i: i["what"] == "set"
                    and (i["obj"], i["at"]) in fired, "alarm fired after its last set")
    lines[:] = [line for line in lines if not (line["k"] == "fire" and line["obj"] == target["obj"]
                                               and line["at"] == target["at"])]
    return "alarm vanished"


def fire_after_replacement(lines: Lines, state: State) -> str:
    acked = _acked_ops(lines)
    sets: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        if line["k"] == "intent" and line["what"] == "set" and line["op"] in acked:
            sets.setdefault(line["obj"], []).append(line)
    obj, seq = _first(list(sets.items()), lambda kv: len(kv[1]) >= 2, "object set twice")
    lines.append({"k": "fire", "obj": obj, "at": seq[0]["at"], "retry": 0, "ok": True})
    return "fired after it was replaced"


def shorten_dead_letter(lines: Lines, state: State) -> str:
    row = _first(state["alarms"], lambda a: a["state"] == "dead", "dead letter")
    row["attempts"] = row["attempts"][:-1]
    return "dead letter without its attempts"


def lose_kv_write(lines: Lines, state: State) -> str:
    _, dump = _first(list(state["writers"].items()), lambda kv: kv[1]["kv"], "written key")
    key = sorted(dump["kv"])[0]
    dump["kv"][key] = "something else"
    return "acknowledged write lost"


def lose_insert(lines: Lines, state: State) -> str:
    acked = _acked_ops(lines)
    line = _first(lines, lambda x: x["k"] == "intent" and x["what"] == "insert"
                  and x["op"] in acked, "acknowledged insert")
    state["writers"][line["obj"]]["rows"].remove(line["row"])
    return "acknowledged insert lost"


def recompute_step(lines: Lines, state: State) -> str:
    body = _first(lines, lambda x: x["k"] == "body" and x["ok"], "step body")
    lines.append(dict(body, nonce="recomputed"))
    return "checkpointed step recomputed"


def deliver_twice(lines: Lines, state: State) -> str:
    line = _first(lines, lambda x: x["k"] == "delivered" and x["first"], "keyed delivery")
    lines.append(dict(line))
    return "delivered 2 times"


def leave_execution_running(lines: Lines, state: State) -> str:
    acked = _acked_ops(lines)
    last: dict[str, str] = {}
    for line in lines:
        if line["k"] == "intent" and line["obj"].startswith("Execution/"):
            last[line["obj"][len("Execution/"):]] = line["op"]
    # One whose last call was acknowledged (an unacknowledged one may not have happened).
    eid = _first(sorted(state["executions"]), lambda e: state["executions"][e] is not None
                 and last.get(e) in acked, "execution")
    state["executions"][eid]["status"] = "running"
    return "neither finished, waiting nor with a human"


def lose_counter_hits(lines: Lines, state: State) -> str:
    acked = _acked_ops(lines)
    hit = {line["obj"] for line in lines if line["k"] == "intent" and line["what"] == "hit"
           and line["op"] in acked}
    obj = _first(sorted(hit), lambda o: o in state["counters"], "acknowledged hit")
    state["counters"][obj] = {"pending": 0, "flushed": 0}
    return "debounce counter lost"


def leave_alarm_running(lines: Lines, state: State) -> str:
    row = _first(state["alarms"], lambda a: a["object_class"] == "ChaosAlarm", "alarm row")
    row["state"] = "running"
    return "alarm left running"


def fail_without_a_lock(lines: Lines, state: State) -> str:
    """A call raised with nothing held locked: a failure nobody injected."""
    acked = _first([x for x in lines if x["k"] == "ack"], lambda x: True, "acknowledged call")
    lines.remove(acked)
    lines.append({"k": "nack", "op": acked["op"], "error": "StorageError: database is locked"})
    lines[:] = [x for x in lines if x["k"] not in ("lock", "unlock")]
    return "no lock explains"


def keep_a_failed_insert(lines: Lines, state: State) -> str:
    """An insert whose call failed, yet its row is there."""
    acked = _acked_ops(lines)
    line = _first(lines, lambda x: x["k"] == "intent" and x["what"] == "insert"
                  and x["op"] in acked, "acknowledged insert")
    lines[:] = [x for x in lines if not (x["k"] == "ack" and x["op"] == line["op"])]
    lines.append({"k": "nack", "op": line["op"], "error": "StorageError: database is locked"})
    return "a failed call kept its write"


def fire_a_failed_set(lines: Lines, state: State) -> str:
    """The alarm of a set that failed ran its handler."""
    acked = _acked_ops(lines)
    fired = {(x["obj"], x["at"]) for x in lines if x["k"] == "fire"}
    line = _first(lines, lambda x: x["k"] == "intent" and x["what"] == "set"
                  and x["op"] in acked and (x["obj"], x["at"]) in fired, "set that fired")
    lines[:] = [x for x in lines if not (x["k"] == "ack" and x["op"] == line["op"])]
    lines.append({"k": "nack", "op": line["op"], "error": "StorageError: database is locked"})
    return "the alarm of a failed call fired"


def retry_a_success(lines: Lines, state: State) -> str:
    """An attempt that succeeded by plan is run again, counted, with no fault between."""
    i = _first(list(range(len(lines))), lambda j: lines[j]["k"] == "fire" and lines[j]["ok"]
               and lines[j]["retry"] < 2, "successful alarm attempt")
    lines.insert(i + 1, dict(lines[i], retry=lines[i]["retry"] + 1))
    return "retried beyond its plan"


def blame_a_phantom_lock(lines: Lines, state: State) -> str:
    """A dead letter's attempt failed 'locked' when no lock was held."""
    row = _first(state["alarms"], lambda a: a["state"] == "dead"
                 and a["object_class"] == "ChaosAlarm", "dead letter")
    row["attempts"][-1]["error"] = "StorageError: writing keys failed: database is locked"
    lines[:] = [x for x in lines if x["k"] not in ("lock", "unlock")]
    return "neither a crash nor a lock's doing"


def fail_a_trip_with_no_lock(lines: Lines, state: State) -> str:
    """A trip ends failed with a lock error (a checkpoint refused must retry, not fail)."""
    eid = _first(sorted(state["executions"]), lambda e: (state["executions"][e] or {}).get(
        "status") == "succeeded" and e.startswith("trip-"), "finished trip")
    d = state["executions"][eid]
    d["status"], d["error"] = "failed", {"ErrorType": "alarmtop.core.errors.StorageError",
                                         "ErrorMessage": "database is locked"}
    lines[:] = [x for x in lines if x["k"] not in ("lock", "unlock")]
    return f"trip {eid} should"


def forget_the_intent(lines: Lines, state: State) -> str:
    """The index holds a pending alarm the object itself no longer sees."""
    row = _first(state["alarms"], lambda a: a["state"] == "pending"
                 and a["object_class"] == "ChaosAlarm", "far pending alarm")
    state["alarm_views"][f"ChaosAlarm/{row['object_name']}"] = None
    return "alarm vanished or wrong"


DAMAGE = [drop_pending_alarm, drop_successful_fire, fire_after_replacement, shorten_dead_letter,
          lose_kv_write, lose_insert, recompute_step, deliver_twice, leave_execution_running,
          lose_counter_hits, leave_alarm_running, fail_without_a_lock, keep_a_failed_insert,
          fire_a_failed_set, retry_a_success, blame_a_phantom_lock, fail_a_trip_with_no_lock,
          forget_the_intent]


@pytest.mark.parametrize("damage", DAMAGE, ids=[d.__name__ for d in DAMAGE])
def test_the_checker_reports_each_kind_of_loss(chaos_run: tuple[Lines, State, Path],
                                               damage: Callable[[Lines, State], str]) -> None:
    lines, state = copy.deepcopy(chaos_run[0]), copy.deepcopy(chaos_run[1])
    expected = damage(lines, state)
    violations = check(lines, state, SEED, KILLS).violations
    assert any(expected in v for v in violations), (expected, violations)
