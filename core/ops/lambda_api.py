"""The Lambda API's durable-execution calls, in AWS's shapes (`runtime.lambda_api`).

The one door the Lambda API's HTTP routes (and any caller that speaks AWS) go
through: Invoke, CheckpointDurableExecution, GetDurableExecutionState,
GetDurableExecution, GetDurableExecutionHistory, ListDurableExecutionsByFunction,
Stop/Pause/ResumeDurableExecution and the three callback calls. Arguments and
answers are AWS's (PascalCase dicts, timestamps in epoch seconds, results as JSON
text); refusals are `AwsServiceError`s with AWS's codes and statuses. Underneath it
is `runtime.executions` (so every operator action is audited as the console's are)
and the service side of the SDK (`AwsService`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from alarmtop.core.kernel.events import EventBus
from alarmtop.core.kernel.executions.aws.calls import AWS_STATUS
from alarmtop.core.kernel.executions.aws.service import AwsService
from alarmtop.core.model.aws_arn import check_execution_name, execution_id_of
from alarmtop.core.model.aws_errors import (
    AwsServiceError,
    CallbackTimeoutException,
    ResourceNotFoundException,
    invalid,
)
from alarmtop.core.model.aws_state import AwsState
from alarmtop.core.model.execution_errors import (
    CallbackAlreadyCompleted,
    InvalidExecutionState,
    UnknownCallback,
    UnknownExecution,
    ValidationError,
)
from alarmtop.core.model.operations import ExecutionRecord
from alarmtop.core.ops.executions import Executions

ACTOR = "lambda-api"
MAX_ITEMS = 1000
_ENDS = ("execution.succeeded", "execution.failed", "execution.timed_out", "execution.aborted")


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000


def _without_data(ev: dict[str, Any]) -> dict[str, Any]:
    """An event with its payloads left out (IncludeExecutionData=false)."""
    out = dict(ev)
    key = f"{ev.get('EventType')}Details"
    details = dict(out.get(key) or {})
    for field in ("Input", "Result", "Error"):
        if isinstance(details.get(field), dict):
            details[field] = {"Truncated": True}
    out[key] = details
    return out


def _page(marker: Any, max_items: Any, default: int) -> tuple[int, int]:
    if max_items is None:
        max_items = default
    if not isinstance(max_items, int) or isinstance(max_items, bool) or \
            not 0 < max_items <= MAX_ITEMS:
        raise invalid(f"MaxItems is 1-{MAX_ITEMS}, not {max_items!r}")
    if marker in (None, ""):
        return 0, max_items
    try:
        return int(str(marker)), max_items
    except ValueError:
        raise invalid("Invalid Marker") from None


class LambdaApi:
    """See the module docstring."""

    def __init__(self, aws: AwsService, executions: Executions, events: EventBus) -> None:
        self._aws = aws
        self._executions = executions
        self._events = events

    async def _record(self, arn: str) -> ExecutionRecord:
        rec = await self._executions.engine.store.get(execution_id_of(arn))
        if rec is None or rec.aws is None:
            raise ResourceNotFoundException(f"Durable execution not found: {arn}")
        return rec

    # -- Invoke ----------------------------------------------------------------------------

    async def invoke(self, function_name: str, payload: str | None = None, *,
                     execution_name: str | None = None, invocation_type: str = "Event",
                     wait_s: float | None = None) -> dict[str, Any]:
        """Start an execution of a registered function (`Event`), or start it and wait
        for its end (`RequestResponse`, at most `wait_s`: then its `Payload`)."""
        fn = self._aws.functions.resolve(function_name)
        if invocation_type not in ("Event", "RequestResponse"):
            raise invalid(f"InvocationType is Event or RequestResponse, not {invocation_type!r}")
        if execution_name is not None:
            check_execution_name(execution_name)
        ends = self._events.subscribe(*_ENDS) if invocation_type == "RequestResponse" else None
        try:
            eid = await self._executions.start(fn.name, None, execution_name,
                                               input_text=payload or "{}")
            arn = self._aws.place.execution_arn(fn.name, fn.version, eid)
            if ends is None:
                return {"StatusCode": 202, "DurableExecutionArn": arn}
            await self._until_ended(eid, ends, wait_s)
        except (ValidationError, InvalidExecutionState) as exc:
            raise invalid(str(exc)) from None
        finally:
            if ends is not None:
                ends.close()
        rec = await self._record(arn)
        out: dict[str, Any] = {"StatusCode": 200, "DurableExecutionArn": arn,
                               "ExecutedVersion": fn.version}
        if rec.status.value == "succeeded":
            out["Payload"] = rec.result
        elif rec.finished:
            out["FunctionError"] = "Unhandled"
            out["Payload"] = rec.error
        return out

    async def _until_ended(self, eid: str, ends: Any, wait_s: float | None) -> None:
        rec = await self._executions.engine.store.get(eid)
        if rec is not None and rec.finished:
            return
        async with asyncio.timeout(wait_s):
            while True:
                event = await ends.get()
                if event.data.get("execution_id") == eid:
                    return

    # -- the SDK's two calls ---------------------------------------------------------------

    async def checkpoint(self, arn: str, token: Any, updates: Any,
                         client_token: Any = None) -> dict[str, Any]:
        return await self._aws.checkpoint(arn, token, updates, client_token)

    async def get_state(self, arn: str, token: Any, marker: Any = None,
                        max_items: Any = None) -> dict[str, Any]:
        return await self._aws.get_state(arn, token, marker, max_items)

    # -- reads -----------------------------------------------------------------------------

    async def get_execution(self, arn: str) -> dict[str, Any]:
        rec = await self._record(arn)
        aws = AwsState.from_dict(rec.aws or {})
        out: dict[str, Any] = {
            "DurableExecutionArn": aws.arn, "DurableExecutionName": rec.id,
            "FunctionArn": self._aws.place.function_arn(aws.function, aws.qualifier),
            "Status": AWS_STATUS[rec.status.value], "Version": aws.qualifier,
            "StartTimestamp": _seconds(rec.created_ms), "InputPayload": rec.input}
        if rec.ended_ms is not None:
            out["EndTimestamp"] = _seconds(rec.ended_ms)
        if rec.result is not None:
            out["Result"] = rec.result
        if rec.error is not None:
            out["Error"] = rec.error
        return out

    async def history(self, arn: str, include_execution_data: bool = True,
                      marker: Any = None, max_items: Any = None) -> dict[str, Any]:
        rec = await self._record(arn)
        after, limit = _page(marker, max_items, 100)
        events = await self._executions.engine.store.history(rec.id, after, limit + 1)
        more = len(events) > limit
        events = events[:limit]
        if not include_execution_data:
            events = [_without_data(ev) for ev in events]
        out: dict[str, Any] = {"Events": events}
        if more:
            out["NextMarker"] = str(events[-1]["EventId"])
        return out

    async def list_by_function(self, function_name: str, statuses: list[str] | None = None,
                               started_after: float | None = None,
                               started_before: float | None = None, marker: Any = None,
                               max_items: Any = None) -> dict[str, Any]:
        """ListDurableExecutionsByFunction: the newest first, paged by a marker."""
        fn = self._aws.functions.resolve(function_name)
        skip, limit = _page(marker, max_items, 50)
        store, seen = self._executions.engine.store, 0
        rows: list[dict[str, Any]] = []
        for rec in sorted(await store.list(limit=100_000), key=lambda r: -r.created_ms):
            if rec.aws is None or rec.name != fn.name:
                continue
            status = AWS_STATUS[rec.status.value]
            started = rec.created_ms / 1000
            if (statuses and status not in statuses) or (
                    started_after is not None and started < started_after) or (
                    started_before is not None and started > started_before):
                continue
            seen += 1
            if seen <= skip:
                continue
            if len(rows) == limit:
                return {"DurableExecutions": rows, "NextMarker": str(skip + limit)}
            rows.append({"DurableExecutionArn": AwsState.from_dict(rec.aws).arn,
                         "DurableExecutionName": rec.id, "Status": status,
                         "StartTimestamp": started, "EndTimestamp": _seconds(rec.ended_ms)})
        return {"DurableExecutions": rows}

    # -- operators -------------------------------------------------------------------------

    async def stop(self, arn: str, error: dict[str, Any] | None = None) -> dict[str, Any]:
        rec = await self._record(arn)
        reason = (error or {}).get("ErrorMessage") or "stopped through the Lambda API"
        try:
            await self._executions.abort(rec.id, reason, actor=ACTOR)
        except InvalidExecutionState as exc:
            raise invalid(str(exc)) from None
        return {"StopTimestamp": self._aws.clock.now_ms() / 1000}

    async def pause(self, arn: str) -> dict[str, Any]:
        rec = await self._record(arn)
        try:
            await self._executions.pause(rec.id, "paused through the Lambda API", actor=ACTOR)
        except InvalidExecutionState as exc:
            raise invalid(str(exc)) from None
        return {}

    async def resume(self, arn: str) -> dict[str, Any]:
        rec = await self._record(arn)
        try:
            await self._executions.resume(rec.id, actor=ACTOR)
        except InvalidExecutionState as exc:
            raise invalid(str(exc)) from None
        return {}

    # -- callbacks -------------------------------------------------------------------------

    async def callback_success(self, callback_id: str, result: bytes | str | None = None
                               ) -> dict[str, Any]:
        text = result.decode() if isinstance(result, bytes) else result
        await self._callback(self._executions.send_callback_success(callback_id, text))
        return {}

    async def callback_failure(self, callback_id: str, error: dict[str, Any] | None = None
                               ) -> dict[str, Any]:
        error = error or {}
        await self._callback(self._executions.send_callback_failure(
            callback_id, error.get("ErrorType", "CallbackError"),
            error.get("ErrorMessage", ""), error.get("ErrorData")))
        return {}

    async def callback_heartbeat(self, callback_id: str) -> dict[str, Any]:
        await self._callback(self._executions.send_callback_heartbeat(callback_id))
        return {}

    @staticmethod
    async def _callback(call: Any) -> None:
        try:
            await call
        except (UnknownCallback, UnknownExecution) as exc:
            raise ResourceNotFoundException(str(exc)) from None
        except CallbackAlreadyCompleted as exc:
            if exc.status == "timed_out":
                raise CallbackTimeoutException(str(exc)) from None
            raise invalid(str(exc)) from None
        except (ValidationError, InvalidExecutionState) as exc:
            raise invalid(str(exc)) from None


__all__ = ["AwsServiceError", "LambdaApi"]
