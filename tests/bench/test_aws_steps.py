"""bench/aws_steps.py runs end to end: the real SDK's handler on alarmtop (durable)
and against a service that keeps nothing, with the split of the CPU that says how
much of it is the SDK's, and leaves no work folder behind.

AWS's local runner and DBOS come with the `bench` extra, which CI does not install:
they join the run when they are there.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.environment import unavailable

BENCH = Path(__file__).resolve().parents[2] / "bench"


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@pytest.mark.timeout(300)
def test_a_small_run_measures_alarmtop_and_the_sdk_alone(tmp_path: Path) -> None:
    if not installed("aws_durable_execution_sdk_python"):
        unavailable("the AWS SDK is not installed (pip install -e '.[aws]')")
    systems = ["alarmtop", "sdk-alone"]
    if installed("aws_durable_execution_sdk_python_testing"):
        systems.insert(1, "aws-local")
    work = tmp_path / "work"
    work.mkdir()
    out = subprocess.run(
        [sys.executable, str(BENCH / "aws_steps.py"), "--quick", "--executions", "4",
         "--systems", ",".join(systems), "--dir", str(work),
         "--json-out", str(tmp_path / "aws.json")],
        cwd=BENCH, capture_output=True, text=True, timeout=280, check=False)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "of which CPU of its event loop thread" in out.stdout
    assert "where the CPU goes" in out.stdout
    result = json.loads((tmp_path / "aws.json").read_text())
    assert result["settings"]["alarmtop"] == {"journal_mode": "wal", "synchronous": "FULL"}
    split = {(r["mode"], r["system"]): r for r in result["cpu_split"]}
    for mode in ("seq", "c50"):
        row = split[(mode, "alarmtop")]
        assert row["sdk_us"] > 0 and row["service_us"] == pytest.approx(
            row["cpu_us"] - row["sdk_us"])
    if "aws-local" in systems:
        bars = {r["name"]: r["bar"] for r in result["ratios"]}
        assert bars["seq: alarmtop / aws-local steps/s"] == 0.5
        assert bars["c50: alarmtop / aws-local steps/s"] == 1.0
    assert list(work.iterdir()) == []  # each run's folder removed
