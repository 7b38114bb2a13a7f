"""bench/alarm_fire.py --profile runs on a loaded machine.

Arming under the profiler, with the machine busy, used to run past a t0 fixed in
advance, so `--profile` failed. t0 now comes from the arming rate measured in the
run, and the profiler starts once arming is done: the profile is of the firing.
Two processes keeping the cores busy stand for the load.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.timeout(240)
def test_a_profiled_burst_completes_beside_busy_cores(tmp_path: Path) -> None:
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        out = subprocess.run(
            [sys.executable, str(BENCH / "alarm_fire.py"), "--quick", "--shape", "burst",
             "--profile", str(tmp_path / "fire.html"), "--dir", str(tmp_path)],
            cwd=BENCH, capture_output=True, text=True, timeout=200, check=False)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert out.returncode == 0, out.stdout[-1500:] + out.stderr[-1500:]
    assert "fired/s (durable)" in out.stdout
    assert (tmp_path / "fire.html").stat().st_size > 0
    text = (tmp_path / "fire.txt").read_text()
    assert "alarm" in text  # the firing's own frames, not only set-up
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == []  # work folders removed
