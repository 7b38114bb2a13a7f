"""A checkpoint of the AWS SDK, decided: which updates are legal, what they change,
which history events they make (pure).

`apply_checkpoint` takes the execution's operations and bookkeeping, and the
checked updates of one `CheckpointDurableExecution` call, in order. Every update is
validated against the state the updates before it left (an action must be one its
operation type has, from a status that allows it, with the metadata the
operation was started with; a parent must be a context; at most one EXECUTION
update, the last). One refusal refuses the whole call and changes nothing (it
works on copies); otherwise it returns the operations changed, the history events
to append, in update order, and what the driver must do next (finish the
execution, start a chained invoke's target).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from alarmtop.core.model.aws_errors import invalid
from alarmtop.core.model.aws_limits import LIMIT_ERROR, AwsLimits
from alarmtop.core.model.aws_state import AwsState
from alarmtop.core.model.aws_wire import Update
from alarmtop.core.model.operations import (
    OperationRecord,
    OpStatus,
    OpType,
    error_payload,
    iso,
    payload,
)

S = OpStatus
VALID_ACTIONS: Mapping[str, frozenset[str]] = {
    "STEP": frozenset({"START", "SUCCEED", "FAIL", "RETRY"}),
    "CONTEXT": frozenset({"START", "SUCCEED", "FAIL"}),
    "WAIT": frozenset({"START", "CANCEL"}),
    "CALLBACK": frozenset({"START"}),
    "CHAINED_INVOKE": frozenset({"START", "CANCEL"}),
    "EXECUTION": frozenset({"SUCCEED", "FAIL"}),
}
# From which statuses (None: the operation does not exist yet) an action may move an
# operation of a type: AWS's rules, as its local runner validates them.
_NEW = None
FROM: Mapping[tuple[str, str], frozenset[OpStatus | None]] = {
    ("STEP", "START"): frozenset({_NEW, S.READY}),
    ("STEP", "SUCCEED"): frozenset({_NEW, S.STARTED, S.READY}),
    ("STEP", "FAIL"): frozenset({_NEW, S.STARTED, S.READY}),
    ("STEP", "RETRY"): frozenset({_NEW, S.STARTED, S.READY}),
    ("CONTEXT", "START"): frozenset({_NEW}),
    ("CONTEXT", "SUCCEED"): frozenset({_NEW, S.STARTED}),
    ("CONTEXT", "FAIL"): frozenset({_NEW, S.STARTED}),
    ("WAIT", "START"): frozenset({_NEW}),
    ("WAIT", "CANCEL"): frozenset({S.STARTED}),
    ("CALLBACK", "START"): frozenset({_NEW}),
    ("CHAINED_INVOKE", "START"): frozenset({_NEW}),
    ("CHAINED_INVOKE", "CANCEL"): frozenset({S.STARTED}),
}


@dataclass(frozen=True)
class Target:
    """A chained invoke's target, resolved: the function it runs and the child it starts."""

    function: str
    version: str
    child_id: str
    child_arn: str


# Resolves an invoke's FunctionName (and the child's id) or refuses it (unknown target).
Resolve = Callable[[str, str], Target]
# The callback id of an operation of this execution.
CallbackIdOf = Callable[[str], str]


@dataclass
class Applied:
    changed: dict[str, OperationRecord] = field(default_factory=dict)
    events: list[tuple[str, OperationRecord | None, dict[str, Any]]] = field(
        default_factory=list)
    outcome: dict[str, Any] | None = None  # an EXECUTION update: the execution's end
    invokes: list[tuple[OperationRecord, Target]] = field(default_factory=list)
    over_limit: str | None = None  # the execution went over one of its limits


def _copy(op: OperationRecord) -> OperationRecord:
    return OperationRecord.from_dict({**op.to_dict(), "extra": dict(op.extra)})


def _size(u: Update) -> int:
    size = 0 if u.payload is None else len(u.payload.encode())
    return size + (0 if u.error is None else len(json.dumps(u.error)))


def check_batch(updates: Sequence[Update], limits: AwsLimits) -> None:
    """What a batch must be whatever the state: one EXECUTION update at most, last;
    each action one its type has; no id twice but a step's or context's START
    followed by its end; errors and payloads within their limits."""
    executions = [u for u in updates if u.type == "EXECUTION"]
    if len(executions) > 1:
        raise invalid("Cannot checkpoint multiple EXECUTION updates.")
    if executions and updates[-1].type != "EXECUTION":
        raise invalid("EXECUTION checkpoint must be the last update.")
    last: dict[str, Update] = {}
    for i, u in enumerate(updates):
        if u.action not in VALID_ACTIONS[u.type]:
            raise invalid(f"update {i}: {u.action} is not an action of a {u.type} operation")
        before = last.get(u.id)
        if before is not None and not (before.type in ("STEP", "CONTEXT")
                                       and before.action == "START" and u.action != "START"):
            raise invalid(f"update {i}: Cannot checkpoint multiple operations with the same ID "
                          f"({u.id}).")
        last[u.id] = u
        if u.error is not None and len(json.dumps(u.error)) > limits.error_bytes:
            raise invalid(f"update {i}: the Error object must be less than "
                          f"{limits.error_bytes} bytes")
        if u.type != "EXECUTION":
            limits.check_payload(f"update {i}: the payload of {u.type} {u.id}", u.payload)


def _check_transition(u: Update, current: OperationRecord | None,
                      ops: Mapping[str, OperationRecord], i: int) -> None:
    if u.type == "EXECUTION":
        if u.action == "SUCCEED" and u.error is not None:
            raise invalid(f"update {i}: Cannot provide an Error for SUCCEED action.")
        if u.action == "FAIL" and u.payload is not None:
            raise invalid(f"update {i}: Cannot provide a Payload for FAIL action.")
        return
    if current is not None:
        for what, mine, theirs in (("type", u.type, current.type.value),
                                   ("subtype", u.sub_type, current.sub_type or None),
                                   ("name", u.name, current.name),
                                   ("parent operation id", u.parent_id, current.parent_id)):
            if mine is not None and mine != theirs:
                raise invalid(f"update {i}: Inconsistent operation {what} for {u.id} "
                              f"({mine!r}, recorded {theirs!r}).")
    status = None if current is None else current.status
    if status not in FROM[(u.type, u.action)]:
        raise invalid(f"update {i}: Invalid current {u.type} state to {u.action.lower()} "
                      f"({u.id} is {status.value if status else 'not started'}).")
    if u.action == "FAIL" and u.payload is not None:
        raise invalid(f"update {i}: Cannot provide a Payload for FAIL action.")
    if u.action == "SUCCEED" and u.error is not None:
        raise invalid(f"update {i}: Cannot provide an Error for SUCCEED action.")
    if u.action == "RETRY":
        if u.retry_delay_s is None:
            raise invalid(f"update {i}: Invalid StepOptions for the given action.")
        if u.error is not None and u.payload is not None:
            raise invalid(f"update {i}: Cannot provide both error and payload to RETRY a STEP.")
    if u.parent_id is not None:
        parent = ops.get(u.parent_id)
        if parent is None or parent.type is not OpType.CONTEXT:
            raise invalid(f"update {i}: Invalid parent operation id {u.parent_id}.")


def apply_checkpoint(updates: Sequence[Update], ops: Mapping[str, OperationRecord],
                     state: AwsState, now_ms: int, limits: AwsLimits,
                     callback_id_of: CallbackIdOf, resolve: Resolve) -> Applied:
    """Validate and apply `updates` (see the module docstring). `state` is updated only
    by a call that is accepted (its counters); `ops` never (changed copies come back)."""
    check_batch(updates, limits)
    work: dict[str, OperationRecord] = dict(ops)
    out = Applied()
    counters = AwsState.from_dict(state.to_dict())
    added = 0
    for i, u in enumerate(updates):
        current = work.get(u.id)
        _check_transition(u, current, work, i)
        if u.type == "EXECUTION":
            out.outcome = ({"status": "SUCCEEDED", "result": u.payload}
                           if u.action == "SUCCEED" else {"status": "FAILED", "error": u.error})
            continue
        op = _copy(current) if current is not None else _new(u, now_ms, counters)
        _step(u, op, now_ms, out, callback_id_of, resolve)
        op.extra["t"] = counters.next_touch()
        work[u.id] = out.changed[u.id] = op
        added += _size(u)
    if counters.created > limits.operations:
        out.over_limit = (f"the execution has {counters.created} operations; the limit is "
                          f"{limits.operations}")
    elif state.bytes + added > limits.execution_bytes:
        out.over_limit = (f"the execution's checkpointed data would be {state.bytes + added} "
                          f"bytes; the limit is {limits.execution_bytes}")
    if out.over_limit is not None:
        out.outcome = {"status": "FAILED", "error": {"ErrorType": LIMIT_ERROR,
                                                     "ErrorMessage": out.over_limit}}
    counters.bytes = state.bytes + added
    state.touch, state.created, state.bytes = counters.touch, counters.created, counters.bytes
    return out


def _new(u: Update, now_ms: int, counters: AwsState) -> OperationRecord:
    return OperationRecord(u.id, OpType(u.type), u.sub_type or "", u.name, u.parent_id,
                           status=S.STARTED, started_ms=now_ms,
                           extra={"n": counters.next_created()})


def _end(op: OperationRecord, status: OpStatus, now_ms: int) -> None:
    op.status, op.ended_ms, op.next_attempt_ms = status, now_ms, None


def _step(u: Update, op: OperationRecord, now_ms: int, out: Applied,
          callback_id_of: CallbackIdOf, resolve: Resolve) -> None:
    ev = out.events
    kind = {"STEP": "Step", "CONTEXT": "Context", "WAIT": "Wait", "CALLBACK": "Callback",
            "CHAINED_INVOKE": "ChainedInvoke"}[u.type]
    if u.action == "START":
        op.status, op.next_attempt_ms = S.STARTED, None
        op.error = None  # a step's new attempt; its Result (a condition's state) stays
        details: dict[str, Any] = {}
        if u.type == "WAIT":
            seconds = u.wait_s or 1
            op.duration_s, op.scheduled_end_ms = seconds, now_ms + seconds * 1000
            details = {"Duration": seconds, "ScheduledEndTimestamp": iso(op.scheduled_end_ms)}
        elif u.type == "CALLBACK":
            details = _start_callback(u, op, now_ms, callback_id_of(op.id))
        elif u.type == "CHAINED_INVOKE":
            target = resolve(u.function or "", op.id)
            op.extra.update(function=target.function, version=target.version,
                            child=target.child_id, arn=target.child_arn)
            details = {"FunctionName": u.function, "Input": payload(u.payload),
                       "ExecutedVersion": target.version,
                       "DurableExecutionArn": target.child_arn}
            if u.tenant is not None:
                details["TenantId"] = op.extra["tenant"] = u.tenant
            out.invokes.append((op, target))
            op.extra["input"] = u.payload
        ev.append((f"{kind}Started", op, details))
    elif u.action == "RETRY":  # a step: a failed attempt, or a condition polled again
        op.attempt += 1
        op.status, op.next_attempt_ms = S.PENDING, now_ms + (u.retry_delay_s or 0) * 1000
        op.result, op.error = u.payload, u.error
        retry = {"CurrentAttempt": op.attempt, "NextAttemptDelaySeconds": u.retry_delay_s}
        if u.error is not None:
            ev.append(("StepFailed", op, {"Error": error_payload(u.error), "RetryDetails": retry}))
        else:
            ev.append(("StepSucceeded", op, {"Result": payload(u.payload),
                                             "RetryDetails": retry}))
    elif u.action == "SUCCEED":
        _end(op, S.SUCCEEDED, now_ms)
        op.result, op.error = u.payload, None
        details = {"Result": payload(u.payload)}
        if u.type == "STEP":
            op.attempt += 1
            details["RetryDetails"] = {"CurrentAttempt": op.attempt}
        elif u.replay_children:
            op.extra["replay_children"] = True
        ev.append((f"{kind}Succeeded", op, details))
    elif u.action == "FAIL":
        _end(op, S.FAILED, now_ms)
        op.result, op.error = None, u.error or {}
        details = {"Error": error_payload(op.error)}
        if u.type == "STEP":
            op.attempt += 1
            details["RetryDetails"] = {"CurrentAttempt": op.attempt}
        ev.append((f"{kind}Failed", op, details))
    else:  # CANCEL: a wait, or an invoke
        _end(op, S.CANCELLED, now_ms)
        op.timeout_at_ms = op.heartbeat_at_ms = None
        ev.append(("WaitCancelled" if u.type == "WAIT" else "ChainedInvokeStopped", op, {}))


def _start_callback(u: Update, op: OperationRecord, now_ms: int, callback_id: str
                    ) -> dict[str, Any]:
    op.callback_id = callback_id
    details: dict[str, Any] = {"CallbackId": callback_id}
    if u.timeout_s:
        op.timeout_s, op.timeout_at_ms = u.timeout_s, now_ms + u.timeout_s * 1000
        details["Timeout"] = u.timeout_s
    if u.heartbeat_s:
        op.heartbeat_timeout_s = u.heartbeat_s
        op.heartbeat_at_ms = now_ms + u.heartbeat_s * 1000
        details["HeartbeatTimeout"] = u.heartbeat_s
    return details
