"""Per-suite pass counts of the conformance run, printed at the end of the session."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance import manifest

_OUTCOMES: dict[str, str] = {}  # requirement id -> passed | failed | xfailed | skipped


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "::test_requirement[" not in report.nodeid:
        return
    rid = report.nodeid.rsplit("/", 1)[-1].rstrip("]")
    if report.skipped:
        _OUTCOMES[rid] = "xfailed" if hasattr(report, "wasxfail") else "skipped"
    elif report.failed:
        _OUTCOMES[rid] = "failed"
    elif report.when == "call":
        _OUTCOMES.setdefault(rid, "passed")


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


def pytest_terminal_summary(terminalreporter: Any) -> None:
    lines = summary_lines()
    if lines:
        terminalreporter.section("AWS durable execution conformance (passed/total)")
        for line in lines:
            terminalreporter.write_line(line)
