"""What the conformance runner runs, and why it does not run the rest.

Pinned to `aws-durable-execution-conformance-tests` 1.0.0. Every requirement id
of the package is listed in `SUITES`; `test_conformance.py` turns each into one
test, so nothing is left out silently:

* a suite in `SUITES_NOT_RUN` is reported as skipped with its reason;
* a requirement in `CANNOT_HONOUR` is reported as skipped with its reason;
* a requirement in `ENGINE_DISCREPANCIES` runs and is expected to fail
  (`xfail(strict=True)`): the engine behaves differently from AWS there. When the
  engine is fixed the test passes, strict xfail turns that into a failure, and
  the entry must be removed here.
"""

from __future__ import annotations

PACKAGE = "aws-durable-execution-conformance-tests"
VERSION = "1.0.0"
WHEEL = "aws_durable_execution_conformance_tests-1.0.0-py3-none-any.whl"
# sha256 of the wheel on PyPI; a download that differs is an error, not a skip.
WHEEL_SHA256 = "59b46cda93c0cbfed6a80f342ab0b93542ad8841196200a15fc716ebaa619c30"
REQUIREMENTS_DIR = "aws_durable_execution_conformance_tests/test_requirements"


def _ids(prefix: int, count: int) -> tuple[str, ...]:
    return tuple(f"{prefix}-{n}" for n in range(1, count + 1))


# Every requirement of the package, per suite folder (checked against the wheel).
SUITES: dict[str, tuple[str, ...]] = {
    "step": _ids(1, 20),
    "wait": _ids(2, 5),
    "child": _ids(3, 18),
    "callback": _ids(4, 19),
    "invoke": _ids(5, 16),
    "wait_for_condition": _ids(6, 13),
    "wait_for_callback": _ids(7, 15),
    "parallel": _ids(8, 22),
    "map": _ids(9, 20),
    "plugin": _ids(10, 7),
}

# Suites that are not run at all (with why). The plugin suite runs: the engine has the
# SDK's hooks (`alarmtop.core.kernel.hooks`), and its plugins' records are checked in-process.
SUITES_NOT_RUN: dict[str, str] = {}

SUITES_NOT_RUN_SHORT: dict[str, str] = {}

# Requirements of the suites that are run, which cannot be honoured (with why).
CANNOT_HONOUR: dict[str, str] = {
    "1-7": "cannot be honoured: an optional requirement about the SDK's "
           "`step_context.logger` writing structured lines to CloudWatch Logs; steps here "
           "are called as fn(*args) with no StepContext/logger and there is no CloudWatch, "
           "so its ExpectedLogs cannot be checked for what they mean",
}

# Requirements that fail because the engine differs from AWS: id -> what differs.
# Filled from actual runs; see the closing report for the suggested engine fixes.
ENGINE_DISCREPANCIES: dict[str, str] = {
}

# Requirements whose ExpectedLogs are checked against the lines logged in-process
# (there is no CloudWatch): those that only count how often a step or child body ran
# (the lines its bodies logged, which is what those counts observe), and the plugin
# suite (the JSON records its plugins emit from the engine's lifecycle hooks, where
# the SDK's plugins print them to stdout; the step log line of 10-1 comes from the
# step body).
LOGS_FROM_HANDLER: frozenset[str] = frozenset({"1-17", "1-18", "3-11", "3-17",
                                               *SUITES["plugin"]})


def suite_of(requirement_id: str) -> str:
    for suite, ids in SUITES.items():
        if requirement_id in ids:
            return suite
    raise KeyError(requirement_id)


def skip_reason(requirement_id: str) -> str | None:
    suite = suite_of(requirement_id)
    if suite in SUITES_NOT_RUN:
        return SUITES_NOT_RUN[suite]
    return CANNOT_HONOUR.get(requirement_id)
