"""Nothing a test run starts outlives it, even when the run is killed.

Some tests start processes that leave their parent on purpose: `pg_ctl` detaches
PostgreSQL, tmux forks its server away, Chromium and `alarmtop serve` run beside
the test. Their fixtures stop them, but a run killed with SIGKILL or SIGTERM runs
no teardown. So, on Linux:

- every pytest process of the run (the one started and its xdist workers) makes
  itself a child subreaper (`PR_SET_CHILD_SUBREAPER`): a process that detaches
  from its parent is re-parented to that pytest instead of to init, so whatever
  the run started stays in the run's process tree while the run lives;
- the run's first pytest starts this file as a watchdog, in a session of its own
  (Ctrl-C in the terminal does not reach it) that ignores SIGINT and SIGTERM. It
  notes every process of the run's tree a few times a second. When that pytest
  is gone, however it ended, the watchdog stops everything it noted that still
  runs (SIGTERM; PostgreSQL gets SIGQUIT, its immediate shutdown; SIGKILL for
  what is left after a grace period), then removes the run's folder.

The run's folder (`ALARMTOP_TEST_RUN_DIR`, readable by the `postgres` user) holds
the throwaway PostgreSQL clusters and the tmux sockets (`TMUX_TMPDIR`), so the
watchdog removes them too. A normal run leaves the watchdog nothing to stop.

Run as a script (`python tests/watchdog.py WATCHDOG_MARK PID RUN_DIR`): it imports
nothing of the project, so it starts in a few milliseconds.
"""

from __future__ import annotations

import ctypes
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

RUN_DIR_ENV = "ALARMTOP_TEST_RUN_DIR"
MARK = "--alarmtop-test-watchdog"  # in the watchdog's command line: watchdogs spare each other
NOTE_EVERY_S = 0.2
GRACE_S = 5.0
PR_SET_CHILD_SUBREAPER = 36

Proc = tuple[int, int, str]  # (ppid, start time in clock ticks, state)


# -- the pytest side -------------------------------------------------------------------------

def install() -> Path | None:
    """Make this pytest process a subreaper; in the run's first pytest, also create the
    run's folder and start the watchdog. Returns the run's folder (None off Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return None
    existing = os.environ.get(RUN_DIR_ENV)
    if existing and os.environ.get("PYTEST_XDIST_WORKER") and Path(existing).is_dir():
        return Path(existing)  # an xdist worker: the controller's watchdog covers it
    run_dir = Path(tempfile.mkdtemp(prefix="alarmtop-run-"))
    run_dir.chmod(0o755)  # the postgres user reaches its cluster's folder inside
    (run_dir / "tmux").mkdir(mode=0o700)
    os.environ[RUN_DIR_ENV] = str(run_dir)
    os.environ["TMUX_TMPDIR"] = str(run_dir / "tmux")
    subprocess.Popen([sys.executable, "-I", str(Path(__file__).resolve()), MARK,
                      str(os.getpid()), str(run_dir)],
                     stdin=subprocess.DEVNULL, start_new_session=True)
    return run_dir


def run_dir() -> Path | None:
    """The run's folder, where throwaway daemons keep their files (None: no watchdog)."""
    value = os.environ.get(RUN_DIR_ENV)
    return Path(value) if value and Path(value).is_dir() else None


# -- reading /proc ---------------------------------------------------------------------------

def processes() -> dict[int, Proc]:
    """Every process of the machine: pid -> (ppid, start time, state)."""
    out: dict[int, Proc] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode("utf-8", "replace")
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        out[int(name)] = (int(fields[1]), int(fields[19]), fields[0])
    return out


def descendants(procs: dict[int, Proc], roots: Iterable[int]) -> set[int]:
    """The processes below `roots` (not the roots themselves)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def is_watchdog(pid: int) -> bool:
    return MARK.encode() in _read(f"/proc/{pid}/cmdline")


def running(procs: dict[int, Proc], noted: dict[int, int]) -> dict[int, int]:
    """The noted processes that still run (same pid and start time, not a zombie)."""
    return {pid: start for pid, start in noted.items()
            if pid in procs and procs[pid][1] == start and procs[pid][2] != "Z"}


# -- the watchdog ----------------------------------------------------------------------------

class Watchdog:
    def __init__(self, target: int, run_dir: Path) -> None:
        self.target, self.run_dir = target, run_dir
        self.me = os.getpid()
        self.noted: dict[int, int] = {}  # pid -> start time
        self.spared: set[int] = set()  # other runs' watchdogs (nested runs) end by themselves

    def note(self, roots: Iterable[int]) -> dict[int, Proc]:
        procs = processes()
        for pid in descendants(procs, roots) - {self.me} - self.spared:
            if pid in self.noted:
                continue
            if is_watchdog(pid):
                self.spared.add(pid)
                continue
            self.noted[pid] = procs[pid][1]
        return procs

    def watch(self) -> None:
        """Note the target's tree until the target is gone."""
        try:
            pidfd: int | None = os.pidfd_open(self.target)
        except (AttributeError, OSError):
            pidfd = None
        start = processes().get(self.target, (0, -1, "Z"))[1]
        while True:
            procs = self.note([self.target])
            if self.target not in procs or procs[self.target][1] != start \
                    or procs[self.target][2] == "Z":
                return
            if pidfd is not None:
                select.select([pidfd], [], [], NOTE_EVERY_S)
            else:
                time.sleep(NOTE_EVERY_S)

    def stop_all(self) -> list[str]:
        """Stop what the run left running; returns their descriptions."""
        procs = self.note(self.noted)
        left = running(procs, self.noted)
        described = [f"{pid} {_read(f'/proc/{pid}/cmdline')[:120]!r}" for pid in left]
        for pid in left:
            postgres = _read(f"/proc/{pid}/comm").strip() == b"postgres"
            _signal(pid, signal.SIGQUIT if postgres else signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            procs = self.note(left)
            left = running(procs, self.noted)
        for pid in left:
            _signal(pid, signal.SIGKILL)
        return described


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass  # gone meanwhile


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[1] != MARK:
        print(f"usage: {argv[0]} {MARK} PID RUN_DIR", file=sys.stderr)
        return 2
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # the run's end decides, not the terminal
    dog = Watchdog(int(argv[2]), Path(argv[3]))
    dog.watch()
    stopped = dog.stop_all()
    shutil.rmtree(dog.run_dir, ignore_errors=True)
    if stopped:
        print(f"alarmtop tests: stopped {len(stopped)} processes the test run left running:",
              *stopped, sep="\n  ", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
