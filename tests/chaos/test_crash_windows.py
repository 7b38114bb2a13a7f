"""A process death between the two commits of one call to an execution.

Starting an execution, completing its callback and an operator's retry each
commit the execution's log first and its alarm (the wake-up that runs the next
invocation) at the end of the event, in a second commit. The chaos harness
found executions stuck after a SIGKILL landed between the two; these tests make
the process exit at exactly that instant (`window_worker.py`), restart it on the
same data, and expect the execution to carry on, as it would had the kill come a
moment earlier or later.

Known bug: today the execution is left without an alarm and never runs again:
a start stays `running`, a recorded callback result stays `suspended` (sending it
again is refused as already completed), a retried compensation stays
`needs_human` (retrying again is refused). Hence strict xfail.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.chaos.window_worker import DIE_CODE

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 30.0
FINISHED = {"start": "started", "callback": "answered", "operator_retry": "compensated"}
BUG = ("an execution RPC commits its log and its alarm separately; a crash between the two "
       "leaves the execution without an alarm, stuck for good (core/durable/engine.py)")


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
    alone = last_json(worker("resume", data, case))
    again = last_json(worker("resume-again", data, case))
    want = ("succeeded", FINISHED[case])
    assert (alone["status"], alone["result"]) == want, ("after restart", alone)
    assert (again["status"], again["result"]) == want, ("after the call again", again)
