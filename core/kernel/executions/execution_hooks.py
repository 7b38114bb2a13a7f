"""The execution hooks (see `core.hooks`): what the engine and the context tell
plugins, built from the records they already hold.

The call sites test the hook's tuple first (`if hooks.on_operation_start:`), so
nothing here runs without a plugin. End hooks that report what an event made
durable are held in the event's outbox and fire once its commit has landed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from alarmtop.core.kernel import outbox
from alarmtop.core.kernel.hooks import Hooks
from alarmtop.core.model.execution_errors import error_object
from alarmtop.core.model.hook_info import (
    InvocationEndInfo,
    InvocationStartInfo,
    InvocationStatus,
    OperationEndInfo,
    OperationStartInfo,
    UserFunctionEndInfo,
    UserFunctionOutcome,
    UserFunctionStartInfo,
)
from alarmtop.core.model.operations import ExecutionRecord, ExecutionStatus, OperationRecord

_STATUS = {
    ExecutionStatus.SUCCEEDED: InvocationStatus.SUCCEEDED,
    ExecutionStatus.FAILED: InvocationStatus.FAILED,
    ExecutionStatus.ABORTED: InvocationStatus.FAILED,
    ExecutionStatus.TIMED_OUT: InvocationStatus.FAILED,
    ExecutionStatus.SUSPENDED: InvocationStatus.PENDING,
    ExecutionStatus.NEEDS_HUMAN: InvocationStatus.PENDING,
}


def after_commit(fire: Callable[[bool], None]) -> None:
    """Call `fire(landed)` once the current event's commit landed or failed; at once
    (landed) outside an event."""
    box = outbox.current()
    if box is None:
        fire(True)
    else:
        box.hold(fire)


# -- invocations ------------------------------------------------------------------------

def invocation_started(hooks: Hooks, rec: ExecutionRecord, now_ms: int
                       ) -> InvocationStartInfo:
    info = InvocationStartInfo(rec.id, rec.name, rec.version, rec.invocations,
                                 rec.invocations == 1, now_ms, rec.created_ms, rec.trace)
    hooks.fire(hooks.on_invocation_start, info)
    return info


def invocation_ended(hooks: Hooks, start: InvocationStartInfo, rec: ExecutionRecord,
                     now_ms: Callable[[], int], died: BaseException | None) -> None:
    """Tell the end hook after the commit: the record's outcome, or RETRY when the
    invocation died (`died`) or its commit failed."""
    if not hooks.on_invocation_end:
        return
    if died is None:
        status = _STATUS.get(rec.status, InvocationStatus.PENDING)
        error = rec.error if status is InvocationStatus.FAILED else None
        execution_status = rec.status.value
    else:
        status, execution_status = InvocationStatus.RETRY, "running"
        error = {"ErrorType": type(died).__name__, "ErrorMessage": str(died)}

    def fire(landed: bool) -> None:
        if landed:
            info = InvocationEndInfo(start, status, now_ms(), execution_status, error)
        else:
            info = InvocationEndInfo(start, InvocationStatus.RETRY, now_ms(), "running", {
                "ErrorType": "CommitFailed",
                "ErrorMessage": "the invocation's outcome could not be made durable; it "
                                "runs again"})
        hooks.fire(hooks.on_invocation_end, info)

    after_commit(fire)


# -- operations -------------------------------------------------------------------------

def operation_started(hooks: Hooks, execution_id: str, op: OperationRecord,
                      now_ms: int) -> None:
    hooks.fire(hooks.on_operation_start, OperationStartInfo(
        execution_id, op.id, op.type, op.sub_type, op.name, op.parent_id, now_ms))


def operation_ended(hooks: Hooks, rec: ExecutionRecord, op: OperationRecord,
                    now_ms: int) -> None:
    """`op` reached its terminal status, durably (the caller knows it landed)."""
    hooks.fire(hooks.on_operation_end, OperationEndInfo(
        rec.id, op.id, op.type, op.sub_type, op.name, op.parent_id, op.status, op.started_ms,
        op.ended_ms if op.ended_ms is not None else now_ms,
        op.attempt or None, op.error, rec.trace))


def operations_ended_after_commit(hooks: Hooks, rec: ExecutionRecord,
                                  ops: list[OperationRecord], now_ms: Callable[[], int]) -> None:
    """Operations the service completed in this event (a wait's end, a callback's
    answer, a timeout): told once the event's commit landed."""
    if not hooks.on_operation_end or not ops:
        return

    def fire(landed: bool) -> None:
        if landed:
            for op in ops:
                operation_ended(hooks, rec, op, now_ms())

    after_commit(fire)


# -- step attempts ----------------------------------------------------------------------

def attempt_started(hooks: Hooks, execution_id: str, op: OperationRecord,
                    now_ms: int) -> UserFunctionStartInfo:
    info = UserFunctionStartInfo(execution_id, op.id, op.type, op.sub_type, op.name,
                                   op.parent_id, op.attempt, now_ms)
    hooks.fire(hooks.on_user_function_start, info)
    return info


def attempt_ended(hooks: Hooks, start: UserFunctionStartInfo, now_ms: int,
                  exc: BaseException | None, error: dict[str, Any] | None = None) -> None:
    outcome = UserFunctionOutcome.SUCCEEDED if exc is None else UserFunctionOutcome.FAILED
    if exc is not None and error is None:
        error = error_object(exc)
    hooks.fire(hooks.on_user_function_end, UserFunctionEndInfo(start, outcome, now_ms, error,
                                                                 exc))
