"""An execution's timers as plain data: what falls due when, and why.

An execution has one alarm (the soonest of these), but it can wait on several
things at once (branches of a `parallel` each on a wait, a callback with both a
timeout and a heartbeat deadline, the execution timeout behind all of them).
Every backend keeps these rows in a table written in the same transaction as the
checkpoint that changed them, so a listing of every pending timer, soonest first,
is one indexed query and never disagrees with the log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from alarmtop.core.model.operations import ExecutionRecord, OperationRecord, OpStatus, OpType

EXECUTION_TIMER = ""  # the op id of the execution's own timer (its timeout)


@dataclass(frozen=True)
class Timer:
    op_id: str  # EXECUTION_TIMER for the execution timeout
    kind: str  # wait | retry | poll | callback_timeout | heartbeat | execution_timeout
    due_ms: int
    name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"op_id": self.op_id or None, "kind": self.kind, "due_ms": self.due_ms,
                "name": self.name}


def may_hold_timers(op: OperationRecord) -> bool:
    """Whether `op` holds or ever held a timer (a plain step that never retried did
    not: its checkpoints need not touch the timer rows, the hot path of a step)."""
    return (op.type is OpType.WAIT or op.next_attempt_ms is not None
            or op.timeout_at_ms is not None or op.heartbeat_at_ms is not None)


def op_timers(op: OperationRecord) -> list[Timer]:
    """The timers `op` holds as it is now (none once it is done)."""
    if op.status is OpStatus.PENDING and op.next_attempt_ms is not None:
        kind = "poll" if op.sub_type == "WaitForCondition" else "retry"
        return [Timer(op.id, kind, op.next_attempt_ms, op.name)]
    if op.status is not OpStatus.STARTED:
        return []
    out: list[Timer] = []
    if op.type is OpType.WAIT and op.scheduled_end_ms is not None:
        out.append(Timer(op.id, "wait", op.scheduled_end_ms, op.name))
    if op.timeout_at_ms is not None:
        out.append(Timer(op.id, "callback_timeout", op.timeout_at_ms, op.name))
    if op.heartbeat_at_ms is not None:
        out.append(Timer(op.id, "heartbeat", op.heartbeat_at_ms, op.name))
    return out


def execution_timers(rec: ExecutionRecord) -> list[Timer]:
    """The execution's own timer: its timeout, unless it has finished."""
    at = rec.timeout_at_ms
    if rec.finished or at is None:
        return []
    return [Timer(EXECUTION_TIMER, "execution_timeout", at, rec.name)]
