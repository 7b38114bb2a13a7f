"""A killed test run leaves nothing running (tests/watchdog.py).

A pytest of its own runs `tests/fixtures/run_with_daemons.py`, which starts a
PostgreSQL cluster, a tmux server, `alarmtop serve` and Chromium and then waits.
This test notes every process of that run, kills the run as an impatient person or
a CI timeout would (SIGKILL, SIGTERM, or Ctrl-C to its process group), and checks
that within the watchdog's grace period none of them is left: no process, no
PostgreSQL answering on its port, no tmux server on its socket, no run folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import pg, watchdog
from tests.environment import need_command, unavailable
from tests.fixtures import run_with_daemons

ROOT = Path(__file__).resolve().parents[1]
INNER = ROOT / "tests" / "fixtures" / "run_with_daemons.py"
START_S = 120.0  # a fresh pytest, initdb, `alarmtop serve` and Chromium on a loaded machine
ENDS_S = 60.0  # a Ctrl-C runs the teardown
GONE_S = watchdog.GRACE_S + 15.0
# What the outer run (or an xdist worker) set for itself: the inner run is a run of its own.
NOT_INHERITED = (watchdog.RUN_DIR_ENV, "TMUX_TMPDIR", "PYTEST_XDIST_WORKER",
                 "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID", "PYTEST_CURRENT_TEST",
                 "PYTEST_ADDOPTS")


def alive(pid: int, start: int) -> bool:
    proc = watchdog.processes().get(pid)
    return proc is not None and proc[1] == start and proc[2] != "Z"


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM", "ctrl-c"])
def test_a_killed_run_leaves_no_daemon_running(how: str, tmp_path: Path) -> None:
    tmux = need_command("tmux", "apt-get install tmux")
    need_command("chromium", "apt-get install chromium")
    if pg.binaries() is None:
        unavailable("PostgreSQL is not installed (apt-get install -y postgresql)")
    report, log = tmp_path / "daemons.json", tmp_path / "inner.log"
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    env[run_with_daemons.REPORT_ENV] = str(report)
    with log.open("w") as out:
        # A session of its own: Ctrl-C goes to the inner run's process group, not to ours.
        inner = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                  str(INNER)], cwd=ROOT, env=env, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + START_S
        while not report.exists() or not report.read_text():
            assert inner.poll() is None, f"the inner run ended early:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"no daemons started:\n{log.read_text()}"
            time.sleep(0.1)  # another process starting: poll its report
        started = json.loads(report.read_text())
        procs = watchdog.processes()
        tree = {pid: procs[pid][1] for pid in watchdog.descendants(procs, [inner.pid])}
        names = {comm(pid) for pid in tree} | {cmdline(pid) for pid in tree}
        for daemon in ("postgres", "tmux", "serve", "chromium"):
            assert started[daemon] in tree, (daemon, started, sorted(names))
        assert any("alarmtop.tui.cli serve" in n for n in names), sorted(names)

        if how == "ctrl-c":
            # As a person would: Ctrl-C, Ctrl-C again if the teardown drags on (on a
            # machine loaded several times over it did, once), then kill it.
            for sig in (signal.SIGINT, signal.SIGINT, signal.SIGKILL):
                os.killpg(inner.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    inner.wait(timeout=ENDS_S)
                    break
        else:
            inner.send_signal(getattr(signal, how))
            inner.wait(timeout=ENDS_S)

        deadline = time.monotonic() + GONE_S
        while (left := {pid for pid, start in tree.items() if alive(pid, start)}) \
                and time.monotonic() < deadline:
            time.sleep(0.1)  # the watchdog's grace period: poll the processes
        assert not left, [f"{pid} {cmdline(pid)}" for pid in left]
        assert not answers(started["pg_port"]), "PostgreSQL still answers"
        assert not Path(started["pg_root"]).exists()
        assert not Path(started["run_dir"]).exists()
        gone = subprocess.run([tmux, "-L", run_with_daemons.TMUX_SOCKET, "has-session"],
                              env={**env, "TMUX_TMPDIR": started["tmux_socket_dir"]},
                              capture_output=True, timeout=10, check=False)
        assert gone.returncode != 0, "the tmux server still answers"
    finally:
        if inner.poll() is None:
            inner.kill()
            inner.wait()
