"""What the service completes on its own, and what the handler is shown (pure).

- `complete_due`: the service's timers. A wait whose end has come succeeds, a step
  whose next attempt has come is READY (no history event: the SDK's next START
  makes one), a callback past its timeout or its heartbeat deadline times out
  (`Callback.Timeout` / `Callback.Heartbeat`). A checkpoint runs them before it
  computes its answer, so a handler that refreshes sees what fell due.
- `visible`: the operations the SDK is given, in the order they were created. A
  closed context's children are left out (the SDK replays it from its recorded
  result and never looks inside) unless it was checkpointed with ReplayChildren
  (its result was too large to keep: the SDK runs its body again over the children).
- `unseen`: the visible operations changed since the running invocation was last
  told: what a checkpoint answers with.
- `page`: a page of the visible operations within a byte budget (an invocation's
  input, GetDurableExecutionState), with a marker valid until the next checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from alarmtop.core.model.aws_errors import invalid
from alarmtop.core.model.aws_state import AwsState
from alarmtop.core.model.aws_wire import operation_wire
from alarmtop.core.model.operations import OperationRecord, OpStatus, OpType, error_payload

S = OpStatus
Event = tuple[str, OperationRecord | None, dict[str, Any]]


def _due(op: OperationRecord) -> int | None:
    if op.status is S.PENDING:
        return op.next_attempt_ms
    if op.status is not S.STARTED:
        return None
    times = [t for t in (op.scheduled_end_ms if op.type is OpType.WAIT else None,
                         op.timeout_at_ms, op.heartbeat_at_ms) if t is not None]
    return min(times) if times else None


def order(op: OperationRecord) -> int:
    n = op.extra.get("n", 0)
    return int(n) if isinstance(n, int) else 0


def complete_due(ops: Mapping[str, OperationRecord], state: AwsState, now_ms: int
                 ) -> tuple[list[OperationRecord], list[Event]]:
    """The operations whose time has come, changed (copies), and their history events,
    in the order their times came."""
    due = sorted((op for op in ops.values() if (_due(op) or now_ms + 1) <= now_ms),
                 key=lambda o: (_due(o) or 0, order(o)))
    changed: list[OperationRecord] = []
    events: list[Event] = []
    for old in due:
        op = OperationRecord.from_dict({**old.to_dict(), "extra": dict(old.extra)})
        if op.status is S.PENDING:
            op.status, op.next_attempt_ms = S.READY, None
        elif op.type is OpType.WAIT and (op.scheduled_end_ms or now_ms + 1) <= now_ms:
            op.status, op.ended_ms = S.SUCCEEDED, now_ms
            events.append(("WaitSucceeded", op, {"Duration": op.duration_s}))
        else:
            # Both deadlines may have passed: the one that came first decides.
            timeout, beat = op.timeout_at_ms, op.heartbeat_at_ms
            kind = "Callback.Timeout" if timeout is not None and timeout <= now_ms and (
                beat is None or timeout <= beat) else "Callback.Heartbeat"
            op.status, op.ended_ms = S.TIMED_OUT, now_ms
            op.error = {"ErrorType": kind, "ErrorMessage": "Callback timed out" if kind ==
                        "Callback.Timeout" else "Callback timed out on heartbeat"}
            events.append(("CallbackTimedOut", op, {"Error": error_payload(op.error)}))
        op.timeout_at_ms = op.heartbeat_at_ms = None
        op.extra["t"] = state.next_touch()
        changed.append(op)
    return changed, events


def next_due(ops: Iterable[OperationRecord]) -> int | None:
    times = [t for op in ops if (t := _due(op)) is not None]
    return min(times) if times else None


def hidden(ops: Mapping[str, OperationRecord]) -> set[str]:
    """The operations inside a closed context that did not ask to replay its children."""
    closed = {op.id for op in ops.values() if op.type is OpType.CONTEXT and op.done
              and not op.extra.get("replay_children")}
    out: set[str] = set()
    for op in ops.values():
        parent, seen = op.parent_id, 0
        while parent is not None and seen <= len(ops):
            if parent in closed:
                out.add(op.id)
                break
            up = ops.get(parent)
            parent, seen = (up.parent_id if up is not None else None), seen + 1
    return out


def visible(ops: Mapping[str, OperationRecord]) -> list[OperationRecord]:
    skip = hidden(ops)
    return sorted((op for op in ops.values() if op.id not in skip), key=order)


def unseen(ops: Mapping[str, OperationRecord], state: AwsState) -> list[OperationRecord]:
    return [op for op in visible(ops) if int(op.extra.get("t", 0)) > state.seen]


def wire_size(wire: dict[str, Any]) -> int:
    return len(json.dumps(wire, separators=(",", ":")))


def page(wires: list[dict[str, Any]], start: int, max_bytes: int, max_items: int | None,
         seq: int) -> tuple[list[dict[str, Any]], str | None]:
    """The operations from `start` that fit `max_bytes` (always at least one) and
    `max_items`; the marker of the next page, or None at the end."""
    out: list[dict[str, Any]] = []
    total = 0
    for i in range(start, len(wires)):
        size = wire_size(wires[i])
        if out and (total + size > max_bytes or (max_items is not None and
                                                  len(out) >= max_items)):
            return out, f"{seq}:{i}"
        out.append(wires[i])
        total += size
    return out, None


def marker_start(marker: Any, seq: int, count: int) -> int:
    """Where a marker says the next page starts; refused once a checkpoint moved on."""
    if marker in (None, ""):
        return 0
    try:
        at_seq, index = (int(p) for p in str(marker).split(":", 1))
    except ValueError:
        raise invalid("Invalid marker") from None
    if at_seq != seq or not 0 <= index <= count:
        raise invalid("Invalid marker: the state changed since it was given; start again "
                      "without a marker")
    return index


def wires(ops: Mapping[str, OperationRecord]) -> list[dict[str, Any]]:
    return [operation_wire(op) for op in visible(ops)]
