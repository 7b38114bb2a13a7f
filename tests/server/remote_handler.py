"""The handler `lambda_shim` serves in the tests of `endpoint=`: the real SDK, in a
process of its own, checkpointing over HTTP."""

from __future__ import annotations

from typing import Any

from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python.config import Duration


@durable_execution
def remote(event: Any, context: DurableContext) -> Any:
    """`n` steps, a one-second wait, then a callback named `approval`."""
    steps = [context.step(lambda _, i=i: f"s{i}", name=f"s{i}") for i in range(event["n"])]
    context.wait(Duration.from_seconds(1))
    verdict = context.create_callback(name="approval").result()
    return {"steps": steps, "verdict": verdict}
