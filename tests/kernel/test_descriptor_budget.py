"""The file-descriptor budget: checked at start, and running out of descriptors later.

The decision is pure (`limits.plan`) and tested as such; the rest runs in child
processes whose RLIMIT_NOFILE is lowered first (`fd_worker.py`), and through the
real `alarmtop serve`: a budget that cannot fit is refused with a message saying
what to change and starts nothing; a soft limit below the hard one is raised;
descriptors that run out at run time fail the one event that needed one, with a
clear error that is logged, and nothing is left behind.
"""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from alarmtop.core.kernel.descriptors import FDS_PER_DATABASE, SLACK, Need, plan, shortfall
from tests.tui.test_cli_mistakes import ROOT, RUN_S, env_without_tokens

HARD = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
needs_room = pytest.mark.skipif(HARD != resource.RLIM_INFINITY and HARD < 8192,
                                reason="the hard descriptor limit is below 8192 here")


def worker(mode: str, data: Path, soft: int, hard: int,
           max_resident: int = 1000) -> tuple[dict[str, Any], str]:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.kernel.fd_worker", mode, str(data), str(soft), str(hard),
         str(max_resident)], cwd=ROOT, capture_output=True, text=True, timeout=RUN_S)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1]), proc.stderr


def test_plan_fits_raises_or_refuses() -> None:
    assert plan(900, 1024, 1024) == (1024, True)
    assert plan(3000, 1024, 4096) == (4096, True)  # the soft limit goes up to the hard one
    assert plan(5000, 1024, 4096) == (4096, False)
    assert plan(5000, 1024, -1) == (5000, True)  # unlimited hard limit


def test_the_shortfall_says_what_to_change() -> None:
    need = Need(databases=1001, sockets=784, in_use=10, max_resident=1000,
                sockets_what="the ops server's sockets")
    assert need.total == 1001 * FDS_PER_DATABASE + 784 + 10 + SLACK
    text = shortfall(need, 1024, 1024)
    assert text.startswith("not enough file descriptors: max_resident=1,000 objects need "
                           f"about {need.total:,} (3 per open database")
    assert "784 for the ops server's sockets" in text
    assert "this process may open 1,024 (ulimit -n; hard limit 1,024)" in text
    # What it suggests fits: 1,024 - (784 + 10 + 32 + 3 for the runtime's own) = 195.
    assert "Lower max_resident to 65 or less" in text
    assert f"ulimit -n {need.total:,}" in text
    cramped = shortfall(need, 512, 512)
    assert "Raise the limit: ulimit -n" in cramped and "max_resident to" not in cramped
    assert "or lower the server's socket caps" in cramped


def test_a_budget_that_cannot_fit_is_refused_before_anything_starts(tmp_path: Path) -> None:
    out, _ = worker("start", tmp_path / "data", 256, 256, max_resident=1000)
    assert "refused" in out, out
    assert out["limit"] == 256 and out["need"] > 3000
    m = re.search(r"Lower max_resident to (\d+) or less", out["refused"])
    assert m is not None, out["refused"]
    assert "ulimit -n" in out["refused"]
    assert out["runtime_db"] is False  # nothing was opened
    # The figure it suggests does fit.
    fits, _ = worker("start", tmp_path / "data", 256, 256, max_resident=int(m[1]))
    assert fits.get("started") is True, fits


@needs_room
def test_a_soft_limit_below_the_hard_one_is_raised(tmp_path: Path) -> None:
    out, _ = worker("start", tmp_path / "data", 256, 8192, max_resident=1000)
    assert out == {"started": True, "soft": 8192, "descriptor_limit": 8192}


def test_alarmtop_serve_refuses_a_budget_it_cannot_fit(tmp_path: Path) -> None:
    """The real command under `ulimit -n 256`: one line saying what to change, exit 1, no
    traceback, no runtime database and no token made."""
    data = tmp_path / "data"
    proc = subprocess.run(
        [sys.executable, "-c", "import resource, sys; resource.setrlimit("
         "resource.RLIMIT_NOFILE, (256, 256)); from alarmtop.tui.cli import main; "
         "sys.exit(main())", "serve", "--demo", "--data-dir", str(data), "--port", "0"],
        cwd=ROOT, env=env_without_tokens(), stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=RUN_S)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("alarmtop serve: not enough file descriptors: max_resident=1,000")
    assert "for the ops server's sockets" in lines[0] and "Raise the limit: ulimit -n" in lines[0]
    assert not (data / "runtime.sqlite").exists()
    assert not list(data.glob("*.token")) if data.exists() else True


def test_running_out_at_run_time_fails_the_one_event_and_is_logged(tmp_path: Path) -> None:
    data = tmp_path / "data"
    out, log = worker("emfile", data, 128, 128, max_resident=4)
    assert out["starved"].startswith("cannot open the database of Box/starved: this process "
                                     "has no file descriptor left (too many open files); the "
                                     "event failed and kept nothing. Lower max_resident "
                                     "(now 4) or raise ulimit -n"), out
    assert "ERROR alarmtop.runtime: cannot open the database of Box/starved" in log, log
    assert out["leftovers"] == []  # no *.sqlite.new left behind
    assert out["after"] == 3 and out["before_still"] == 4  # once freed, all is well
