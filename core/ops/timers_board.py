"""The timers board: every pending alarm, execution wait, callback deadline and retry
in one list, soonest first (`runtime.timers()`).

Three sources, each read in its own index order and merged here: object alarms
not paused (the alarm due index), paused object alarms (by the time they kept, an
index of their own) and execution timers (the table written with each
checkpoint; an execution's own alarm is left out, as its timers say more). A row's
`key` orders the whole board: `[due_ms, source, a, b, c]`, source 0 for alarms, 1
for paused alarms, 2 for execution timers; a page starts after the `key` of the
last row of the page before (no OFFSET). A row whose time has passed has state
`overdue` ("due 40 s ago, not fired"), whatever it was waiting for.
"""

from __future__ import annotations

from typing import Any

from alarmtop.core.kernel.run_state import RunState
from alarmtop.core.model.alarm_policy import AlarmRecord
from alarmtop.core.model.errors import InvalidArgument
from alarmtop.core.model.operations import EXECUTION_CLASS
from alarmtop.core.ports import Clock, ExecutionLog, OperatorRows

MAX_PAGE = 1000
ALARM, PAUSED, EXECUTION = 0, 1, 2
# Above every op id, execution id and kind: a cursor meaning "after every row at this
# time" for the execution timers' (due, id, op, kind) order.
_TOP = "\U0010ffff"


def check_page(limit: Any, after: Any) -> tuple[int, list[Any] | None]:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 0 < limit <= MAX_PAGE:
        raise InvalidArgument(f"limit is 1-{MAX_PAGE}, not {limit!r}")
    if after is None:
        return limit, None
    if (not isinstance(after, (list, tuple)) or len(after) != 5
            or not isinstance(after[0], int) or isinstance(after[0], bool)
            or after[1] not in (ALARM, PAUSED, EXECUTION)
            or not all(isinstance(p, str) for p in after[2:])):
        raise InvalidArgument("after is the `key` of the last row of the previous page "
                              "([due_ms, source, a, b, c]), not " + repr(after)[:100])
    return limit, list(after)


def alarm_row(rec: AlarmRecord, now_ms: int) -> dict[str, Any]:
    paused = rec.paused_ms is not None
    # The order each source is read in: a paused alarm by the time it kept, another by
    # its due index (its next attempt, or an earlier wake hint).
    due = rec.next_attempt_ms if paused else rec.due_ms
    assert due is not None
    obj = f"{rec.object_class}/{rec.object_name}"
    return {"key": [due, PAUSED if paused else ALARM, rec.object_class, rec.object_name, ""],
            "kind": "alarm", "target": obj, "object": obj, "execution_id": None,
            "op_id": None, "name": None, "due_ms": due,
            "state": "overdue" if due < now_ms else rec.state.value, "paused": paused,
            "retry_count": rec.retry_count}


def execution_row(t: dict[str, Any], now_ms: int) -> dict[str, Any]:
    due = int(t["due_ms"])
    return {"key": [due, EXECUTION, t["execution_id"], t["op_id"] or "", t["kind"]],
            "kind": t["kind"], "target": t["execution_id"],
            "object": f"Execution/{t['execution_id']}", "execution_id": t["execution_id"],
            "op_id": t["op_id"], "name": t["name"], "due_ms": due,
            "state": "overdue" if due < now_ms else "pending", "paused": bool(t["paused"]),
            "retry_count": None, "handler": t.get("handler"), "status": t.get("status")}


def merge(limit: int, after: list[Any] | None, *sources: list[dict[str, Any]]
          ) -> list[dict[str, Any]]:
    """The first `limit` rows after `after` of the sources (each in key order)."""
    rows = [r for src in sources for r in src if after is None or r["key"] > after]
    rows.sort(key=lambda r: r["key"])
    return rows[:limit]


class TimersBoard:
    """`runtime.timers()`: the board, read from the alarm rows and execution timers."""

    def __init__(self, operator_rows: OperatorRows, execution_log: ExecutionLog,
                 clock: Clock, state: RunState) -> None:
        self._operator_rows = operator_rows
        self._execution_log = execution_log
        self._clock = clock
        self._state = state

    async def timers(self, limit: int = 100, after: Any = None) -> dict[str, Any]:
        """A page of the board: `rows`, `next` (the cursor of the next page, None at the
        end) and `now_ms` (what `overdue` was judged against)."""
        self._state.check()
        limit, cursor = check_page(limit, after)
        now = self._clock.now_ms()
        store = self._operator_rows

        def alarm_after(source: int) -> tuple[int, str, str] | None:
            if cursor is None:
                return None
            due, src = cursor[0], cursor[1]
            if src == source:
                return (due, cursor[2], cursor[3])
            # An earlier source at the same time: its rows at `due` all come after, so
            # start just before `due`; a later source: none of this one's rows at `due` do.
            return (due - 1, _TOP, _TOP) if src < source else (due, _TOP, _TOP)

        live = await store.board_alarms(limit, alarm_after(ALARM), paused=False,
                                        until_ms=None, skip_class=EXECUTION_CLASS)
        held = await store.board_alarms(limit, alarm_after(PAUSED), paused=True,
                                        until_ms=None, skip_class=EXECUTION_CLASS)
        ex_after = None
        if cursor is not None:
            ex_after = [cursor[0], cursor[2], cursor[3], cursor[4]] if cursor[1] == EXECUTION \
                else [cursor[0] - 1, _TOP, _TOP, _TOP]
        ex = await self._execution_log.timers(limit, ex_after)
        rows = merge(limit, cursor, [alarm_row(r, now) for r in live],
                     [alarm_row(r, now) for r in held], [execution_row(t, now) for t in ex])
        return {"rows": rows, "next": rows[-1]["key"] if len(rows) == limit else None,
                "now_ms": now}
