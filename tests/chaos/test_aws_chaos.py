"""The chaos harness's AWS SDK workload on both backends (`aws_chaos.py`): rounds of a
runtime running the real SDK's handlers killed after a checkpoint's commit and
before its answer, inside an invocation, and after a worker process died inside
one (``isolation="process"``), then settled and checked: 0 violations. And the
checker itself, on a made-up end, catches what it is there to catch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.environment import required

try:
    import aws_durable_execution_sdk_python  # noqa: F401
except ImportError:  # pragma: no cover - the aws extra is missing
    if required():
        raise
    pytest.skip("the AWS SDK is not installed (pip install -e '.[aws]')",
                allow_module_level=True)

from tests.chaos.aws_chaos import ALL_STEPS, Report, check, run
from tests.chaos.aws_workload import expected

SEED = 7
ROUNDS = 8  # each kind of death twice


@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_kills_of_an_aws_sdk_workload_lose_nothing(tmp_path: Path, backend: str,
                                                   request: pytest.FixtureRequest) -> None:
    dsn = request.getfixturevalue("pg_dsn") if backend == "postgres" else None
    report = run(tmp_path / "data", SEED, ROUNDS, dsn)
    assert report.violations == [], report.summary()
    assert report.deaths == {"after a commit": 2, "in an invocation": 2,
                             "killed at a moment": 2, "worker died, then killed": 2}, \
        report.summary()
    # Each round starts two executions; a death may land before the second start was
    # acknowledged (sooner on a loaded machine), and only acknowledged ones are held
    # to the record: at least one a round, every one with all its steps checked.
    assert ROUNDS <= report.executions <= ROUNDS * 2, report.summary()
    assert report.steps == report.executions * 4, report.summary()


def write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_checker_catches_loss_a_second_success_a_rerun_and_a_dead_letter(
        tmp_path: Path) -> None:
    write(tmp_path / "record.jsonl", [{"k": "started", "e": e, "fn": "chain"}
                                      for e in ("ok", "twice", "rerun", "lost")])
    at = "2025-01-01T00:00:01+00:00"  # 1735689601000 ms
    effects = [{"e": e, "s": s, "ms": 1735689600000} for e in ("ok", "twice", "rerun")
               for s in ALL_STEPS]
    write(tmp_path / "effects.jsonl", [*effects, {"e": "rerun", "s": "s1", "ms": 1735689601001}])

    def ended(eid: str, extra: list[list[str]] | None = None) -> dict[str, Any]:
        history = [["StepSucceeded", s, at] for s in ALL_STEPS] + (extra or [])
        return {"status": "succeeded", "result": expected(eid), "history": history}
    settled = {"executions": {"ok": ended("ok"),
                              "twice": ended("twice", [["StepSucceeded", "s2", at]]),
                              "rerun": ended("rerun")},
               "dead_letters": ["Execution/x"]}
    report = Report()
    check(tmp_path, settled, report)
    assert report.violations == [
        "twice: step s2 succeeded 2 times in its history",
        "rerun: step s1 ran again after its success was recorded",
        "lost: acknowledged, then lost",
        "a dead letter: Execution/x"]
