"""The Lambda API's durable-execution calls, in AWS's shapes (`runtime.lambda_api`).

The one door the Lambda API's HTTP routes (and any caller that speaks AWS) go
through: Invoke, CheckpointDurableExecution, GetDurableExecutionState,
GetDurableExecution, GetDurableExecutionHistory, ListDurableExecutionsByFunction,
Stop/Pause/Resume/DeleteDurableExecution and the three callback calls. Arguments and
answers are AWS's (PascalCase dicts, timestamps in epoch seconds, results as JSON
text); refusals are `AwsServiceError`s with AWS's codes and statuses. Underneath it
is `runtime.executions` (so every operator action is audited as the console's are)
and the service side of the SDK (`AwsService`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from alarmtop.core.kernel.events import EventBus
from alarmtop.core.kernel.executions.aws.service import AwsService
from alarmtop.core.model.aws_arn import check_execution_name, execution_id_of
from alarmtop.core.model.aws_errors import (
    AwsServiceError,
    CallbackTimeoutException,
    DurableExecutionAlreadyStartedException,
    InvalidRequestContentException,
    ResourceConflictException,
    ResourceNotFoundException,
    invalid,
)
from alarmtop.core.model.aws_listing import (
    aws_status,
    decode_marker,
    encode_marker,
    epoch_ms,
    status_filter,
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


def _max_items(max_items: Any, default: int) -> int:
    if max_items is None or max_items == 0:  # 0, as AWS reads it: the default
        return default
    if not isinstance(max_items, int) or isinstance(max_items, bool) or \
            not 0 < max_items <= MAX_ITEMS:
        raise invalid(f"MaxItems is 0-{MAX_ITEMS}, not {max_items!r}")
    return max_items


def _event_marker(marker: Any) -> int | None:
    if marker in (None, ""):
        return None
    try:
        return int(str(marker))
    except ValueError:
        raise invalid("Invalid Marker: give the NextMarker of the page before") from None


def _flag(value: Any, name: str, default: bool) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid(f"{name} is true or false, not {value!r}")
    return value


def function_error(error: dict[str, Any] | None) -> str:
    """A failed execution's Payload, as Lambda answers a function error."""
    error = error or {}
    out: dict[str, Any] = {"errorType": error.get("ErrorType") or "Error",
                           "errorMessage": error.get("ErrorMessage") or ""}
    if error.get("StackTrace"):
        out["stackTrace"] = error["StackTrace"]
    return json.dumps(out)


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
                     wait_s: float | None = None,
                     qualifier: str | None = None) -> dict[str, Any]:
        """Start an execution of a registered function (`Event`), or start it and wait
        for its end (`RequestResponse`, at most `wait_s`: then its `Payload`). The same
        `execution_name` again with the same payload is the same execution (AWS's
        idempotent start); with another payload it is refused."""
        ref = function_name if qualifier is None else f"{function_name}:{qualifier}"
        fn = self._aws.functions.resolve(ref)
        if invocation_type not in ("Event", "RequestResponse", "DryRun"):
            raise invalid(f"InvocationType is Event, RequestResponse or DryRun, not "
                          f"{invocation_type!r}")
        if execution_name is not None:
            check_execution_name(execution_name)
        text = "{}" if payload in (None, "") else payload
        try:
            json.loads(text)
        except ValueError:
            raise InvalidRequestContentException(
                "Could not parse request body into json: the payload is not JSON") from None
        if invocation_type == "DryRun":  # checked, and nothing started
            return {"StatusCode": 204}
        ends = self._events.subscribe(*_ENDS) if invocation_type == "RequestResponse" else None
        try:
            try:
                eid = await self._executions.start(fn.name, None, execution_name,
                                                   input_text=text)
            except InvalidExecutionState as exc:  # the name is another function's
                raise DurableExecutionAlreadyStartedException(str(exc)) from None
            rec = await self._record(eid)
            if rec.input != text:
                raise DurableExecutionAlreadyStartedException(
                    f"the durable execution {eid!r} has already been started with another "
                    "payload: give another DurableExecutionName")
            arn = self._aws.place.execution_arn(fn.name, fn.version, eid)
            if ends is None:
                return {"StatusCode": 202, "DurableExecutionArn": arn}
            ended = await self._until_ended(eid, ends, wait_s)
        except ValidationError as exc:
            raise invalid(str(exc)) from None
        finally:
            if ends is not None:
                ends.close()
        rec = await self._record(arn)
        out: dict[str, Any] = {"StatusCode": 200, "DurableExecutionArn": arn,
                               "ExecutedVersion": fn.version}
        if not ended:
            out["FunctionError"] = "Unhandled"
            out["Payload"] = json.dumps({
                "errorType": "Sandbox.Timedout", "errorMessage":
                f"the execution did not end within {wait_s:g}s; it runs on (read it with "
                "GetDurableExecution)"})
        elif rec.status.value == "succeeded":
            out["Payload"] = rec.result if rec.result is not None else "null"
        else:
            out["FunctionError"] = "Unhandled"
            out["Payload"] = function_error(rec.error)
        return out

    async def _until_ended(self, eid: str, ends: Any, wait_s: float | None) -> bool:
        rec = await self._executions.engine.store.get(eid)
        if rec is not None and rec.finished:
            return True
        try:
            async with asyncio.timeout(wait_s):
                while True:
                    event = await ends.get()
                    if event.data.get("execution_id") == eid:
                        return True
        except TimeoutError:
            return False

    # -- the SDK's two calls ---------------------------------------------------------------

    async def checkpoint(self, arn: str, token: Any, updates: Any,
                         client_token: Any = None) -> dict[str, Any]:
        return await self._aws.checkpoint(arn, token, updates, client_token)

    async def get_state(self, arn: str, token: Any, marker: Any = None,
                        max_items: Any = None) -> dict[str, Any]:
        return await self._aws.get_state(arn, token, marker, max_items)

    # -- reads -----------------------------------------------------------------------------

    async def get_execution(self, arn: str, include_execution_data: Any = None
                            ) -> dict[str, Any]:
        rec = await self._record(arn)
        data = _flag(include_execution_data, "IncludeExecutionData", True)
        aws = AwsState.from_dict(rec.aws or {})
        out: dict[str, Any] = {
            "DurableExecutionArn": aws.arn, "DurableExecutionName": rec.id,
            "FunctionArn": self._aws.place.function_arn(aws.function, aws.qualifier),
            "Status": aws_status(rec.status.value, rec.paused is not None),
            "Version": aws.qualifier, "StartTimestamp": _seconds(rec.created_ms),
            "ExecutionDataIncluded": data}
        if rec.timeout_s:
            out["DurableConfig"] = {"ExecutionTimeout": rec.timeout_s}
            if not rec.finished:
                out["ExpectedExecutionTimeoutTimestamp"] = _seconds(rec.timeout_at_ms)
        if rec.paused is not None and not rec.finished:
            # The execution timeout keeps counting while paused (alarmtop's pause).
            out["PauseDetails"] = {"PauseRequestTimestamp": _seconds(rec.paused_ms),
                                   "Reason": rec.paused, "ExecutionTimeoutPaused": False}
        if rec.ended_ms is not None:
            out["EndTimestamp"] = _seconds(rec.ended_ms)
        if data:
            out["InputPayload"] = rec.input
            if rec.result is not None:
                out["Result"] = rec.result
            if rec.error is not None:
                out["Error"] = rec.error
        return out

    async def history(self, arn: str, include_execution_data: Any = True,
                      marker: Any = None, max_items: Any = None,
                      reverse_order: Any = None) -> dict[str, Any]:
        """GetDurableExecutionHistory: events by id (the newest first with
        `reverse_order`), paged by the id of the last event of the page before."""
        rec = await self._record(arn)
        data = _flag(include_execution_data, "IncludeExecutionData", True)
        reverse = _flag(reverse_order, "ReverseOrder", False)
        limit, after = _max_items(max_items, 100), _event_marker(marker)
        store = self._executions.engine.store
        if reverse:
            before = after if after is not None else await store.max_event_id(rec.id) + 1
            lo = max(0, before - limit - 1)
            events = [ev for ev in await store.history(rec.id, lo, before - lo - 1)
                      if ev["EventId"] < before][::-1]
            more = lo > 0
        else:
            events = await store.history(rec.id, after or 0, limit + 1)
            more = len(events) > limit
            events = events[:limit]
        if not data:
            events = [_without_data(ev) for ev in events]
        out: dict[str, Any] = {"Events": events}
        if more and events:
            out["NextMarker"] = str(events[-1]["EventId"])
        return out

    async def list_by_function(self, function_name: str, statuses: Any = None,
                               started_after: Any = None, started_before: Any = None,
                               marker: Any = None, max_items: Any = None, *,
                               reverse_order: Any = None, execution_name: str | None = None,
                               qualifier: str | None = None) -> dict[str, Any]:
        """ListDurableExecutionsByFunction: the newest first (the oldest with
        `reverse_order`), filtered by status, start time, name and version, paged by
        the key of the last execution of the page before (an index serves it)."""
        fn = self._aws.functions.resolve(function_name)
        wanted = status_filter(statuses)
        limit = _max_items(max_items, 50)
        after = decode_marker(marker)
        desc = not _flag(reverse_order, "ReverseOrder", False)
        if execution_name is not None:
            check_execution_name(execution_name)
        if qualifier is not None:
            self._aws.functions.resolve(f"{fn.name}:{qualifier}")
        if wanted is not None and wanted.nothing:
            return {"DurableExecutions": []}
        recs = await self._executions.engine.store.by_function(
            fn.name, statuses=wanted, started_from_ms=epoch_ms(started_after, "StartedAfter"),
            started_to_ms=epoch_ms(started_before, "StartedBefore"), version=qualifier,
            execution_id=execution_name, after=after, limit=limit + 1, desc=desc)
        rows = [self._listed(rec) for rec in recs[:limit]]
        out: dict[str, Any] = {"DurableExecutions": rows}
        if len(recs) > limit:
            last = recs[limit - 1]
            out["NextMarker"] = encode_marker(last.created_ms, last.id)
        return out

    def _listed(self, rec: ExecutionRecord) -> dict[str, Any]:
        aws = AwsState.from_dict(rec.aws or {})
        row: dict[str, Any] = {
            "DurableExecutionArn": aws.arn, "DurableExecutionName": rec.id,
            "FunctionArn": self._aws.place.function_arn(aws.function, aws.qualifier),
            "Status": aws_status(rec.status.value, rec.paused is not None),
            "StartTimestamp": _seconds(rec.created_ms)}
        if rec.ended_ms is not None:
            row["EndTimestamp"] = _seconds(rec.ended_ms)
        return row

    # -- operators -------------------------------------------------------------------------

    async def stop(self, arn: str, error: dict[str, Any] | None = None) -> dict[str, Any]:
        rec = await self._record(arn)
        reason = (error or {}).get("ErrorMessage") or "stopped through the Lambda API"
        try:
            await self._executions.abort(rec.id, reason, actor=ACTOR)
        except InvalidExecutionState as exc:
            raise invalid(str(exc)) from None
        return {"StopTimestamp": self._aws.clock.now_ms() / 1000}

    async def pause(self, arn: str, reason: str | None = None,
                    execution_timeout_paused: Any = None) -> dict[str, Any]:
        rec = await self._record(arn)
        if _flag(execution_timeout_paused, "ExecutionTimeoutPaused", False):
            raise invalid("ExecutionTimeoutPaused: alarmtop keeps the execution timeout "
                          "running while an execution is paused; leave it false")
        try:
            await self._executions.pause(rec.id, reason or "paused through the Lambda API",
                                         actor=ACTOR)
        except InvalidExecutionState as exc:
            raise ResourceConflictException(str(exc)) from None
        return {}

    async def resume(self, arn: str, reason: str | None = None) -> dict[str, Any]:
        rec = await self._record(arn)
        try:
            await self._executions.resume(rec.id, reason=reason, actor=ACTOR)
        except InvalidExecutionState as exc:
            raise ResourceConflictException(str(exc)) from None
        return {}

    async def delete(self, arn: str) -> dict[str, Any]:
        """DeleteDurableExecution: a finished execution and all its data, gone."""
        rec = await self._record(arn)
        if not rec.finished:
            raise ResourceConflictException(
                f"the durable execution {rec.id!r} is {aws_status(rec.status.value, False)}: "
                "only a SUCCEEDED, FAILED, STOPPED or TIMED_OUT execution can be deleted")
        try:
            await self._executions.tools.delete(rec.id, actor=ACTOR)
        except InvalidExecutionState as exc:
            raise ResourceConflictException(str(exc)) from None
        except UnknownExecution as exc:
            raise ResourceNotFoundException(str(exc)) from None
        return {"DeletionRequestTimestamp": self._aws.clock.now_ms() / 1000}

    # -- callbacks -------------------------------------------------------------------------

    async def callback_success(self, callback_id: str, result: bytes | str | None = None
                               ) -> dict[str, Any]:
        text = result.decode("utf-8", "replace") if isinstance(result, bytes) else result
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
