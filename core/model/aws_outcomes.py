"""Operations the outside completes for an AWS SDK execution: a callback answered, a
chained invoke's execution ended (pure). Each change counts as one the handler has
not seen, and makes its history event."""

from __future__ import annotations

from typing import Any

from alarmtop.core.model.aws_state import AwsState
from alarmtop.core.model.operations import OperationRecord, OpStatus, error_payload, payload

Event = tuple[str, OperationRecord | None, dict[str, Any]]
# A child execution's end (its status) as its invoke's: status and event.
_INVOKE = {"succeeded": (OpStatus.SUCCEEDED, "ChainedInvokeSucceeded"),
           "failed": (OpStatus.FAILED, "ChainedInvokeFailed"),
           "timed_out": (OpStatus.TIMED_OUT, "ChainedInvokeTimedOut"),
           "aborted": (OpStatus.STOPPED, "ChainedInvokeStopped")}


def invoke_ended(op: OperationRecord, status: str, result: str | None,
                 error: dict[str, Any] | None, now_ms: int, aws: AwsState) -> Event:
    """The invoke `op` takes its child's end (`status`: the child execution's)."""
    new, kind = _INVOKE.get(status, (OpStatus.FAILED, "ChainedInvokeFailed"))
    op.status, op.ended_ms = new, now_ms
    op.extra["t"] = aws.next_touch()
    if new is OpStatus.SUCCEEDED:
        op.result = result
        return kind, op, {"Result": payload(result)}
    op.error = error or {"ErrorType": "ChainedInvoke.Failed",
                         "ErrorMessage": f"the invoked execution ended {status}"}
    return kind, op, {"Error": error_payload(op.error)}


def callback_ended(op: OperationRecord, succeeded: bool, result: str | None,
                   error: dict[str, Any] | None, now_ms: int, aws: AwsState) -> Event:
    """A callback answered from outside: success (its payload, byte for byte) or failure."""
    op.ended_ms, op.timeout_at_ms, op.heartbeat_at_ms = now_ms, None, None
    op.extra["t"] = aws.next_touch()
    if succeeded:
        op.status, op.result = OpStatus.SUCCEEDED, result
        return "CallbackSucceeded", op, {"Result": payload(result)}
    op.status, op.error = OpStatus.FAILED, error or {}
    return "CallbackFailed", op, {"Error": error_payload(op.error)}
