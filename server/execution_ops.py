"""Ops commands for the execution tools: pause, resume, redrive, fork, callbacks by
hand, the replay check and the execution timers.

Kept apart from `ops.py` so the command table grows without touching it:
`wire.OPS` takes `tool_ops(Field)` and `ops.py` sends these ops here. This module
imports nothing of `wire` when it loads (only inside `run`), so `wire` can
import it at its top without a cycle.
The commands are audited by the runtime itself (one row each, whatever the
outcome, with the client's address as actor and its role); a command refused
before it reaches the runtime (wrong role, bad frame) is audited by `ops.py`
as every other one. Queries (`replay_check`, `execution_timers`) are not
audited and are open to viewers: they change nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from alarmtop.core import Runtime
    from alarmtop.server.wire import Field

Spec = dict[str, tuple[bool, dict[str, "Field"]]]


def tool_ops(field: type[Field]) -> Spec:
    """op -> (operator only, fields), in the shape of `wire.OPS`, built with its `Field`."""
    opt_str, ident = field(str, False), field(str, True, "the execution's id")
    return {
        "pause": (True, {"execution_id": ident, "reason": opt_str}),
        "resume": (True, {"execution_id": ident, "reason": opt_str}),
        "redrive": (True, {"execution_id": ident, "version": opt_str,
                           "force": field(bool, False, "run even if the replay check diverges"),
                           "reason": opt_str}),
        "fork": (True, {"execution_id": ident,
                        "from_step": field(str, True, "a step name used once, or an op id"),
                        "input": field(object, False, "the fork's input (default: the source's)"),
                        "new_execution_id": opt_str, "version": opt_str,
                        "force": field(bool, False), "reason": opt_str}),
        "complete_callback": (True, {"callback_id": field(str),
                                     "outcome": field(str, False, "success (default) or failure"),
                                     "payload": field(object, False), "error_type": opt_str,
                                     "message": opt_str, "reason": opt_str}),
        "replay_check": (False, {"execution_id": ident, "version": opt_str}),
        "execution_timers": (False, {"limit": field(int, False), "after": field(list, False),
                                     "execution_id": opt_str}),
    }


# The commands the runtime audits itself (ops.py must not audit them a second time).
RUNTIME_AUDITED = frozenset({"pause", "resume", "redrive", "fork", "complete_callback"})
TOOL_QUERIES = frozenset({"replay_check", "execution_timers"})  # viewers may run them
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
            from alarmtop.server.wire import ProtocolError
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
