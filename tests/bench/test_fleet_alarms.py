"""bench/fleet_alarms.py leaves nothing behind, however it ends.

The benchmark runs set-up and node processes on a throwaway PostgreSQL cluster;
interrupted as a terminal's Ctrl-C does (SIGINT to the whole process group) once a
burst has begun, it must stop them and remove its work folder.

The bounds are for a loaded machine, not speed targets: alone, the interrupted run
ends within a few seconds; the wait for it to end is longer than the run's own
bounds on its way out (each child gets 10 s to end; PostgreSQL's connect and stop
each have 60 s), so the test waits for the run to have ended, however slowly.
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
START_S = 300.0  # a throwaway cluster, a commit probe and a database before the burst
END_S = 300.0  # the interrupted run's way out, its own bounds included


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


def still_running(pgid: int) -> str:
    """The processes of group `pgid` that still run, for a failure to say where it hung."""
    ps = subprocess.run(["ps", "-o", "pid,stat,etime,args", "-g", str(pgid)],
                        capture_output=True, text=True, check=False)
    return ps.stdout


@pytest.mark.timeout(START_S + END_S + 60)
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
        wait_for(lambda: runs_a_child(proc.pid), "a burst to begin", START_S)
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=END_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the interrupted run still runs after {END_S:g} s:\n"
                f"{still_running(proc.pid)}\n{log.read_text()[-4000:]}") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # Ended by the interrupt (Python exits by SIGINT after a KeyboardInterrupt), not
    # by running to its end with the interrupt lost.
    assert proc.returncode == -signal.SIGINT, log.read_text()[-2000:]
    assert list(base.iterdir()) == [], log.read_text()[-2000:]
