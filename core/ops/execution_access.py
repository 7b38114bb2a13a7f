"""How the operator tools reach executions: their records, their objects (an RPC
stub, so that a tool's work never interleaves with the execution's own events),
and callbacks sent from outside."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from alarmtop.core.kernel.executions.engine import ExecutionEngine
from alarmtop.core.model.callback_ids import decode_callback_id
from alarmtop.core.model.execution_errors import UnknownCallback, UnknownExecution, ValidationError
from alarmtop.core.model.operations import ExecutionRecord
from alarmtop.core.model.serialization import to_json

MAX_ID = 128


def check_execution_id(execution_id: Any) -> str:
    """`execution_id` if it is a valid id; else a `ValidationError` saying what one is."""
    if not isinstance(execution_id, str) or not execution_id or len(execution_id) > MAX_ID \
            or any(ord(c) < 33 for c in execution_id) or "#" in execution_id:
        raise ValidationError(f"execution ids are 1-{MAX_ID} printable characters without "
                              f"spaces or '#', not {execution_id!r}")
    return execution_id


class ExecutionAccess:
    """An execution's record and object, by id."""

    def __init__(self, engine: ExecutionEngine, stub_for: Callable[[str], Any]) -> None:
        self.engine = engine
        self._stub_for = stub_for  # the RPC stub of an execution's object

    def stub(self, execution_id: str) -> Any:
        """The execution's object (its id checked first)."""
        return self._stub_for(check_execution_id(execution_id))

    async def record(self, execution_id: str) -> ExecutionRecord:
        rec = await self.engine.store.get(check_execution_id(execution_id))
        if rec is None:
            raise UnknownExecution(repr(execution_id), "see runtime.executions.list()")
        return rec


class Callbacks:
    """Callbacks completed from outside, by id: success, failure, heartbeat."""

    def __init__(self, access: ExecutionAccess) -> None:
        self._access = access

    async def _send(self, callback_id: str, kind: str, result: str | None = None,
                    error: dict[str, Any] | None = None) -> dict[str, Any]:
        pair = decode_callback_id(callback_id)
        if pair is None:
            raise UnknownCallback(str(callback_id))
        execution_id, op_id = pair
        if await self._access.engine.store.get(execution_id) is None:
            raise UnknownCallback(callback_id)
        out: dict[str, Any] = await self._access.stub(execution_id).callback(
            op_id, callback_id, kind, result, error)
        return out

    async def success(self, callback_id: str, payload: Any = None) -> None:
        """Complete a callback; a string is stored as sent, other values as JSON."""
        text = payload if isinstance(payload, str) or payload is None else to_json(
            payload, "the callback payload")
        await self._send(callback_id, "success", result=text)

    async def failure(self, callback_id: str, error_type: str = "CallbackError",
                      message: str = "", data: Any = None) -> None:
        err: dict[str, Any] = {"ErrorType": str(error_type), "ErrorMessage": str(message)}
        if data is not None:
            err["ErrorData"] = data
        await self._send(callback_id, "failure", error=err)

    async def heartbeat(self, callback_id: str) -> None:
        await self._send(callback_id, "heartbeat")
