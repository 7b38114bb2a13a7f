"""A process death on each side of every commit an event makes.

A kill at a random moment rarely lands between two writes; these tests put it
there on purpose (`commit_worker.py` arms a fault point that SIGKILLs the process
at the Nth write boundary of the event) and restart on the same data. Whatever
the boundary, the object's value and its alarm agree afterwards: an alarm whose
event committed fires (once, at the intended time), an alarm whose event did not
commit leaves no trace, a deleted alarm never runs its handler, and an attempt cut
short is run again and counted.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.storage.commit_worker import LATER_AT, NEW_AT, OLD_AT, REARM_AT

ROOT = Path(__file__).resolve().parents[2]
POINTS = ["index.commit.before", "index.commit.after", "object.commit.before",
          "object.commit.after"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.storage.commit_worker", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def killed_then_checked(tmp_path: Path, case: str, point: str, nth: int
                        ) -> tuple[bool, dict[str, Any]]:
    data = tmp_path / "data"
    died = run("die", str(data), case, point, str(nth))
    killed = died.returncode == -signal.SIGKILL
    assert killed or died.returncode == 0, died.stderr
    checked = run("check", str(data), case)
    assert checked.returncode == 0, checked.stderr
    return killed, json.loads(checked.stdout.strip().splitlines()[-1])


def fired_at(state: dict[str, Any]) -> list[int]:
    return [at for at, _ in state["runs"]]


@pytest.mark.parametrize("nth", [1, 2])
@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("case", ["set", "earlier", "later", "delete"])
def test_a_call_killed_at_a_write_boundary(tmp_path: Path, case: str, point: str,
                                           nth: int) -> None:
    """The call's value and its alarm change are one: both kept, or neither."""
    killed, state = killed_then_checked(tmp_path, case, point, nth)
    committed = state["value"] == "after"
    if not killed:
        assert committed
    assert state["row"] is None and state["alarm"] is None, state  # all fired or gone
    if case == "delete":
        assert fired_at(state) == ([] if committed else [OLD_AT]), state
    elif case == "set":
        assert fired_at(state) == ([NEW_AT] if committed else []), state
    elif case == "earlier":
        assert fired_at(state) == ([NEW_AT] if committed else [OLD_AT]), state
    else:
        assert fired_at(state) == ([LATER_AT] if committed else [OLD_AT]), state


@pytest.mark.parametrize("nth", [1, 2, 3])
@pytest.mark.parametrize("point", POINTS)
def test_an_attempt_killed_at_a_write_boundary(tmp_path: Path, point: str, nth: int) -> None:
    """An attempt is at least once: cut short anywhere, it runs again, counted as a retry;
    once its end is recorded it never runs again."""
    killed, state = killed_then_checked(tmp_path, "attempt", point, nth)
    assert state["row"] is None and state["alarm"] is None, state
    runs = state["runs"]
    assert 1 <= len(runs) <= 2, state
    if len(runs) == 2:
        assert killed and runs[1][1] == 1, state  # the second run is a counted retry


@pytest.mark.parametrize("nth", [1, 2, 3])
@pytest.mark.parametrize("point", POINTS)
def test_an_attempt_that_sets_a_new_alarm_killed_at_a_write_boundary(
        tmp_path: Path, point: str, nth: int) -> None:
    """The handler re-arms for later: killed anywhere, that later alarm still fires, and
    the first run is never lost."""
    _, state = killed_then_checked(tmp_path, "attempt-rearm", point, nth)
    assert state["row"] is None and state["alarm"] is None, state
    assert fired_at(state)[-1] == REARM_AT, state
    assert 2 <= len(state["runs"]) <= 3, state


@pytest.mark.parametrize("point", ["index.commit.before", "index.commit.after"])
def test_an_object_without_a_database_killed_at_its_one_commit(tmp_path: Path,
                                                               point: str) -> None:
    """No database: the index row is the one commit, so the alarm exists or it does not."""
    killed, state = killed_then_checked(tmp_path, "set-bare", point, 1)
    assert killed
    assert state["alarm"] is None and state["row"] is None, state
    expect = [[NEW_AT, 0]] if point == "index.commit.after" else []
    assert state["runs"] == expect, state
