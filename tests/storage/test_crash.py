"""SIGKILL of a runtime process during an alarm handler, then a restart on the same data.

The runtime runs in a child process (`crash_worker.py`) on the wall clock; the test
waits for that process to reach the handler (a marker file) and kills it. The
polling below waits for another process, not for a timer, so it uses short
intervals and a generous deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

WORKER = Path(__file__).with_name("crash_worker.py")
DEADLINE_S = 30.0
POLL_S = 0.05
MIN_ACKS = 5


class Worker:
    """A worker process whose stdout lines are collected by a thread as they arrive."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, str(WORKER), *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def acks(self) -> list[int]:
        return [int(line.split()[1]) for line in list(self.lines) if line.startswith("ACK ")]

    def finish(self) -> str:
        """Wait for the exit; stderr (for failure messages)."""
        try:
            self.proc.wait(timeout=DEADLINE_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._reader.join(timeout=DEADLINE_S)
            assert self.proc.stderr is not None
            err = self.proc.stderr.read()
            self.proc.stderr.close()
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        return err


def wait_for(what: str, ready: Callable[[], bool], worker: Worker) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not ready():
        if worker.proc.poll() is not None:
            raise AssertionError(f"the worker exited before {what}:\n{worker.finish()}")
        if time.monotonic() > deadline:
            worker.proc.kill()
            raise AssertionError(f"no {what} within {DEADLINE_S} s:\n{worker.finish()}")
        time.sleep(POLL_S)


def test_sigkill_during_handler_reruns_alarm_as_retry_and_keeps_acked_writes(
        tmp_path: Path) -> None:
    data, marker = tmp_path / "data", tmp_path / "in-handler"
    victim = Worker("crash", str(data), str(marker))
    wait_for("alarm handler start", marker.exists, victim)
    wait_for(f"{MIN_ACKS} acknowledged writes", lambda: len(victim.acks()) >= MIN_ACKS, victim)
    os.kill(victim.proc.pid, signal.SIGKILL)
    victim.finish()
    assert victim.proc.returncode == -signal.SIGKILL
    acked = max(victim.acks())

    survivor = Worker("verify", str(data))
    err = survivor.finish()
    assert survivor.proc.returncode == 0, err
    report = json.loads(survivor.lines[-1])

    # The rerun is a retry, and it is the only run the new process made.
    assert report["runs"] == [{"retry_count": 1, "is_retry": True}]
    # While it ran, the crashed attempt was on record as cut short by the stop.
    during = report["during"]
    assert (during["state"], during["retry_count"]) == ("running", 1)
    [crashed] = during["attempts"]
    assert crashed["end_ms"] is None
    assert "stopped while the handler ran" in crashed["error"]
    # The rerun succeeded: the alarm is done.
    assert report["after"] is None
    # Every write acknowledged before the kill is there (a later one may be too).
    assert report["counter"] >= acked
