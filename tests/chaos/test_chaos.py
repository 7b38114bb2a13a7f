"""The short chaos run: a handful of SIGKILLs under a mixed load, then the invariants.

The long run is `python -m tests.chaos.harness --kills 200 --seed N`. Set
CHAOS_SEED to rerun the short one with another seed; a failure prints the seed
and the command that reproduces it.

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

from tests.chaos.harness import repro, run
from tests.chaos.invariants import check
from tests.chaos.workload import read_record

SEED = int(os.environ.get("CHAOS_SEED", "20260601"))
KILLS = 6

Lines = list[dict[str, Any]]
State = dict[str, Any]


@pytest.fixture(scope="module")
def chaos_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Lines, State, Path]:
    workdir = tmp_path_factory.mktemp("chaos")
    report = run(SEED, KILLS, workdir)
    assert report.kills == KILLS
    assert not report.violations, (
        f"chaos seed {SEED}: {len(report.violations)} violations; reproduce with "
        f"`{repro(SEED, KILLS)}`:\n" + "\n".join(report.violations[:30]))
    # The run must have exercised what it claims to check.
    assert report.alarms_checked >= 50 and report.steps_checked >= 10, report.summary()
    assert report.writes_checked >= 50 and report.deliveries_checked >= 1, report.summary()
    state = json.loads((workdir / "state.json").read_text())
    return read_record(workdir / "record.jsonl"), state, workdir


@pytest.mark.timeout(120)
def test_sigkill_rounds_lose_nothing_acknowledged(chaos_run: tuple[Lines, State, Path]) -> None:
    lines, state, _ = chaos_run
    assert sum(1 for line in lines if line["k"] == "boot") == KILLS + 1
    assert state["settled"], state["waiting"]
    assert not check(lines, state, SEED, KILLS).violations


# -- the checker finds each kind of damage -----------------------------------------------------

def _first(items: list[Any], pred: Callable[[Any], bool], what: str) -> Any:
    for item in items:
        if pred(item):
            return item
    pytest.skip(f"this run had no {what} to damage (seed {SEED})")


def _acked_ops(lines: Lines) -> set[str]:
    return {line["op"] for line in lines if line["k"] == "ack"}


def drop_pending_alarm(lines: Lines, state: State) -> str:
    row = _first(state["alarms"], lambda a: a["state"] == "pending"
                 and a["object_class"] == "ChaosAlarm", "far pending alarm")
    state["alarms"].remove(row)
    return "alarm vanished"


def drop_successful_fire(lines: Lines, state: State) -> str:
    acked = _acked_ops(lines)
    last: dict[str, dict[str, Any]] = {}
    for line in lines:
        if line["k"] == "intent" and line["what"] in ("set", "delete") and line["op"] in acked:
            last[line["obj"]] = line
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


DAMAGE = [drop_pending_alarm, drop_successful_fire, fire_after_replacement, shorten_dead_letter,
          lose_kv_write, lose_insert, recompute_step, deliver_twice, leave_execution_running,
          lose_counter_hits]


@pytest.mark.parametrize("damage", DAMAGE, ids=[d.__name__ for d in DAMAGE])
def test_the_checker_reports_each_kind_of_loss(chaos_run: tuple[Lines, State, Path],
                                               damage: Callable[[Lines, State], str]) -> None:
    lines, state = copy.deepcopy(chaos_run[0]), copy.deepcopy(chaos_run[1])
    expected = damage(lines, state)
    violations = check(lines, state, SEED, KILLS).violations
    assert any(expected in v for v in violations), (expected, violations)
