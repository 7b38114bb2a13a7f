"""Per-suite pass counts of the conformance runs, printed at the end of the session:
the native handlers (`test_conformance`), and the AWS SDK's own handlers on alarmtop
(`test_sdk_conformance`), per backend, naming every requirement that did not pass
and why."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance import manifest, sdk_manifest

_OUTCOMES: dict[str, str] = {}  # requirement id -> passed | failed | xfailed | skipped
# (backend, requirement id) -> outcome, for the SDK's handlers
_SDK: dict[tuple[str, str], str] = {}


def _outcome(report: pytest.TestReport) -> str | None:
    if report.skipped:
        return "xfailed" if hasattr(report, "wasxfail") else "skipped"
    if report.failed:
        return "failed"
    return "passed" if report.when == "call" else None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    got = _outcome(report)
    if got is None:
        return
    if "::test_requirement[" in report.nodeid:
        rid = report.nodeid.rsplit("/", 1)[-1].rstrip("]")
        if got != "passed" or rid not in _OUTCOMES:
            _OUTCOMES[rid] = got
    elif "::test_sdk_requirement[" in report.nodeid:
        param = report.nodeid.split("[", 1)[1].rstrip("]")
        backend, rid = param.split("-", 1)[0], param.rsplit("/", 1)[-1]
        if got != "passed" or (backend, rid) not in _SDK:
            _SDK[(backend, rid)] = got


def summary_lines() -> list[str]:
    lines = []
    for suite, ids in manifest.SUITES.items():
        got = [_OUTCOMES.get(rid) for rid in ids]
        if not any(got):
            continue
        passed = got.count("passed")
        extra = ", ".join(f"{got.count(k)} {k}" for k in ("failed", "xfailed", "skipped")
                          if got.count(k))
        note = f" ({extra})" if extra else ""
        if suite in manifest.SUITES_NOT_RUN:
            note = f" (not run: {manifest.SUITES_NOT_RUN_SHORT.get(suite, 'see skip reason')})"
        lines.append(f"{suite}: {passed}/{len(ids)}{note}")
    return lines


def sdk_summary_lines() -> list[str]:
    lines = []
    for backend in sorted({b for b, _ in _SDK}):
        lines.append(f"[{backend}]")
        missed: list[str] = []
        for suite, ids in manifest.SUITES.items():
            got = {rid: _SDK.get((backend, rid)) for rid in ids}
            if not any(got.values()):
                continue
            passed = sum(1 for v in got.values() if v == "passed")
            lines.append(f"  {suite}: {passed}/{len(ids)}")
            for rid, outcome in got.items():
                if outcome not in ("passed", None):
                    why = sdk_manifest.CANNOT_RUN.get(rid) or sdk_manifest.DIFFERS.get(rid) \
                        or "see the failure above"
                    missed.append(f"  {rid} {outcome}: {why}")
        lines += missed
    if _SDK:
        lines.append("  no requirement in the 1.0.0 wheel (not run): "
                     + ", ".join(sorted(sdk_manifest.NO_REQUIREMENT,
                                        key=lambda r: int(r.split("-")[1]))))
    return lines


def pytest_terminal_summary(terminalreporter: Any) -> None:
    lines = summary_lines()
    if lines:
        terminalreporter.section("AWS durable execution conformance (passed/total)")
        for line in lines:
            terminalreporter.write_line(line)
    sdk = sdk_summary_lines()
    if sdk:
        terminalreporter.section("The AWS SDK's own handlers on alarmtop (passed/total)")
        for line in sdk:
            terminalreporter.write_line(line)
