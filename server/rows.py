"""The shapes the ops channel answers with, and what an audit row keeps of a command.

Rows: an alarm (from its status, or straight from its record for a page of many),
an execution as the listings show it, the keys (`cursors`) a page by key goes on
after, an audit row with the execution a callback's id belongs to. What an audit
row keeps: client text made safe to store (`safe_text`), the target a command acts
on (`audit_target`), a snooze's `by_ms` and `until_ms` (`snooze_detail`). Used by
the handlers, the ops service and the feed alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from alarmtop.core import AlarmStatus, RetryPolicy
from alarmtop.core.model import keys
from alarmtop.core.model.alarm_policy import AlarmRecord, is_near_exhaustion
from alarmtop.core.model.callback_ids import decode_callback_id
from alarmtop.core.model.operations import ExecutionRecord
from alarmtop.core.ops.timers_board import EXECUTION

MAX_AUDIT_TEXT = 500  # characters of client text kept in a row about a refused frame
# The fields that name what a command acts on, in the order the audit row looks.
TARGET_FIELDS = ("object", "target", "fault_id", "callback_id", "execution_id", "batch_id")

# `AlarmStatus.to_dict` is `dataclasses.asdict`, which deep-copies field by field: a
# page of 400 rows cost 4.4 ms of the event loop that way, 0.5 ms this way.
STATUS_FIELDS = tuple(f.name for f in dataclasses.fields(AlarmStatus))


def alarm_row(status: AlarmStatus) -> dict[str, Any]:
    d = {name: getattr(status, name) for name in STATUS_FIELDS}
    d["object"] = status.object
    d["attempts"] = [a.to_dict() for a in status.attempts]
    return d


def record_row(rec: AlarmRecord, policy: RetryPolicy) -> dict[str, Any]:
    """`alarm_row(AlarmStatus.of(rec, policy))`, built straight from the record: a page
    of a listing makes hundreds of them on the event loop."""
    attempts = rec.attempts
    return {"object_class": rec.object_class, "object_name": rec.object_name,
            "scheduled_ms": rec.scheduled_ms, "state": rec.state.value,
            "retry_count": rec.retry_count, "next_attempt_ms": rec.next_attempt_ms,
            "last_error": rec.last_error, "attempts": [a.to_dict() for a in attempts],
            "max_retries": policy.max_retries,
            "near_exhaustion": is_near_exhaustion(rec, policy),
            "attempt_count": max(rec.attempt_count, len(attempts)),
            "paused": rec.paused_ms is not None, "paused_ms": rec.paused_ms,
            "object": f"{rec.object_class}/{rec.object_name}"}


def alarm_cursor(rec: AlarmRecord, order: str) -> list[Any]:
    """The row's key in `order` (what `after` takes to go on after it)."""
    if order == "object":
        return [rec.object_class, rec.object_name]
    return [keys.alarm_urgency(rec.state, rec.retry_count, rec.next_attempt_ms),
            rec.object_class, rec.object_name]


def execution_row(rec: ExecutionRecord) -> dict[str, Any]:
    """An execution as the listings show it (`Executions.list`'s rows)."""
    return {"execution_id": rec.id, "name": rec.name, "status": rec.status.value,
            "blocked_on": rec.blocked_on, "updated_ms": rec.updated_ms, "saga": rec.saga,
            "paused": rec.paused is not None}


def execution_cursor(rec: ExecutionRecord) -> list[Any]:
    return [keys.execution_urgency(rec.status.value, rec.updated_ms), rec.id]


def audit_row(row: dict[str, Any]) -> dict[str, Any]:
    """An audit row, with the execution a callback's opaque id belongs to."""
    pair = decode_callback_id(row["target"]) if row.get("target") else None
    return {**row, "execution_id": pair[0]} if pair else row


def safe_text(value: Any, limit: int = MAX_AUDIT_TEXT) -> str | None:
    """Client text as the audit log may keep it: a string of valid Unicode (a lone
    surrogate becomes "?"; a value that is not a string, its repr), at most `limit`
    characters; None stays None."""
    if value is None:
        return None
    text = value if isinstance(value, str) else repr(value)
    text = text.encode("utf-8", "replace").decode("utf-8")  # lone surrogates -> "?"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def audit_target(fields: Mapping[str, Any]) -> str | None:
    """What a command acts on, as its audit row says: the first field that names it,
    or what a timers board row's `key` names (`board_target`)."""
    for name in TARGET_FIELDS:
        if name in fields:
            return safe_text(fields[name])
    key = fields.get("key")
    return safe_text(board_target(key)) if isinstance(key, list) else None


def board_target(key: list[Any]) -> str | None:
    """The execution, or the object 'Class/name', of a timers board row's `key`
    (`[due_ms, source, a, b, c]`: a, b the object of an alarm, a the execution of an
    execution's timer); None for a key too short to say."""
    if len(key) < 3:
        return None
    if key[1] == EXECUTION or len(key) < 4:
        return str(key[2])
    return f"{key[2]}/{key[3]}"


def snooze_detail(args: Mapping[str, Any], data: Any) -> dict[str, Any]:
    """A snooze's audit detail: by how much it was asked for (`by_ms`), and where it
    moved the alarm or timer to (`until_ms`: an alarm's next attempt, a board row's
    due time) when it is done."""
    detail: dict[str, Any] = {}
    if isinstance(args.get("by_ms"), int):
        detail["by_ms"] = args["by_ms"]
    if isinstance(data, dict):
        until = data.get("next_attempt_ms", data.get("due_ms"))
        if isinstance(until, int):
            detail["until_ms"] = until
    return detail
