"""A process death right after a call to an execution commits its log.

Starting an execution, completing its callback and an operator's retry each
write the execution's log and point its alarm at the next invocation. The chaos
harness once found executions stuck after a SIGKILL: the two were separate
commits, and a death between them left no alarm. They now share one commit;
these tests make the process exit the instant the call's log is durable
(`window_worker.py`), restart it on the same data, and expect the execution to
carry on, as it would had the kill come a moment earlier or later.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.chaos.window_worker import DIE_CODE

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 30.0
FINISHED = {"start": "started", "callback": "answered", "operator_retry": "compensated"}


def worker(phase: str, data: Path, case: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.chaos.window_worker", phase, str(data),
                           case], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)


def die_in_the_window(data: Path, case: str) -> None:
    if case != "start":
        ready = worker("prepare", data, case)
        assert ready.returncode == 0, ready.stderr
    died = worker("die", data, case)
    assert died.returncode == DIE_CODE, f"the process did not die in the window:\n{died.stderr}"


def last_json(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert proc.returncode == 0, proc.stderr
    report: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report


@pytest.mark.parametrize("case", sorted(FINISHED))
def test_execution_carries_on_after_a_death_between_log_and_alarm(tmp_path: Path,
                                                                  case: str) -> None:
    """After the restart the execution finishes by itself; and a client that repeats
    its call (what a client does when the server died under it) does no harm."""
    data = tmp_path / "data"
    die_in_the_window(data, case)
    # Before any restart (and its recovery pass) runs: the alarm is on disk already.
    with contextlib.closing(sqlite3.connect(data / "runtime.sqlite")) as db:
        alarm = db.execute("SELECT state FROM alarms WHERE object_class = 'Execution' AND "
                           "object_name = 'w1'").fetchone()
    assert alarm is not None, "the call's log is durable but the alarm that acts on it is not"
    alone = last_json(worker("resume", data, case))
    again = last_json(worker("resume-again", data, case))
    want = ("succeeded", FINISHED[case])
    assert (alone["status"], alone["result"]) == want, ("after restart", alone)
    assert (again["status"], again["result"]) == want, ("after the call again", again)
