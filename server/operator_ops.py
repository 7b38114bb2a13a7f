"""Ops commands for the operator power tools: pause, resume and snooze of object
alarms, the timers board with fire now / snooze, and bulk actions.

Kept apart from `ops.py` as `execution_ops` is: `wire.OPS` takes
`operator_ops(Field)` and `ops.py` sends these ops here. Every command audits
itself here (one row, whatever the outcome, the client's address as actor),
except `bulk_start`, which the bulk service audits: a refusal at once, an
accepted batch as one row when it ends (besides one row per item). Queries
(`timers`, `bulk`, `bulks`) are open to viewers and not audited.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from alarmtop.core import Runtime
    from alarmtop.server.wire import Field

Spec = dict[str, tuple[bool, dict[str, "Field"]]]
Handler = Callable[[dict[str, Any], str, str], Awaitable[Any]]


def operator_ops(field: type[Field]) -> Spec:
    """op -> (operator only, fields), in the shape of `wire.OPS`."""
    opt_str = field(str, False)
    obj = field(str, True, "the object, 'Class/name'")
    key = field(list, True, "a timers board row's key")
    return {
        "pause_alarm": (True, {"object": obj, "reason": opt_str}),
        "resume_alarm": (True, {"object": obj, "reason": opt_str}),
        "snooze_alarm": (True, {"object": obj, "by_ms": field(int, True, "how much later"),
                                "reason": opt_str}),
        "fire_timer": (True, {"key": key, "reason": opt_str}),
        "snooze_timer": (True, {"key": key, "by_ms": field(int, True, "how much later"),
                                "reason": opt_str}),
        "bulk_preview": (True, {"selection": field(dict, True, "a query, see core.bulk")}),
        "bulk_start": (True, {"action": field(str), "selection": field(dict, False),
                              "keys": field(list, False), "kind": opt_str,
                              "max_in_flight": field(int, False), "at_ms": field(int, False),
                              "note": opt_str, "reason": opt_str, "token": opt_str}),
        "bulk_cancel": (True, {"batch_id": field(str), "reason": opt_str}),
        "timers": (False, {"limit": field(int, False), "after": field(list, False)}),
        "bulk": (False, {"batch_id": field(str)}),
        "bulks": (False, {"limit": field(int, False), "after": field(str, False)}),
    }


OPERATOR_COMMANDS = frozenset({"pause_alarm", "resume_alarm", "snooze_alarm", "fire_timer",
                               "snooze_timer", "bulk_preview", "bulk_start", "bulk_cancel"})
OPERATOR_QUERIES = frozenset({"timers", "bulk", "bulks"})
DEFAULT_BOARD_PAGE = 100


class OperatorTools:
    """Applies the operator-tool ops to a runtime, as `actor` (the client address)."""

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self._handlers: dict[str, Handler] = {
            "pause_alarm": self._pause, "resume_alarm": self._resume,
            "snooze_alarm": self._snooze, "fire_timer": self._fire_timer,
            "snooze_timer": self._snooze_timer, "bulk_preview": self._preview,
            "bulk_start": self._bulk_start, "bulk_cancel": self._bulk_cancel,
            "timers": self._timers, "bulk": self._bulk, "bulks": self._bulks,
        }

    async def run(self, op: str, args: dict[str, Any], actor: str, role: str) -> Any:
        handler = self._handlers.get(op)
        if handler is None:
            from alarmtop.server.wire import ProtocolError
            raise ProtocolError(f"unknown operator tool op {op!r}; ops: "
                                f"{', '.join(sorted(self._handlers))}")
        if op in OPERATOR_QUERIES or op == "bulk_start":
            return await handler(args, actor, role)
        return await self._audited(op, args, actor, role, handler)

    async def _audited(self, op: str, args: dict[str, Any], actor: str, role: str,
                       handler: Handler) -> Any:
        from alarmtop.core.model.safe_text import safe_text
        target = args.get("object") or args.get("batch_id")
        if target is None and isinstance(args.get("key"), list) and len(args["key"]) >= 3:
            target = args["key"][2]
        try:
            data = await handler(args, actor, role)
        except Exception as exc:
            await self.rt.audit.record(actor, op, safe_text(target), safe_text(
                args.get("reason")), ok=False, role=role,
                detail={"outcome": "failed", "error": safe_text(str(exc))})
            raise
        await self.rt.audit.record(actor, op, safe_text(target), safe_text(args.get("reason")),
                                   ok=True, role=role, detail={"outcome": "ok"})
        return data

    # -- object alarms ------------------------------------------------------------------

    async def _pause(self, args: dict[str, Any], actor: str, role: str) -> Any:
        from alarmtop.server.ops import alarm_row
        from alarmtop.server.wire import split_object
        cls, name = split_object(args["object"])
        return alarm_row(await self.rt.pause_alarm(cls, name, reason=args.get("reason")))

    async def _resume(self, args: dict[str, Any], actor: str, role: str) -> Any:
        from alarmtop.server.ops import alarm_row
        from alarmtop.server.wire import split_object
        cls, name = split_object(args["object"])
        return alarm_row(await self.rt.resume_alarm(cls, name, reason=args.get("reason")))

    async def _snooze(self, args: dict[str, Any], actor: str, role: str) -> Any:
        from alarmtop.server.ops import alarm_row
        from alarmtop.server.wire import split_object
        cls, name = split_object(args["object"])
        return alarm_row(await self.rt.snooze_alarm(cls, name, args["by_ms"],
                                                    reason=args.get("reason")))

    # -- the timers board ---------------------------------------------------------------

    async def _timers(self, args: dict[str, Any], actor: str, role: str) -> Any:
        return await self.rt.timers(args.get("limit", DEFAULT_BOARD_PAGE), args.get("after"))

    @staticmethod
    def _row_key(key: list[Any]) -> tuple[int, list[str]]:
        from alarmtop.core.model.errors import InvalidArgument
        from alarmtop.core.ops.timers_board import check_page
        try:
            _, cursor = check_page(1, key)
        except InvalidArgument:
            raise InvalidArgument("key is a timers board row's `key` ([due_ms, source, a, "
                                  "b, c]), not " + repr(key)[:100]) from None
        assert cursor is not None
        return int(cursor[1]), [str(p) for p in cursor[2:]]

    async def _fire_timer(self, args: dict[str, Any], actor: str, role: str) -> Any:
        from alarmtop.core.ops.timers_board import EXECUTION
        from alarmtop.server.ops import alarm_row
        source, (a, b, c) = self._row_key(args["key"])
        if source != EXECUTION:
            return alarm_row(await self.rt.fire_now(a, b))
        # The runtime's move_timer audits too: this command's own row is written here.
        return await self.rt.executions.engine_stub(a).move_timer(
            b or None, c, self.rt.clock.now_ms(), actor)

    async def _snooze_timer(self, args: dict[str, Any], actor: str, role: str) -> Any:
        from alarmtop.core.model.alarm_pause import check_snooze, snoozed_until
        from alarmtop.core.ops.timers_board import EXECUTION
        from alarmtop.server.ops import alarm_row
        source, (a, b, c) = self._row_key(args["key"])
        by = check_snooze(args["by_ms"])
        if source != EXECUTION:
            return alarm_row(await self.rt.snooze_alarm(a, b, by, reason=args.get("reason")))
        rows = await self.rt.executions.timers(1000, None, a)
        mine = [r for r in rows if (r["op_id"] or "") == b and r["kind"] == c]
        if not mine:
            from alarmtop.core.model.errors import InvalidArgument
            raise InvalidArgument(f"execution {a!r} has no pending {c} timer on "
                                  f"{b or 'itself'} (it may have fired)")
        at = snoozed_until(int(mine[0]["due_ms"]), self.rt.clock.now_ms(), by)
        return await self.rt.executions.engine_stub(a).move_timer(b or None, c, at, actor)

    # -- bulk actions -------------------------------------------------------------------

    async def _preview(self, args: dict[str, Any], actor: str, role: str) -> Any:
        return await self.rt.bulk.preview(args["selection"])

    async def _bulk_start(self, args: dict[str, Any], actor: str, role: str) -> Any:
        batch_id = await self.rt.bulk.start(
            args["action"], args.get("selection"), args.get("keys"), kind=args.get("kind"),
            max_in_flight=args.get("max_in_flight"), reason=args.get("reason"),
            note=args.get("note"), at_ms=args.get("at_ms"), actor=actor, role=role,
            token=args.get("token"))
        return await self.rt.bulk.get(batch_id)

    async def _bulk_cancel(self, args: dict[str, Any], actor: str, role: str) -> Any:
        return await self.rt.bulk.cancel(args["batch_id"], reason=args.get("reason"),
                                         actor=actor, role=role)

    async def _bulk(self, args: dict[str, Any], actor: str, role: str) -> Any:
        return await self.rt.bulk.get(args["batch_id"])

    async def _bulks(self, args: dict[str, Any], actor: str, role: str) -> Any:
        rows = await self.rt.bulk.list(args.get("limit", 50), args.get("after"))
        return {"rows": rows, "next": rows[-1]["id"] if len(rows) == args.get("limit", 50)
                else None}
