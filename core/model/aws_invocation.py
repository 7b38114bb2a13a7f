"""An invocation of a Lambda-style function: what its answer means, and what a failed
one leads to (pure).

The SDK's handler answers `{Status: SUCCEEDED|FAILED|PENDING, Result?, Error?}`. A
raise (the SDK raises to have the invocation retried), a death, a timeout or an
answer that makes no sense (PENDING with nothing to wait for, a result over the
response limit) is a failed invocation: it runs again after the function's retry
policy's delay, and once the retries are used up the execution becomes a dead
letter (it waits for an operator to re-arm it; it is not failed silently).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from alarmtop.core.model.alarm_policy import RetryPolicy, retry_after
from alarmtop.core.model.aws_limits import AwsLimits
from alarmtop.core.model.aws_state import AwsState
from alarmtop.core.model.operations import OperationRecord, OpStatus, OpType

EXIT_ERROR = {"ErrorType": "Runtime.ExitError",
              "ErrorMessage": "the invocation ended without answering (its process died or "
                              "the runtime stopped)"}
TIMEOUT_ERROR = "Sandbox.Timedout"


@dataclass(frozen=True)
class Ending:
    """What an invocation's answer means: `succeeded`, `failed`, `pending` or `invalid`
    (a failed invocation, `error` says why)."""

    kind: str
    result: str | None = None
    error: dict[str, Any] | None = None


def _invalid(message: str) -> Ending:
    return Ending("invalid", error={"ErrorType": "Runtime.InvalidResponse",
                                    "ErrorMessage": message})


def read_output(out: Any, limits: AwsLimits) -> Ending:
    if not isinstance(out, dict):
        return _invalid(f"the handler answered {type(out).__name__}, not an output object")
    status = out.get("Status")
    if status == "SUCCEEDED":
        result = out.get("Result")
        if result is not None and not isinstance(result, str):
            return _invalid("Result must be JSON text")
        if result is not None and len(result.encode()) > limits.response_bytes:
            return Ending("invalid", error={
                "ErrorType": "Function.ResponseSizeTooLarge",
                "ErrorMessage": f"the response is {len(result.encode())} bytes; the limit "
                                f"is {limits.response_bytes}"})
        return Ending("succeeded", result=result)
    if status == "FAILED":
        error = out.get("Error")
        return Ending("failed", error=error if isinstance(error, dict) else {
            "ErrorType": "Unknown", "ErrorMessage": "the execution failed without an error"})
    if status == "PENDING":
        return Ending("pending")
    return _invalid(f"unknown invocation status {str(status)[:40]!r}")


def waiting_on(ops: Iterable[OperationRecord]) -> tuple[bool, bool]:
    """(something is pending, something is ready to run now) among `ops`."""
    pending = ready = False
    for op in ops:
        if op.status is OpStatus.READY:
            ready = True
        elif op.status is OpStatus.PENDING or (
                op.status is OpStatus.STARTED
                and op.type in (OpType.WAIT, OpType.CALLBACK, OpType.CHAINED_INVOKE)):
            pending = True
    return pending, ready


def failed(state: AwsState, error: dict[str, Any], policy: RetryPolicy, now_ms: int,
           rng: random.Random | None = None) -> None:
    """Count a failed invocation: its retry time, or (retries used up) a dead letter."""
    state.failures += 1
    state.last_failure = error
    delay = retry_after(policy, RuntimeError(error.get("ErrorMessage", "")),
                        state.failures - 1, rng)
    if delay is None:
        state.retry_at_ms = None
        state.dead_pending = (f"{state.failures} invocations in a row failed; the last: "
                              f"{error.get('ErrorType')}: {error.get('ErrorMessage')}")
    else:
        state.retry_at_ms = now_ms + round(delay * 1000)


def succeeded(state: AwsState) -> None:
    """A clean invocation (it answered): the count of failures starts again."""
    state.failures, state.last_failure, state.retry_at_ms = 0, None, None


def envelope(arn: str, token: str, operations: list[dict[str, Any]], marker: str | None,
             updated: list[str]) -> dict[str, Any]:
    """The Lambda invocation input of a durable function (its JSON envelope)."""
    return {"DurableExecutionArn": arn, "CheckpointToken": token,
            "InitialExecutionState": {"Operations": operations, "NextMarker": marker or ""},
            "UpdatedOperationIds": list(updated)}


def result_text(value: Any) -> str:
    return json.dumps(value)
