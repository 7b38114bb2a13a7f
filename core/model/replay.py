"""Replay decisions as pure functions: matching, resolving, status changes, resets.

History in, decisions out (the Temporal SDK's shape): nothing here awaits, writes
or reads a clock. `match` says whether a call of the handler is the operation the
log recorded at its position; `resolve` says what a recorded operation replays
as (a value, an error, a suspension, or "run it"); `advance` is the one place an
operation's status changes, through a table that refuses an illegal change;
`reset_plan` and `fork_point` decide what a redrive or a fork keeps.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from alarmtop.core.model.divergence import Divergence, Shape
from alarmtop.core.model.execution_errors import (
    IllegalTransition,
    NonDeterministicExecutionError,
    ValidationError,
)
from alarmtop.core.model.operations import (
    ExecutionStatus,
    OperationRecord,
    OpStatus,
    OpType,
    iso,
)

HUMAN = "HumanDecision"  # the sub-type of a callback that waits for an operator

S = OpStatus
# Which status an operation may move to from each status. A new record starts
# STARTED (READY for a step about to run); a terminal one never changes again.
OP_TRANSITIONS: Mapping[OpStatus, frozenset[OpStatus]] = {
    # STARTED -> STARTED: an attempt cut short (a crash) begins again.
    S.STARTED: frozenset({S.STARTED, S.PENDING, S.SUCCEEDED, S.FAILED, S.TIMED_OUT,
                          S.CANCELLED, S.STOPPED}),
    S.READY: frozenset({S.STARTED, S.CANCELLED}),
    S.PENDING: frozenset({S.READY, S.STARTED, S.CANCELLED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.TIMED_OUT: frozenset(),
    S.CANCELLED: frozenset(),
    S.STOPPED: frozenset(),
}

E = ExecutionStatus
EXECUTION_TRANSITIONS: Mapping[ExecutionStatus, frozenset[ExecutionStatus]] = {
    E.RUNNING: frozenset({E.RUNNING, E.SUSPENDED, E.NEEDS_HUMAN, E.SUCCEEDED, E.FAILED,
                          E.TIMED_OUT, E.ABORTED}),
    E.SUSPENDED: frozenset({E.RUNNING, E.SUSPENDED, E.NEEDS_HUMAN, E.FAILED, E.TIMED_OUT,
                            E.ABORTED}),
    E.NEEDS_HUMAN: frozenset({E.RUNNING, E.NEEDS_HUMAN, E.FAILED, E.TIMED_OUT, E.ABORTED}),
    # Only a redrive brings a finished execution back, and only from these two.
    E.FAILED: frozenset({E.RUNNING}),
    E.TIMED_OUT: frozenset({E.RUNNING}),
    E.SUCCEEDED: frozenset(),
    E.ABORTED: frozenset(),
}


def advance(op: OperationRecord, to: OpStatus) -> OperationRecord:
    """Move `op` to status `to`, or raise `IllegalTransition` (and change nothing)."""
    if to not in OP_TRANSITIONS[op.status]:
        raise IllegalTransition("operation", op.id, op.status.value, to.value)
    op.status = to
    return op


def advance_execution(current: ExecutionStatus, to: ExecutionStatus, execution_id: str
                      ) -> ExecutionStatus:
    """The execution's next status `to`, checked against the table."""
    if to not in EXECUTION_TRANSITIONS[current]:
        raise IllegalTransition("execution", execution_id, current.value, to.value)
    return to


# -- matching -------------------------------------------------------------------------


def shape_of(rec: OperationRecord) -> Shape:
    return Shape(rec.type, rec.sub_type, rec.name)


FIX_HINT = ("; the handler code changed for a running execution. Deploy the old code under "
            "its version, or abort this execution")


def match(rec: OperationRecord | None, op_id: str, op_type: OpType, sub_type: str,
          name: str | None, index: int = 0) -> OperationRecord | None:
    """The record for a call (`op_type`, `sub_type`, `name`) at `op_id`, None when the
    log has none yet; raises `NonDeterministicExecutionError` when the log recorded
    another operation there. (Fields, not a `Shape`: it runs for every operation.)"""
    if rec is None or (rec.type is op_type and rec.sub_type == sub_type
                       and rec.name == name):
        return rec
    found = Divergence(op_id, index, shape_of(rec), Shape(op_type, sub_type, name))
    raise NonDeterministicExecutionError(found.message() + FIX_HINT, op_id, found)


# -- resolving ------------------------------------------------------------------------


class Outcome(enum.Enum):
    RUN = "run"  # nothing decisive recorded: run (or resume) the operation
    VALUE = "value"  # return the recorded result
    ERROR = "error"  # raise the recorded error
    SUSPEND = "suspend"  # the invocation cannot go on until a timer or the outside


# Operations the service completes (a timer, a callback, a child): until then, replay
# suspends on them; a step or a context not done is resumed instead.
_COMPLETED_OUTSIDE = frozenset({OpType.WAIT, OpType.CALLBACK, OpType.CHAINED_INVOKE})


@dataclass(frozen=True)
class Resolution:
    outcome: Outcome
    text: str | None = None
    error: dict[str, Any] | None = None
    until_ms: int | None = None
    status: OpStatus | None = None


RUN = Resolution(Outcome.RUN)


def resolve(rec: OperationRecord | None, now_ms: int) -> Resolution:
    """What the recorded operation `rec` replays as at `now_ms` (the one check every
    operation makes before it runs anything)."""
    if rec is None:
        return RUN
    if rec.status is OpStatus.SUCCEEDED:
        return Resolution(Outcome.VALUE, rec.result, status=rec.status)
    if rec.done:
        return Resolution(Outcome.ERROR, error=rec.error or {}, status=rec.status)
    if rec.type in _COMPLETED_OUTSIDE:
        until = rec.scheduled_end_ms if rec.type is OpType.WAIT else None
        return Resolution(Outcome.SUSPEND, until_ms=until, status=rec.status)
    if rec.status is OpStatus.PENDING and (rec.next_attempt_ms or 0) > now_ms:
        return Resolution(Outcome.SUSPEND, until_ms=rec.next_attempt_ms, status=rec.status)
    return Resolution(Outcome.RUN, status=rec.status)


def suspend_reason(rec: OperationRecord) -> str:
    """What an invocation suspended on `rec` waits for, in words (`blocked_on`)."""
    label = repr(rec.name or rec.id)
    if rec.type is OpType.WAIT:
        return f"waiting {rec.duration_s}s until {iso(rec.scheduled_end_ms or 0)}"
    if rec.type is OpType.CALLBACK and rec.sub_type == HUMAN:
        message = (rec.error or {}).get("ErrorMessage", "")
        return f"needs a human: {rec.name} failed ({message})"
    if rec.type is OpType.CALLBACK:
        return f"waiting for callback {label}"
    if rec.type is OpType.CHAINED_INVOKE:
        return f"waiting for {rec.extra.get('function')} ({rec.extra.get('child')})"
    if rec.sub_type == "WaitForCondition":
        return f"condition {label} polls again later"
    return f"step {label} retries at {iso(rec.next_attempt_ms or 0)}"


# -- positions, resets and forks ------------------------------------------------------


def position(op_id: str) -> tuple[int, ...]:
    """An operation id as its path of positions: "2-1" is (2, 1); replay order."""
    return tuple(int(p) for p in op_id.split("-"))


def is_reset(op_id: str, from_id: str) -> bool:
    """Whether `op_id` is reset when replay restarts at `from_id`: the operation
    itself, what comes after it in replay order, and the contexts that hold it
    (a context kept done would replay its recorded outcome and never reach it)."""
    mine, start = position(op_id), position(from_id)
    return mine >= start or start[:len(mine)] == mine


def mark_is_reset(key: str, from_id: str) -> bool:
    """Whether a recorded `now()`/`random()` value (see `mark_key`) is reset with
    `from_id`: it is when the operation it came after is."""
    anchor = key.split("/", 1)[0]
    if anchor == "0":
        return False
    if anchor.endswith("-0"):  # the first value taken inside the context `anchor[:-2]`
        anchor = anchor[:-2]
    return is_reset(anchor, from_id)


def mark_key(context_id: str | None, counter: int, kind: str, n: int) -> str:
    """The key of the `n`-th `kind` value taken in a context after its `counter`-th
    operation: stable across replays as long as the handler is."""
    anchor = f"{context_id}-{counter}" if context_id else str(counter)
    return f"{anchor}/{kind}/{n}"


@dataclass(frozen=True)
class Plan:
    """What a redrive or a fork keeps: `from_id` (None: nothing is reset) and the
    operations and recorded values that stay."""

    from_id: str | None
    kept: tuple[str, ...]
    reset: tuple[str, ...]
    kept_marks: tuple[str, ...]
    reset_marks: tuple[str, ...]


def plan_from(ops: Iterable[OperationRecord], marks: Iterable[str],
              from_id: str | None) -> Plan:
    """Split the log at `from_id` (None keeps everything)."""
    ids = sorted((op.id for op in ops), key=position)
    keys = sorted(marks)
    if from_id is None:
        return Plan(None, tuple(ids), (), tuple(keys), ())
    return Plan(from_id, tuple(i for i in ids if not is_reset(i, from_id)),
                tuple(i for i in ids if is_reset(i, from_id)),
                tuple(k for k in keys if not mark_is_reset(k, from_id)),
                tuple(k for k in keys if mark_is_reset(k, from_id)))


FAILED_STATES = frozenset({OpStatus.FAILED, OpStatus.TIMED_OUT, OpStatus.CANCELLED})


def first_failed(ops: Iterable[OperationRecord]) -> str | None:
    """The first failed operation in replay order (a leaf before the context that
    failed because of it), None when none failed."""
    failed = [op.id for op in ops if op.status in FAILED_STATES]
    if not failed:
        return None
    # Deepest first among those that hold one another: the step, not its context.
    failed.sort(key=position)
    first = failed[0]
    for other in failed[1:]:
        if position(other)[:len(position(first))] == position(first):
            first = other
        else:
            break
    return first


def redrive_plan(ops: Iterable[OperationRecord], marks: Iterable[str]) -> Plan:
    """What a redrive keeps: everything before the first failed operation. With none
    failed (a timeout, or the handler's own raise) it keeps everything: replay
    carries on from where the execution stopped."""
    ops = list(ops)
    return plan_from(ops, marks, first_failed(ops))


def fork_point(ops: Iterable[OperationRecord], from_step: str) -> str:
    """The operation id a fork starts from: `from_step` is an operation id, or a
    name that occurs once. Refuses (ValidationError) an unknown or repeated name."""
    ops = list(ops)
    if not isinstance(from_step, str) or not from_step:
        raise ValidationError(f"from_step names a step or gives an operation id, not "
                              f"{from_step!r}")
    if any(op.id == from_step for op in ops):
        return from_step
    named = sorted((op.id for op in ops if op.name == from_step), key=position)
    if len(named) == 1:
        return named[0]
    if not named:
        known = sorted({op.name for op in ops if op.name}) or ["none"]
        raise ValidationError(f"the execution has no operation named or numbered "
                              f"{from_step!r}; its names: {', '.join(known)}")
    raise ValidationError(f"the step name {from_step!r} occurs {len(named)} times (operation "
                          f"ids {', '.join(named)}); give the operation id of the one to fork "
                          "from")
