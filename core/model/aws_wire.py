"""The AWS SDK's wire shapes: an `OperationUpdate` in, an `Operation` out (pure).

`parse_updates` checks what a checkpoint carries against the Lambda API's model
(types, actions, id and name patterns, option ranges) and turns each update into
an `Update`; a malformed one refuses the whole checkpoint with
InvalidParameterValueException and changes nothing. `operation_wire` is how an
operation record reads to the SDK (timestamps in epoch milliseconds, as in the
invocation's input).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from alarmtop.core.model.aws_errors import invalid
from alarmtop.core.model.aws_limits import MAX_WAIT_S
from alarmtop.core.model.operations import ExecutionRecord, OperationRecord, OpType

TYPES = frozenset({"EXECUTION", "CONTEXT", "STEP", "WAIT", "CALLBACK", "CHAINED_INVOKE"})
ACTIONS = frozenset({"START", "SUCCEED", "FAIL", "RETRY", "CANCEL"})
OPERATION_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
NAME = re.compile(r"[\x20-\x7E]{1,256}")
SUB_TYPE = re.compile(r"[a-zA-Z0-9_-]{1,32}")
MAX_UPDATES = 250  # what one checkpoint may carry (the SDK sends at most 250)
ERROR_FIELDS = ("ErrorType", "ErrorMessage", "ErrorData")


@dataclass(frozen=True)
class Update:
    """One `OperationUpdate`, checked."""

    id: str
    type: str
    action: str
    parent_id: str | None = None
    name: str | None = None
    sub_type: str | None = None
    payload: str | None = None
    error: dict[str, Any] | None = None
    replay_children: bool = False
    retry_delay_s: int | None = None  # StepOptions.NextAttemptDelaySeconds
    wait_s: int | None = None  # WaitOptions.WaitSeconds
    timeout_s: int = 0  # CallbackOptions.TimeoutSeconds
    heartbeat_s: int = 0  # CallbackOptions.HeartbeatTimeoutSeconds
    function: str | None = None  # ChainedInvokeOptions.FunctionName
    tenant: str | None = None  # ChainedInvokeOptions.TenantId

    @property
    def op_type(self) -> OpType:
        return OpType(self.type)


def parse_updates(raw: Any) -> list[Update]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise invalid("Updates must be a list of OperationUpdate objects")
    if len(raw) > MAX_UPDATES:
        raise invalid(f"a checkpoint carries at most {MAX_UPDATES} updates, not {len(raw)}")
    return [parse_update(u, i) for i, u in enumerate(raw)]


def _text(d: dict[str, Any], key: str, pattern: re.Pattern[str] | None, where: str
          ) -> str | None:
    value = d.get(key)
    if value is None or (value == "" and key == "SubType"):
        return None
    if not isinstance(value, str) or (pattern is not None and pattern.fullmatch(value) is None):
        raise invalid(f"{where}: {key} {str(value)[:80]!r} is not valid")
    return value


def _seconds(options: Any, key: str, where: str, low: int) -> int | None:
    if options is None:
        return None
    if not isinstance(options, dict):
        raise invalid(f"{where}: options must be an object")
    value = options.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= MAX_WAIT_S:
        raise invalid(f"{where}: {key} must be a whole number of seconds from {low} to "
                      f"{MAX_WAIT_S}, not {value!r}")
    return value


def parse_error(value: Any, where: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise invalid(f"{where}: Error must be an ErrorObject")
    out: dict[str, Any] = {}
    for key in ERROR_FIELDS:
        if value.get(key) is not None:
            if not isinstance(value[key], str):
                raise invalid(f"{where}: Error.{key} must be a string")
            out[key] = value[key]
    trace = value.get("StackTrace")
    if trace is not None:
        if not isinstance(trace, list) or not all(isinstance(t, str) for t in trace):
            raise invalid(f"{where}: Error.StackTrace must be a list of strings")
        out["StackTrace"] = list(trace)
    return out


def parse_update(d: Any, index: int) -> Update:
    where = f"update {index}"
    if not isinstance(d, dict):
        raise invalid(f"{where} must be an OperationUpdate object")
    op_id = _text(d, "Id", OPERATION_ID, where)
    if op_id is None:
        raise invalid(f"{where}: Id is required")
    type_, action = d.get("Type"), d.get("Action")
    if type_ not in TYPES:
        raise invalid(f"{where}: unknown operation type {type_!r}")
    if action not in ACTIONS:
        raise invalid(f"{where}: unknown action {action!r}")
    payload = d.get("Payload")
    if payload is not None and not isinstance(payload, str):
        raise invalid(f"{where}: Payload must be a string")
    ctx, invoke = d.get("ContextOptions") or {}, d.get("ChainedInvokeOptions")
    function = tenant = None
    if invoke is not None:
        if not isinstance(invoke, dict) or not isinstance(invoke.get("FunctionName"), str):
            raise invalid(f"{where}: ChainedInvokeOptions needs a FunctionName")
        function, tenant = invoke["FunctionName"], invoke.get("TenantId")
        if tenant is not None and not isinstance(tenant, str):
            raise invalid(f"{where}: ChainedInvokeOptions.TenantId must be a string")
    callback = d.get("CallbackOptions")
    return Update(
        op_id, str(type_), str(action), _text(d, "ParentId", OPERATION_ID, where),
        _text(d, "Name", NAME, where), _text(d, "SubType", SUB_TYPE, where), payload,
        parse_error(d.get("Error"), where),
        bool(ctx.get("ReplayChildren", False)) if isinstance(ctx, dict) else False,
        _seconds(d.get("StepOptions"), "NextAttemptDelaySeconds", where, 0),
        _seconds(d.get("WaitOptions"), "WaitSeconds", where, 1),
        _seconds(callback, "TimeoutSeconds", where, 0) or 0,
        _seconds(callback, "HeartbeatTimeoutSeconds", where, 0) or 0,
        function, tenant)


# -- out: operations as the SDK reads them ---------------------------------------------


def _details(result: str | None, error: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if result is not None:
        out["Result"] = result
    if error:
        out["Error"] = error
    return out


def operation_wire(op: OperationRecord) -> dict[str, Any]:
    """An operation as the SDK reads it (`Operation.from_json_dict`'s shape)."""
    d: dict[str, Any] = {"Id": op.id, "Type": op.type.value, "Status": op.status.value}
    if op.parent_id:
        d["ParentId"] = op.parent_id
    if op.name:
        d["Name"] = op.name
    if op.sub_type:
        d["SubType"] = op.sub_type
    if op.started_ms is not None:
        d["StartTimestamp"] = op.started_ms
    if op.ended_ms is not None:
        d["EndTimestamp"] = op.ended_ms
    if op.type is OpType.STEP:
        step = {"Attempt": op.attempt, **_details(op.result, op.error)}
        if op.next_attempt_ms is not None:
            step["NextAttemptTimestamp"] = op.next_attempt_ms
        d["StepDetails"] = step
    elif op.type is OpType.CONTEXT:
        ctx: dict[str, Any] = {"Result": op.result, **_details(None, op.error)}
        if op.extra.get("replay_children"):
            ctx["ReplayChildren"] = True
        d["ContextDetails"] = ctx
    elif op.type is OpType.WAIT:
        d["WaitDetails"] = {} if op.scheduled_end_ms is None else {
            "ScheduledEndTimestamp": op.scheduled_end_ms}
    elif op.type is OpType.CALLBACK:
        d["CallbackDetails"] = {"CallbackId": op.callback_id, **_details(op.result, op.error)}
    else:
        d["ChainedInvokeDetails"] = _details(op.result, op.error)
    return d


def execution_wire(rec: ExecutionRecord, run_id: str, status: str) -> dict[str, Any]:
    """The EXECUTION operation: it carries the input (the SDK reads it from here)."""
    d: dict[str, Any] = {"Id": run_id, "Type": "EXECUTION", "Status": status,
                         "Name": rec.id, "StartTimestamp": rec.created_ms,
                         "ExecutionDetails": {"InputPayload": rec.input}}
    if rec.ended_ms is not None:
        d["EndTimestamp"] = rec.ended_ms
    return d
