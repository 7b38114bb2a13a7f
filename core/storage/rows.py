"""The alarm row's columns and their values, the same on both backends."""

from __future__ import annotations

import json
from typing import Any

from alarmtop.core.model.alarm_policy import AlarmRecord, AlarmState, Attempt

ALARM_COLUMNS = ("object_class, object_name, scheduled_ms, state, retry_count, "
                 "next_attempt_ms, last_error, attempts, started_ms, gen, hint_ms, hint_gen, "
                 "in_file, attempt_count, paused_ms")


def alarm_values(rec: AlarmRecord, in_file: Any) -> tuple[Any, ...]:
    """`ALARM_COLUMNS`' values of a record, then its `due_ms` (what the due index
    orders by); `in_file` as the dialect spells a boolean."""
    attempts = json.dumps([a.to_dict() for a in rec.attempts]) if rec.attempts else None
    return (rec.object_class, rec.object_name, rec.scheduled_ms, rec.state.value,
            rec.retry_count, rec.next_attempt_ms, rec.last_error, attempts, rec.started_ms,
            rec.gen, rec.hint_ms, rec.hint_gen, in_file, rec.attempt_count, rec.paused_ms,
            rec.due_ms)


def alarm_record(row: Any) -> AlarmRecord:
    """The record of a row read as `SELECT {ALARM_COLUMNS}`."""
    attempts = tuple(Attempt.from_dict(a) for a in json.loads(row[7])) if row[7] else ()
    return AlarmRecord(row[0], row[1], row[2], AlarmState(row[3]), row[4], row[5], row[6],
                       attempts, row[8], row[9], row[10], row[11], bool(row[12]), row[13],
                       row[14])
