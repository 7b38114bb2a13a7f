"""The runner's own plumbing: fetching the wheel, reading it, failing when it should."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.conformance import manifest
from tests.conformance.runner import (
    Requirement,
    WheelMismatch,
    WheelUnavailable,
    ensure_wheel,
    load_requirements,
    run_requirement,
)


def test_a_local_wheel_that_is_not_the_pinned_one_is_an_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / manifest.WHEEL
    fake.write_bytes(b"not the wheel")
    monkeypatch.setenv("ALARMTOP_CONFORMANCE_WHEEL", str(fake))
    with pytest.raises(WheelMismatch):
        ensure_wheel(tmp_path)
    monkeypatch.setenv("ALARMTOP_CONFORMANCE_WHEEL", str(tmp_path / "missing.whl"))
    with pytest.raises(WheelUnavailable):
        ensure_wheel(tmp_path)


@pytest.mark.parametrize("failure", ["exit", "oserror", "timeout"])
def test_offline_means_unavailable_with_a_reason(tmp_path: Path, failure: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ALARMTOP_CONFORMANCE_WHEEL", raising=False)

    def fake_run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd
        assert f"{manifest.PACKAGE}=={manifest.VERSION}" in cmd
        if failure == "oserror":
            raise OSError("no pip")
        if failure == "timeout":
            raise subprocess.TimeoutExpired(cmd, 180)
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution\n")

    monkeypatch.setattr(subprocess, "run", fake_run)
    with pytest.raises(WheelUnavailable, match="offline"):
        ensure_wheel(tmp_path / "cache")


def test_requirements_are_read_from_the_wheel_by_file_stem(tmp_path: Path) -> None:
    wheel = tmp_path / "w.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"{manifest.REQUIREMENTS_DIR}/step/1-1.yaml", "description: one\nInput: x\n")
        zf.writestr(f"{manifest.REQUIREMENTS_DIR}/wait/2-4.yaml", "AsyncInvoke: true\n")
        zf.writestr("aws_durable_execution_conformance_tests/history.py", "")
    reqs = load_requirements(wheel)
    assert set(reqs) == {"1-1", "2-4"}
    assert (reqs["1-1"].suite, reqs["1-1"].description, reqs["1-1"].is_async) == (
        "step", "one", False)
    assert reqs["2-4"].is_async


STEP_EVENTS: list[dict[str, Any]] = [
    {"EventType": "StepStarted", "SubType": "Step", "EventId": 2, "Id": "${ID1}",
     "StepStartedDetails": {}},
    {"EventType": "StepSucceeded", "SubType": "Step", "EventId": 3, "Id": "${ID1}",
     "StepSucceededDetails": {"Result": {"Payload": '"Hello, ${IN}!"'}}},
    {"EventType": "InvocationCompleted", "EventId": 4, "InvocationCompletedDetails": {}},
]


async def test_a_sync_requirement_passes_and_a_wrong_expectation_fails(
        make_runtime: Any, clock: Any) -> None:
    data = {"Variables": {"IN": "${GEN_STR:6}"}, "Input": "${IN}",
            "ExpectedResult": {"ExecutionStatus": "SUCCEEDED", "Result": "Hello, ${IN}!"},
            "ExpectedExecutionHistory": STEP_EVENTS}
    rt = await make_runtime()
    ok = await run_requirement(Requirement("1-1", "step", data), rt, clock)
    assert ok.passed, ok.explain()
    assert ok.placeholders["ID1"] == "1"

    wrong = dict(data, ExpectedResult={"ExecutionStatus": "SUCCEEDED", "Result": "nope"})
    await rt.stop()  # each run on a runtime of its own, one at a time (one node on PostgreSQL)
    rt2 = await make_runtime()
    out = await run_requirement(Requirement("1-1", "step", wrong), rt2, clock)
    assert not out.passed and out.errors[0].startswith("Expected Result='nope'")

    shifted = dict(data, ExpectedExecutionHistory=[dict(e, EventId=e["EventId"] + 1)
                                                   for e in STEP_EVENTS])
    await rt2.stop()
    rt3 = await make_runtime()
    out = await run_requirement(Requirement("1-1", "step", shifted), rt3, clock)
    assert not out.passed and "EventType" in out.errors[0]


async def test_an_unmatched_callback_action_is_an_error_like_in_the_poller(
        make_runtime: Any, clock: Any) -> None:
    data = {"AsyncInvoke": True, "Input": None,
            "ExpectedResult": {"ExecutionStatus": "SUCCEEDED"},
            "CallbackActions": [{"CallbackName": "not-approval", "Operation": "success"}],
            "ExpectedExecutionHistory": [{"EventId": 2, "EventType": "CallbackStarted",
                                          "Name": "approval"}]}
    rt = await make_runtime()
    out = await run_requirement(Requirement("4-2", "callback", data), rt, clock)
    assert not out.passed
    assert out.errors[0].startswith("No matching CallbackAction for callback 'approval'")
    assert any("No new events" in e for e in out.errors)  # nobody completes it
