"""A process death on each side of SQLite's clean-stop record (written at open and at
close, a write boundary of its own): whatever the boundary, no alarm is lost or run
twice, and the start after checks the index whenever the record does not say the
last stop was clean."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.storage.state_worker", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("clean", ["0", "1"])
@pytest.mark.parametrize("point", ["index.state.before", "index.state.after"])
def test_killed_on_either_side_of_the_clean_record(tmp_path: Path, point: str,
                                                   clean: str) -> None:
    data = tmp_path / "data"
    died = run("die", str(data), point, clean)
    assert died.returncode == -signal.SIGKILL, (died.stdout, died.stderr)
    checked = run("check", str(data))
    assert checked.returncode == 0, checked.stderr
    state = json.loads(checked.stdout.strip().splitlines()[-1])
    # Killed at the open, the second run never set j's alarm.
    assert state["fired"] == {"k": 1, "j": 1 if clean == "1" else 0}, state
    # Killed before the open's record, the last stop was clean and nothing was written
    # since; after the close's, this one was. Between the two the next start checked.
    unchecked = {("index.state.before", "0"), ("index.state.after", "1")}
    assert (state["restored"] is None) == ((point, clean) in unchecked), state
