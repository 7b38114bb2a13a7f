"""The chaos harness's AWS SDK run: kill a runtime running the real SDK's handlers
round after round, then prove nothing acknowledged was lost or done twice.

Each round starts `aws_workload.py` on the same data (SQLite files, or one
PostgreSQL database) with two new executions and one seeded death:

- ``commit``: the process kills itself right after the commit that follows a
  seeded step's body (a storage fault point at the write boundary): a checkpoint
  durable, its answer never given;
- ``invocation``: the process kills itself inside a seeded step's body (thread
  isolation: the handler runs in the runtime's process);
- ``worker``: a worker process (``isolation="process"``) dies inside the body; the
  runtime lives on, and the harness kills it a seeded moment later;
- ``none``: the harness kills it at a seeded moment.

Executions of earlier rounds carry on (and recover) meanwhile. Then the workload
settles (no kills) and `check` holds the end to the record: every acknowledged
execution succeeded with its result; one success per step in its history; every
step's body ran, and none began after its success was recorded (what was
committed is kept, never run again); no dead letter.

    python -m tests.chaos.aws_chaos --rounds 12 --seed 7 [--dsn DSN]
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.chaos.aws_workload import STEPS, expected

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("commit", "invocation", "worker", "none")
PER_ROUND = 2
ROUND_DEADLINE_S = 30.0  # a self-kill not come by then: the harness kills it
SETTLE_DEADLINE_S = 120.0
POLL_S = 0.02
ALL_STEPS = (*STEPS, "end")


@dataclass
class Report:
    rounds: int = 0
    deaths: dict[str, int] = field(default_factory=dict)  # by how the process died
    executions: int = 0
    steps: int = 0
    violations: list[str] = field(default_factory=list)

    def summary(self) -> str:
        deaths = ", ".join(f"{k} {v}" for k, v in sorted(self.deaths.items()))
        return (f"{self.rounds} rounds ({deaths}); {self.executions} executions and "
                f"{self.steps} steps checked; {len(self.violations)} violations")


def plans(seed: int, rounds: int) -> list[dict[str, Any]]:
    """The rounds' plans: every kind of death as often as the others, in a seeded order."""
    rng = random.Random(seed)
    kinds = [KINDS[i % len(KINDS)] for i in range(rounds)]
    rng.shuffle(kinds)
    out = []
    for i, kind in enumerate(kinds):
        eids = [f"r{i}-{j}" for j in range(PER_ROUND)]
        fns = [rng.choice(["chain", "chain_p"]) for _ in eids]
        target: dict[str, Any] | None = None
        if kind != "none":
            target = {"eid": eids[0], "step": rng.choice(ALL_STEPS)}
            if kind in ("invocation", "worker"):
                fns[0] = "chain" if kind == "invocation" else "chain_p"
        out.append({"kill": kind, "target": target, "start": list(zip(eids, fns)),
                    "after_s": round(rng.uniform(0.2, 2.0), 2)})
    return out


def lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _workload(*args: str) -> list[str]:
    return [sys.executable, "-m", "tests.chaos.aws_workload", *args]


def _started(data: Path, eids: list[str]) -> bool:
    got = {line["e"] for line in lines(data / "record.jsonl") if line["k"] == "started"}
    return set(eids) <= got


def _wait(until: Any, deadline_s: float, proc: subprocess.Popen[bytes]) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end and proc.poll() is None:
        if until():
            return True
        time.sleep(POLL_S)  # the harness watches another process: wall-clock polling
    return bool(until())


def run_round(data: Path, plan: dict[str, Any], dsn: str | None, log: Any) -> str:
    """One round; how its process died."""
    args = ["round", str(data), json.dumps(plan)] + ([dsn] if dsn else [])
    proc = subprocess.Popen(_workload(*args), cwd=ROOT, stdout=log, stderr=log)
    try:
        kind, target = plan["kill"], plan["target"]
        eids = [eid for eid, _ in plan["start"]]
        if kind in ("commit", "invocation"):
            proc.wait(timeout=ROUND_DEADLINE_S)  # it kills itself
        else:
            if kind == "worker":
                marker = data / f"died-{target['eid']}-{target['step']}"
                _wait(lambda: marker.exists(), ROUND_DEADLINE_S, proc)
            else:
                _wait(lambda: _started(data, eids), ROUND_DEADLINE_S, proc)
            time.sleep(plan["after_s"])  # the seeded moment of the harness's kill
    except subprocess.TimeoutExpired:
        pass
    kind = plan["kill"]
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if kind == "worker":
            target = plan["target"]
            died = (data / f"died-{target['eid']}-{target['step']}").exists()
            return "worker died, then killed" if died else "worker (missed)"
        return "killed at a moment" if kind == "none" else f"{kind} (missed)"
    if proc.returncode != -signal.SIGKILL:
        return f"exit {proc.returncode}"
    return {"commit": "after a commit", "invocation": "in an invocation"}.get(kind, kind)


def settle(data: Path, dsn: str | None) -> dict[str, Any]:
    args = ["settle", str(data)] + (["{}", dsn] if dsn else [])
    done = subprocess.run(_workload(*args), cwd=ROOT, capture_output=True, text=True,
                          timeout=SETTLE_DEADLINE_S)
    if done.returncode != 0:
        raise RuntimeError(f"the settle run failed:\n{done.stderr[-4000:]}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _ms(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)


def check(data: Path, settled: dict[str, Any], report: Report) -> None:
    """The end held to the record (module docstring); violations into `report`."""
    started = [line["e"] for line in lines(data / "record.jsonl") if line["k"] == "started"]
    effects = lines(data / "effects.jsonl")
    bad = report.violations
    for eid in started:
        got = settled["executions"].get(eid)
        report.executions += 1
        if got is None:
            bad.append(f"{eid}: acknowledged, then lost")
            continue
        if (got["status"], got["result"]) != ("succeeded", expected(eid)):
            bad.append(f"{eid}: ended {got['status']} with {got['result']!r}")
        for step in ALL_STEPS:
            report.steps += 1
            wins = [ms for kind, name, ms in got["history"]
                    if kind == "StepSucceeded" and name == step]
            runs = [e["ms"] for e in effects if e["e"] == eid and e["s"] == step]
            if len(wins) != 1:
                bad.append(f"{eid}: step {step} succeeded {len(wins)} times in its history")
            if not runs:
                bad.append(f"{eid}: step {step}'s body never ran")
            if wins and any(ms > _ms(wins[0]) for ms in runs):
                bad.append(f"{eid}: step {step} ran again after its success was recorded")
    for dead in settled["dead_letters"]:
        bad.append(f"a dead letter: {dead}")


def run(data: Path, seed: int, rounds: int, dsn: str | None = None) -> Report:
    report = Report()
    data.mkdir(parents=True, exist_ok=True)
    with open(data.parent / f"{data.name}.log", "ab") as log:
        for plan in plans(seed, rounds):
            how = run_round(data, plan, dsn, log)
            report.rounds += 1
            report.deaths[how] = report.deaths.get(how, 0) + 1
    check(data, settle(data, dsn), report)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dsn", default=None, help="a PostgreSQL database (else SQLite)")
    parser.add_argument("--data", type=Path, default=None)
    ns = parser.parse_args()
    data = ns.data or Path(tempfile.mkdtemp(prefix="aws-chaos-")) / "data"
    report = run(data, ns.seed, ns.rounds, ns.dsn)
    print(report.summary())
    for v in report.violations:
        print("VIOLATION", v)
    if report.violations:
        print(f"reproduce with --seed {ns.seed} --rounds {ns.rounds}")
        sys.exit(1)


if __name__ == "__main__":
    main()
