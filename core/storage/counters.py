"""The counters table, read the same way on both backends: `Counts` from its rows."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from alarmtop.core.model import keys
from alarmtop.core.model.storage_values import Counts


def parse_counters(rows: Iterable[Any]) -> Counts:
    """`Counts` from (kind, name, num, n) rows, tuples or asyncpg records (PostgreSQL's
    summed over node slots): every alarm state named, zeros included."""
    alarms: dict[str, int] = dict.fromkeys(keys.ALARM_RANK, 0)
    retries: dict[tuple[str, int], int] = {}
    executions: dict[str, int] = {}
    objects: dict[str, int] = {}
    for kind, name, num, count in rows:
        n = int(count)
        if kind == "alarms":
            alarms[name] = n
        elif kind == "retries":
            if n:
                retries[(name, int(num))] = n
        elif kind == "executions":
            if n:
                executions[name] = n
        elif kind == "objects":
            objects[name] = n
    return Counts(alarms, retries, executions, objects.get("stored", 0),
                  objects.get("known", 0))
