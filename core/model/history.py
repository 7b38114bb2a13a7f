"""Operation records rebuilt from an AWS-style history, as a pure fold.

The log the engine replays is its operation records; the history is what it
exports. Folding a history back into records lets a stored history (a golden
fixture, an export from another node) be replayed against handler code, as
Temporal's replayer does with workflow histories.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from alarmtop.core.model.operations import OperationRecord, OpStatus, OpType
from alarmtop.core.model.replay import advance

_TYPES = (("ChainedInvoke", OpType.CHAINED_INVOKE), ("Step", OpType.STEP),
          ("Wait", OpType.WAIT), ("Callback", OpType.CALLBACK), ("Context", OpType.CONTEXT))


def _ms(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp).timestamp() * 1000)


def _type_of(event_type: str) -> tuple[OpType, str] | None:
    for prefix, op_type in _TYPES:
        if event_type.startswith(prefix):
            return op_type, event_type[len(prefix):]
    return None


def records_from_history(events: Iterable[dict[str, Any]]) -> dict[str, OperationRecord]:
    """The operation records a history implies, by op id. Each event's status change
    goes through the transition table: a history no engine could write raises
    `IllegalTransition`."""
    ops: dict[str, OperationRecord] = {}
    for ev in events:
        kind = _type_of(str(ev.get("EventType", "")))
        op_id = ev.get("Id")
        if kind is None or not isinstance(op_id, str):
            continue
        op_type, what = kind
        rec = ops.get(op_id)
        if rec is None:
            rec = ops[op_id] = OperationRecord(op_id, op_type, ev.get("SubType", ""),
                                               ev.get("Name"), ev.get("ParentId"),
                                               started_ms=_ms(ev["EventTimestamp"]))
        _apply(rec, what, ev.get(f"{ev['EventType']}Details") or {}, _ms(ev["EventTimestamp"]))
    return ops


def _apply(rec: OperationRecord, what: str, details: dict[str, Any], at_ms: int) -> None:
    retry = (details.get("RetryDetails") or {}).get("NextAttemptDelaySeconds")
    if what == "Started":
        advance(rec, OpStatus.STARTED)
        rec.attempt += rec.type is OpType.STEP
        rec.callback_id = details.get("CallbackId", rec.callback_id)
        if "ScheduledEndTimestamp" in details:
            rec.scheduled_end_ms = _ms(details["ScheduledEndTimestamp"])
            rec.duration_s = details.get("Duration")
        return
    if what == "Succeeded":
        rec.result = (details.get("Result") or {}).get("Payload")
        if details.get("ReplayChildren"):
            rec.extra = {"replay_children": True}
    elif what in ("Failed", "TimedOut"):
        rec.error = (details.get("Error") or {}).get("Payload")
    if retry is not None:  # a failed attempt, or a condition polled again: not done
        advance(rec, OpStatus.PENDING).next_attempt_ms = at_ms + int(retry) * 1000
        return
    advance(rec, {"Succeeded": OpStatus.SUCCEEDED, "Failed": OpStatus.FAILED,
                  "TimedOut": OpStatus.TIMED_OUT}.get(what, OpStatus.CANCELLED))
    rec.ended_ms = at_ms
