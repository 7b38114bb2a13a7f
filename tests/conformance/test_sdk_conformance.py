"""The AWS SDK's own conformance handlers, unchanged, on alarmtop with the real SDK.

One test per requirement id of `aws-durable-execution-conformance-tests` 1.0.0:
the handler the SDK's templates map to it (`sdk_handlers`) is registered with
`rt.register_lambda` (with every other function of its suite's template, so a
chained invoke finds its target), started with the requirement's input, driven on
the VirtualClock, and checked with the project's matcher as the AWS runner checks
it: the history, the result and status, the callbacks the requirement sends (its
`CallbackActions`), and its `ExpectedLogs` against what the handler printed and
logged for that execution. Plugins are the SDK's own (`durable_execution(
plugins=[...])` in the handlers). What does not pass is listed, with why, in
`sdk_manifest`. Runs on both backends.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest

from tests.conformance import manifest, sdk_handlers, sdk_manifest
from tests.conformance.matcher import LogValidator, PlaceholderContext
from tests.conformance.runner import (
    EngineClient,
    Requirement,
    WheelMismatch,
    WheelUnavailable,
    ensure_wheel,
    load_requirements,
    validate,
)
from tests.conformance.sdk_logs import LogTap
from tests.environment import unavailable


def _params() -> list[Any]:
    params = []
    for suite, ids in manifest.SUITES.items():
        for rid in ids:
            marks: list[Any] = []
            why = sdk_manifest.reason(rid)
            if why is not None:
                marks.append(pytest.mark.skip(reason=why))
            elif rid in sdk_manifest.DIFFERS:
                marks.append(pytest.mark.xfail(strict=True, reason="alarmtop differs from "
                                               "AWS: " + sdk_manifest.DIFFERS[rid]))
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


@pytest.fixture(scope="session")
def sdk_folder() -> Path:
    try:
        import aws_durable_execution_sdk_python  # noqa: F401
    except ImportError:
        unavailable("the AWS SDK is not installed (pip install -e '.[aws]')")
    try:
        return sdk_handlers.find_folder()
    except sdk_handlers.HandlersMissing as exc:
        unavailable(str(exc))


@pytest.fixture(scope="session")
def templates(sdk_folder: Path) -> dict[str, list[sdk_handlers.Function]]:
    return sdk_handlers.read_templates(sdk_folder)


def test_sdk_manifest_is_whole(requirements: dict[str, Requirement],
                               templates: dict[str, list[sdk_handlers.Function]]) -> None:
    """Every requirement of the wheel has a handler; every handler a requirement or a
    place in the manifest's NO_REQUIREMENT; every listed id exists."""
    mapped = sdk_handlers.by_requirement(templates)
    assert set(requirements) - set(mapped) == set()
    assert set(mapped) - set(requirements) == sdk_manifest.NO_REQUIREMENT
    assert set(sdk_manifest.CANNOT_RUN) | set(sdk_manifest.DIFFERS) <= set(requirements)


@pytest.mark.parametrize("requirement_id", _params())
async def test_sdk_requirement(requirement_id: str, requirements: dict[str, Requirement],
                               templates: dict[str, list[sdk_handlers.Function]],
                               sdk_folder: Path, make_runtime: Any, clock: Any,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    req = requirements[requirement_id]
    fn = sdk_handlers.by_requirement(templates)[requirement_id]
    rt = await make_runtime()
    needed = {fn.resource} | sdk_handlers.targets(fn)
    for other in templates[fn.suite]:
        if other.resource not in needed:  # others may need AWS just to import (3-12)
            continue
        if requirement_id in sdk_manifest.IN_A_PROCESS and other is fn:
            module, _, attr = other.handler.rpartition(".")
            rt.register_lambda(other.resource, f"{module}:{attr}", isolation="process",
                               paths=[str(sdk_folder / "handlers")], timeout=other.timeout_s)
        else:
            rt.register_lambda(other.resource,
                               sdk_handlers.load_handler(sdk_folder, other.handler),
                               durable=other.durable, timeout=other.timeout_s)
    for key, value in sdk_handlers.environment(fn, rt.aws.place.function_arn).items():
        monkeypatch.setenv(key, value)
    ctx = PlaceholderContext()
    ctx.resolve_variables(req.data.get("Variables"))
    execution_id = f"ct-{requirement_id}-{secrets.token_hex(4)}"
    # In the test's own phase: pytest sets its capture of stdout as each phase starts.
    with LogTap() as tap:
        await rt.executions.start(fn.resource, ctx.substitute(req.data.get("Input")),
                                  execution_id=execution_id)
        outcome = await validate(req, ctx, EngineClient(rt, execution_id), clock)
    if outcome.passed and req.data.get("ExpectedLogs"):
        arn = (await rt.executions.describe(execution_id))["arn"]
        logs = LogValidator().validate(req.data["ExpectedLogs"], tap.records(arn), ctx)
        outcome.errors, outcome.passed = logs.errors, logs.success
    if not outcome.passed:
        pytest.fail(outcome.explain(), pytrace=False)
