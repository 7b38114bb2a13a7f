"""Ops commands for the execution tools: pause, resume, redrive, fork, callbacks by
hand, the replay check and the execution timers.

Kept apart from `ops.py` so the command table grows without touching it: the
server merges `EXECUTION_TOOL_OPS` into `wire.OPS` and sends these ops here.
The commands are audited by the runtime itself (one row each, whatever the
outcome, with the client's address as actor and its role); a command refused
before it reaches the runtime (wrong role, bad frame) is audited by `ops.py`
as every other one. Queries (`replay_check`, `execution_timers`) are not
audited and are open to viewers: they change nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from alarmtop.core import Runtime
from alarmtop.server.wire import Field, ProtocolError

_OPT_STR = Field(str, False)
_ID = Field(str, True, "the execution's id")

# op -> (operator only, fields), in the shape of `wire.OPS`.
EXECUTION_TOOL_OPS: dict[str, tuple[bool, dict[str, Field]]] = {
    "pause": (True, {"execution_id": _ID, "reason": _OPT_STR}),
    "resume": (True, {"execution_id": _ID, "reason": _OPT_STR}),
    "redrive": (True, {"execution_id": _ID, "version": _OPT_STR,
                       "force": Field(bool, False, "run even if the replay check diverges"),
                       "reason": _OPT_STR}),
    "fork": (True, {"execution_id": _ID,
                    "from_step": Field(str, True, "a step name used once, or an operation id"),
                    "input": Field(object, False, "the fork's input (default: the source's)"),
                    "new_execution_id": _OPT_STR, "version": _OPT_STR,
                    "force": Field(bool, False), "reason": _OPT_STR}),
    "complete_callback": (True, {"callback_id": Field(str),
                                 "outcome": Field(str, False, "success (default) or failure"),
                                 "payload": Field(object, False), "error_type": _OPT_STR,
                                 "message": _OPT_STR, "reason": _OPT_STR}),
    "replay_check": (False, {"execution_id": _ID, "version": _OPT_STR}),
    "execution_timers": (False, {"limit": Field(int, False), "after": Field(list, False),
                                 "execution_id": _OPT_STR}),
}
# The commands the runtime audits itself (ops.py must not audit them a second time).
RUNTIME_AUDITED = frozenset(op for op, (operator, _) in EXECUTION_TOOL_OPS.items() if operator)
DEFAULT_TIMERS_PAGE = 100

Handler = Callable[[dict[str, Any], str, str], Awaitable[Any]]


class ExecutionTools:
    """Applies the execution-tool ops to a runtime, as `actor` (the client address)."""

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self._handlers: dict[str, Handler] = {
            "pause": self._pause, "resume": self._resume, "redrive": self._redrive,
            "fork": self._fork, "complete_callback": self._complete_callback,
            "replay_check": self._replay_check, "execution_timers": self._timers,
        }

    async def run(self, op: str, args: dict[str, Any], actor: str, role: str) -> Any:
        """Run `op` with its checked fields `args`; raises with a clear message."""
        handler = self._handlers.get(op)
        if handler is None:
            raise ProtocolError(f"unknown execution tool op {op!r}; ops: "
                                f"{', '.join(sorted(self._handlers))}")
        return await handler(args, actor, role)

    async def _pause(self, args: dict[str, Any], actor: str, role: str) -> Any:
        return await self.rt.executions.pause(args["execution_id"], args.get("reason"),
                                              actor=actor, role=role)

    async def _resume(self, args: dict[str, Any], actor: str, role: str) -> Any:
        return await self.rt.executions.resume(args["execution_id"], reason=args.get("reason"),
                                               actor=actor, role=role)

    async def _redrive(self, args: dict[str, Any], actor: str, role: str) -> Any:
        return await self.rt.executions.redrive(
            args["execution_id"], args.get("version"), force=bool(args.get("force")),
            reason=args.get("reason"), actor=actor, role=role)

    async def _fork(self, args: dict[str, Any], actor: str, role: str) -> Any:
        return await self.rt.executions.fork(
            args["execution_id"], args["from_step"], args.get("input"),
            args.get("new_execution_id"), args.get("version"), force=bool(args.get("force")),
            reason=args.get("reason"), actor=actor, role=role)

    async def _complete_callback(self, args: dict[str, Any], actor: str, role: str) -> Any:
        return await self.rt.executions.complete_callback(
            args["callback_id"], args.get("outcome") or "success", args.get("payload"),
            error_type=args.get("error_type") or "CallbackError",
            message=args.get("message") or "", reason=args.get("reason"), actor=actor,
            role=role)

    async def _replay_check(self, args: dict[str, Any], actor: str, role: str) -> Any:
        return await self.rt.executions.replay_check(args["execution_id"], args.get("version"))

    async def _timers(self, args: dict[str, Any], actor: str, role: str) -> Any:
        rows = await self.rt.executions.timers(args.get("limit", DEFAULT_TIMERS_PAGE),
                                               args.get("after"), args.get("execution_id"))
        return {"rows": rows, "next": rows[-1]["key"] if rows else None}
