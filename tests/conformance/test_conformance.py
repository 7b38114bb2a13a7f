"""The AWS durable-execution conformance suite, run against this engine.

One test per requirement id of `aws-durable-execution-conformance-tests` 1.0.0
(see `manifest.py`): suites that are not run and requirements that cannot be
honoured are skipped with their reason; known engine discrepancies are strict
xfails. The wheel is fetched (and cached) on first use; offline, every test is
skipped saying so. Each requirement runs on its own runtime and VirtualClock.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance import handlers, manifest
from tests.conformance.runner import (
    Requirement,
    WheelMismatch,
    WheelUnavailable,
    ensure_wheel,
    load_requirements,
    run_requirement,
)


def _params() -> list[Any]:
    params = []
    for suite, ids in manifest.SUITES.items():
        for rid in ids:
            marks: list[Any] = []
            reason = manifest.skip_reason(rid)
            if reason is not None:
                marks.append(pytest.mark.skip(reason=reason))
            elif rid in manifest.ENGINE_DISCREPANCIES:
                marks.append(pytest.mark.xfail(
                    strict=True, reason="engine differs from AWS: "
                    + manifest.ENGINE_DISCREPANCIES[rid]))
            params.append(pytest.param(rid, id=f"{suite}/{rid}", marks=marks))
    return params


@pytest.fixture(scope="session")
def requirements() -> dict[str, Requirement]:
    try:
        wheel = ensure_wheel()
    except WheelUnavailable as exc:
        pytest.skip(f"conformance suite unavailable: {exc}")
    except WheelMismatch as exc:
        pytest.fail(str(exc))
    return load_requirements(wheel)


def test_manifest_lists_every_requirement_of_the_wheel(
        requirements: dict[str, Requirement]) -> None:
    in_wheel = {(r.suite, r.id) for r in requirements.values()}
    in_manifest = {(suite, rid) for suite, ids in manifest.SUITES.items() for rid in ids}
    assert in_wheel == in_manifest


def test_every_requirement_that_runs_has_a_handler() -> None:
    runnable = {rid for ids in manifest.SUITES.values() for rid in ids
                if manifest.skip_reason(rid) is None}
    assert runnable - set(handlers.HANDLERS) == set()
    assert set(manifest.ENGINE_DISCREPANCIES) <= runnable


@pytest.mark.parametrize("requirement_id", _params())
async def test_requirement(requirement_id: str, requirements: dict[str, Requirement],
                           make_runtime: Any, clock: Any) -> None:
    req = requirements[requirement_id]
    rt = await make_runtime()
    outcome = await run_requirement(req, rt, clock)
    if not outcome.passed:
        pytest.fail(outcome.explain(), pytrace=False)
