"""The timers board: every pending alarm, execution wait, callback deadline and retry
in one list (`timers`), and two commands on one of its rows by its `key`: fire it
now, or snooze it.

The commands are an operator's and audited by the ops service, the row naming the
execution or object of the key; a snooze's row says by how much and where it moved
the timer to. An execution's timer is moved through the execution's own object,
which does not audit it a second time.
"""

from __future__ import annotations

from typing import Any

from alarmtop.core.model.alarm_pause import check_snooze, snoozed_until
from alarmtop.core.model.errors import InvalidArgument
from alarmtop.core.ops.timers_board import EXECUTION, check_page
from alarmtop.server.protocol import BY_MS, Field, Request, no_result
from alarmtop.server.rows import alarm_row, snooze_detail
from alarmtop.server.services import Services, command, query

DEFAULT_BOARD_PAGE = 100
KEY = Field(list, True, "a timers board row's key")
# An execution's pending timers read to find the one a board row names.
EXECUTION_TIMERS_READ = 1000


def row_key(key: list[Any]) -> tuple[int, list[str]]:
    """(source, [a, b, c]) of a board row's `key`, or InvalidArgument saying what it is."""
    try:
        _, cursor = check_page(1, key)
    except InvalidArgument:
        raise InvalidArgument("key is a timers board row's `key` ([due_ms, source, a, "
                              "b, c]), not " + repr(key)[:100]) from None
    assert cursor is not None
    return int(cursor[1]), [str(p) for p in cursor[2:]]


async def timers(services: Services, request: Request) -> Any:
    args = request.args
    return await services.rt.timers(args.get("limit", DEFAULT_BOARD_PAGE), args.get("after"))


async def fire_timer(services: Services, request: Request) -> Any:
    rt = services.rt
    source, (a, b, c) = row_key(request.args["key"])
    if source != EXECUTION:
        return alarm_row(await rt.fire_now(a, b))
    return await rt.executions.engine_stub(a).move_timer(b or None, c, rt.clock.now_ms(),
                                                         request.actor)


async def snooze_timer(services: Services, request: Request) -> Any:
    rt, args = services.rt, request.args
    source, (a, b, c) = row_key(args["key"])
    by = check_snooze(args["by_ms"])
    if source != EXECUTION:
        return alarm_row(await rt.snooze_alarm(a, b, by, reason=args.get("reason")))
    rows = await rt.executions.timers(EXECUTION_TIMERS_READ, None, a)
    mine = [r for r in rows if (r["op_id"] or "") == b and r["kind"] == c]
    if not mine:
        raise InvalidArgument(f"execution {a!r} has no pending {c} timer on "
                              f"{b or 'itself'} (it may have fired)")
    at = snoozed_until(int(mine[0]["due_ms"]), rt.clock.now_ms(), by)
    return await rt.executions.engine_stub(a).move_timer(b or None, c, at, request.actor)


SPECS = [
    command("fire_timer", {"key": KEY}, fire_timer, "fire a timers board row now",
            audit_detail=no_result),
    command("snooze_timer", {"key": KEY, "by_ms": BY_MS}, snooze_timer,
            "move a timers board row later", audit_detail=snooze_detail),
    query("timers", {"limit": Field(int, False), "after": Field(list, False)}, timers,
          "the timers board: every pending timer, soonest first"),
]
