"""Operators' actions on executions that another node forwarded here, audited where
they run.

An operator's action on an execution (abort, resolve, retry a compensation, hand
to a human, pause, resume, redrive, move a timer, fork) is a call of the
execution's object, made on the node that holds its shard. The node the operator
used audits it; when that is another node, the node that ran it audits it too,
whatever its outcome, naming the node that asked and the operator it said it
acted for. (Alarm actions do the same in `alarm_actions`.) A call refused because
the shard is elsewhere ran nothing here and is not audited.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from alarmtop.core.fleet.node import ASKED_BY, NodeHandler
from alarmtop.core.model.errors import NodeUnreachable
from alarmtop.core.model.operations import EXECUTION_CLASS
from alarmtop.core.ops.audit import AuditLog

ObjectKey = tuple[str, str]
# The execution object's operator calls: the action each is audited as, from its args.
_ACTIONS: dict[str, Callable[[list[Any]], str]] = {
    "operate": lambda args: str(args[0]) if args else "operate",
    "control": lambda args: str(args[0]) if args else "control",
    "redrive": lambda args: "redrive",
    "move_timer": lambda args: "move_timer",
    "begin_fork": lambda args: "fork",
}


class AuditedCalls:
    """`serve` forwarded calls as `calls` does, auditing those that are an operator's
    action on an execution."""

    def __init__(self, calls: NodeHandler, audit: AuditLog) -> None:
        self._calls = calls
        self._audit = audit

    async def serve(self, request: dict[str, Any],
                    held: Callable[[ObjectKey], Awaitable[None]]) -> Any:
        method = request.get("method")
        asked_by = request.get(ASKED_BY)
        if request.get("cls") != EXECUTION_CLASS or method not in _ACTIONS or not asked_by:
            return await self._calls(request, held)
        args = list(request.get("args") or [])
        action = _ACTIONS[str(method)](args)
        detail: dict[str, Any] = {"asked_by": str(asked_by)}
        if args and isinstance(args[-1], str):
            detail["for"] = args[-1]  # the operator the asking node acted for
        try:
            value = await self._calls(request, held)
        except NodeUnreachable:
            raise  # not run here: the node that asked tries the shard's next owner
        except Exception as exc:
            await self._record(asked_by, action, request, {
                **detail, "outcome": "failed", "error": f"{type(exc).__name__}: {exc}"})
            raise
        await self._record(asked_by, action, request, {**detail, "outcome": "ok"})
        return value

    async def _record(self, asked_by: object, action: str, request: dict[str, Any],
                      detail: dict[str, Any]) -> None:
        await self._audit.record(f"node {asked_by}", action, str(request.get("name")), None,
                                 ok=detail["outcome"] == "ok", role="node", detail=detail)
