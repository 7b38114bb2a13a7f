"""`register_lambda(isolation="process")`: SDK handlers in worker processes, where a
handler that ends its process fails one invocation (recorded as AWS records it,
`Runtime.ExitError`) and never the runtime. Real SDK, real processes, both backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from alarmtop.core.model.execution_errors import ValidationError
from tests.kernel.executions import aws_handlers as h


async def test_a_handler_runs_in_a_worker_process(make_runtime: Any, clock: Any) -> None:
    rt = await make_runtime()
    rt.register_lambda("fn", "tests.kernel.executions.aws_handlers:two_steps", isolation="process")
    await rt.executions.start("fn", "x", execution_id="p1")
    await clock.advance(3)
    d = await rt.executions.describe("p1")
    assert (d["status"], d["result"], d["invocations"]) == ("succeeded", "b:a:x", 2)
    assert h.RUNS.get(d["arn"]) is None  # its steps ran in another process


async def test_a_process_that_dies_fails_one_invocation(make_runtime: Any, clock: Any,
                                                        tmp_path: Path) -> None:
    rt = await make_runtime()
    rt.register_lambda("fn", h.exits_once, isolation="process")
    await rt.executions.start("fn", {"marker": str(tmp_path / "crashed")}, execution_id="p1")
    await clock.advance(5)
    d = await rt.executions.describe("p1")
    assert (d["status"], d["result"]) == ("succeeded", ["a", "b"])
    errors = [ev["InvocationCompletedDetails"].get("Error") for ev in d["history"]
              if ev["EventType"] == "InvocationCompleted"]
    assert errors[0]["Payload"]["ErrorType"] == "Runtime.ExitError" and errors[1] is None
    assert [ev["EventType"] for ev in d["history"]].count("StepSucceeded") == 2


def test_a_handler_for_processes_must_be_importable(tmp_path: Path) -> None:
    from alarmtop.core.kernel.executions.aws.functions import LambdaFunctions

    def local(event: Any, context: Any) -> None: ...
    with pytest.raises(ValidationError, match="module:attr"):
        LambdaFunctions().add("fn", local, isolation="process")
    with pytest.raises(ValidationError, match="endpoint"):
        LambdaFunctions().add("fn", h.two_steps, endpoint="http://127.0.0.1:9000")
