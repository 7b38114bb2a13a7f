"""A throwaway PostgreSQL cluster for the tests, from the machine's own binaries.

`initdb` into a folder made with `mkdtemp` in the run's folder (given to the
`postgres` user when the tests run as root: PostgreSQL refuses to run as root, and
pytest's own `tmp_path` is root-only), a unix socket in that folder and a free port
on 127.0.0.1; stopped and removed at the end of the session (each xdist worker has
a cluster of its own), and by the run's watchdog when the run is killed
(tests/watchdog.py). No mock of PostgreSQL anywhere: where the binaries are
missing the tests skip saying so, and fail under ALARMTOP_REQUIRE_ALL.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests import watchdog
from tests.environment import unavailable

START_TIMEOUT_S = 30.0
PORT_ATTEMPTS = 3


def binaries() -> Path | None:
    """The newest `/usr/lib/postgresql/*/bin` with initdb and pg_ctl."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name) if
                   Path(p).parent.parent.name.isdigit() else 0)
    if not found:
        on_path = shutil.which("initdb")
        return Path(on_path).parent if on_path else None
    return Path(found[-1]).parent


def free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    root: Path
    port: int
    bin: Path
    user: str | None  # the OS user the server runs as (None: this one)

    @property
    def dsn(self) -> str:
        return self.dsn_for("postgres")

    def dsn_for(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = list(args)
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=60)

    def pg_ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run(str(self.bin / "pg_ctl"), "-D", str(self.root / "db"), *args,
                        check=check)

    def start(self) -> None:
        self.pg_ctl("-o", f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                    "-c max_connections=300 -c shared_buffers=64MB",
                    "-l", str(self.root / "server.log"), "-w", "-t", str(int(START_TIMEOUT_S)),
                    "start")

    def stop(self, mode: str = "fast") -> None:
        self.pg_ctl("-m", mode, "-w", "stop", check=False)


def start_cluster() -> Cluster:
    """A new cluster, started; skips (or fails under ALARMTOP_REQUIRE_ALL) without one."""
    bin_dir = binaries()
    if bin_dir is None:
        unavailable("PostgreSQL is not installed (apt-get install -y postgresql)")
    # In the run's folder: the watchdog removes it when the run is killed.
    root = Path(tempfile.mkdtemp(prefix="alarmtop-pg-", dir=watchdog.run_dir()))
    user = None
    if os.geteuid() == 0:
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            unavailable("tests run as root and there is no postgres user to run PostgreSQL as "
                        "(apt-get install -y postgresql creates it)")
        os.chown(root, pw.pw_uid, pw.pw_gid)
        user = "postgres"
    cluster = Cluster(root, free_port(), bin_dir, user)
    made = cluster.run(str(bin_dir / "initdb"), "-D", str(root / "db"), "-A", "trust", "-U",
                       "postgres", "--no-sync", check=False)
    if made.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        unavailable(f"initdb failed: {made.stderr.strip()[-300:]}")
    for attempt in range(PORT_ATTEMPTS):
        try:
            cluster.start()
            return cluster
        except subprocess.CalledProcessError as exc:
            log = (root / "server.log").read_text() if (root / "server.log").exists() else ""
            if "already in use" in log and attempt + 1 < PORT_ATTEMPTS:
                # Another test process (an xdist worker) took the free port meanwhile.
                cluster.port = free_port()
                continue
            shutil.rmtree(root, ignore_errors=True)
            unavailable(f"PostgreSQL did not start: {exc.stderr.strip()[-300:]} {log[-300:]}")
    raise AssertionError("unreachable")


@contextlib.contextmanager
def cluster() -> Iterator[Cluster]:
    c = start_cluster()
    try:
        yield c
    finally:
        c.stop("immediate")
        shutil.rmtree(c.root, ignore_errors=True)


def wait_until_ready(c: Cluster, timeout_s: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ok = c.run(str(c.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(c.port), check=False)
        if ok.returncode == 0:
            return
        time.sleep(0.1)
    raise TimeoutError("PostgreSQL did not become ready")
