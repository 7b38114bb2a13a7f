"""bench/fleet_alarms.py leaves nothing behind, however it ends.

The benchmark runs set-up and node processes on a throwaway PostgreSQL cluster;
interrupted as a terminal's Ctrl-C does (SIGINT to the whole process group) once a
burst has begun, it must stop them and remove its work folder.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import pg

BENCH = Path(__file__).resolve().parents[2] / "bench"


def wait_for(check: object, what: str, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def runs_a_child(pid: int) -> bool:
    """Whether process `pid` has a child started with `--child` (set-up or node)."""
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return any(b"--child" in Path(f"/proc/{k}/cmdline").read_bytes() for k in kids)
    except OSError:
        return False


@pytest.mark.timeout(180)
def test_an_interrupted_fleet_run_removes_its_work_folder(tmp_path: Path) -> None:
    if pg.binaries() is None:
        pytest.skip("PostgreSQL binaries are not installed")
    base = tmp_path / "work"
    base.mkdir()
    log = tmp_path / "stderr.txt"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, str(BENCH / "fleet_alarms.py"), "--quick", "--alarms", "50",
             "--lead-s", "30", "--dir", str(base)],
            cwd=BENCH, start_new_session=True, stdout=subprocess.DEVNULL, stderr=err)
    try:
        # A burst has begun: the benchmark runs its set-up or node processes.
        wait_for(lambda: runs_a_child(proc.pid), "a burst to begin", 120)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert list(base.iterdir()) == [], log.read_text()[-2000:]
