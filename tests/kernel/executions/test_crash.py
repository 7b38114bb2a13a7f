"""SIGKILL of the runtime mid-execution, restart, completion.

Every step body runs at least once, and a result that was checkpointed is never
computed again: each body run appends its nonce to a log kept outside the
runtime, and the history holds the nonce that was checkpointed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("crash_worker.py")
DEADLINE_S = 60.0


def body_runs(log: Path) -> list[tuple[str, str, int, str]]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        phase, execution, step, nonce = line.split()
        out.append((phase, execution, int(step), nonce))
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_sigkill_mid_execution_then_resume(tmp_path: Path, seed: int) -> None:
    data, log = tmp_path / "data", tmp_path / "bodies.log"
    rng = random.Random(seed)
    target = rng.randint(3, 25)  # kill after this many step bodies ran
    errors = tmp_path / "run.stderr"
    with errors.open("w") as err:
        proc = subprocess.Popen([sys.executable, str(WORKER), "run", str(data), str(log)],
                                stdout=subprocess.PIPE, stderr=err, text=True)
        # Every execution's start has returned before the kill (the first ones run steps
        # meanwhile, and on a loaded machine reach the target first): a start cut off
        # before it answered is its client's to repeat, not this test's subject.
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "STARTED", errors.read_text()
        deadline = time.monotonic() + DEADLINE_S
        while len(body_runs(log)) < target:
            assert proc.poll() is None, errors.read_text()
            assert time.monotonic() < deadline, "the worker made no progress"
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    before = body_runs(log)

    resumed = subprocess.run([sys.executable, str(WORKER), "resume", str(data), str(log)],
                             capture_output=True, text=True, timeout=DEADLINE_S)
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout.strip().splitlines()[-1])
    runs = body_runs(log)
    assert len(runs) >= len(before)

    by_step: dict[tuple[str, int], list[tuple[str, str]]] = defaultdict(list)
    for phase, execution, step, nonce in runs:
        by_step[(execution, step)].append((phase, nonce))
    for execution, d in report.items():
        assert d["status"] == "succeeded", (execution, d)
        checkpointed = {e["Name"]: json.loads(e["StepSucceededDetails"]["Result"]["Payload"])
                        for e in d["history"] if e["EventType"] == "StepSucceeded"}
        assert len([e for e in d["history"] if e["EventType"] == "StepSucceeded"]) == 10
        assert d["result"] == [checkpointed[f"step-{i}"] for i in range(10)]
        for i in range(10):
            bodies = by_step[(execution, i)]
            assert bodies, f"{execution} step {i} never ran"
            nonce = checkpointed[f"step-{i}"]
            assert nonce in [n for _, n in bodies]
            # Never recomputed: once the checkpointed run happened, no run follows it.
            assert bodies[-1][1] == nonce, (execution, i, bodies)
