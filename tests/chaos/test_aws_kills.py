"""Kills of a runtime running a real AWS SDK handler, and nothing lost.

`aws_worker.py` runs the handler (steps a and b, a wait, step c) and is killed
with SIGKILL at one of two instants:

- `commit`: right after the checkpoint of step a's success is durable and before
  its answer reaches the handler. After the restart, a's success stands (it is
  not run again: what was committed is kept) and the execution finishes.
- `invocation`: inside step b's body (the process dies with the handler running).
  After the restart the cut-short invocation is recorded (`Runtime.ExitError`),
  the execution runs again, b runs again (at least once, as AWS's steps are) and
  a does not.

Either way: one success per step in the history, the execution's result, and every
side effect at least once and a only once.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.environment import required

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60.0

try:
    import aws_durable_execution_sdk_python  # noqa: F401
except ImportError:  # pragma: no cover - the aws extra is missing
    if required():
        raise
    pytest.skip("the AWS SDK is not installed (pip install -e '.[aws]')",
                allow_module_level=True)


def worker(phase: str, data: Path, case: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.chaos.aws_worker", phase, str(data),
                           case], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)


def successes(history: list[list[Any]], name: str) -> int:
    return sum(1 for kind, op, _ in history if kind == "StepSucceeded" and op == name)


@pytest.mark.parametrize("case", ["commit", "invocation"])
def test_a_kill_loses_nothing(tmp_path: Path, case: str) -> None:
    data = tmp_path / "data"
    died = worker("run", data, case)
    assert died.returncode == -signal.SIGKILL, f"not killed where meant:\n{died.stderr}"
    resumed = worker("resume", data, case)
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert (report["status"], report["result"]) == ("succeeded", ["a", "b", "c"]), report
    for step in ("a", "b", "c"):
        assert successes(report["history"], step) == 1, report["history"]
    effects = report["effects"]
    assert effects.count("a") == 1 and effects.count("c") == 1
    exits = [e for kind, _, e in report["history"] if kind == "InvocationCompleted" and e]
    assert [e["Payload"]["ErrorType"] for e in exits] == ["Runtime.ExitError"]
    assert effects.count("b") == (2 if case == "invocation" else 1)
