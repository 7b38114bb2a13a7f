"""The Lambda API's durable-execution routes over HTTP, as AWS's service model says
(rest-json, the `2015-03-31` Invoke and the `2025-12-01` durable-execution calls).

Each route reads its arguments where botocore puts them (the path's labels,
percent-encoded; the query; headers; a JSON body, or a raw one for Invoke's
payload and a callback's result), calls `runtime.lambda_api`, and writes the answer
as botocore reads it: JSON with timestamps in epoch seconds, Invoke's fields in
its headers, the model's status code. A refusal is AWS's error shape: the code in
`x-amzn-ErrorType`, the message in the body.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, unquote

from alarmtop.core.model.aws_errors import (
    AwsServiceError,
    InvalidRequestContentException,
    invalid,
)
from alarmtop.core.model.errors import AlarmtopError, InvalidArgument, NotFound
from alarmtop.core.model.execution_errors import UnknownExecution, ValidationError
from alarmtop.core.ops.lambda_api import LambdaApi
from alarmtop.server.http11 import HttpResponse

EXECUTIONS = "2025-12-01"
INVOKE = "2015-03-31"
# Operation fields that are epoch milliseconds in the service's wire (the invocation's
# input) and epoch seconds over the API.
_OP_TIMES = ("StartTimestamp", "EndTimestamp")
_DETAIL_TIMES = {"StepDetails": "NextAttemptTimestamp", "WaitDetails": "ScheduledEndTimestamp"}


class UnknownOperation(AwsServiceError):
    code = "UnknownOperationException"
    status = 404


@dataclass(frozen=True)
class Route:
    operation: str
    method: str
    pattern: tuple[str, ...]  # literal segments, or a "{Label}"
    status: int  # the answer's status, as the model says


ROUTES = (
    Route("Invoke", "POST", (INVOKE, "functions", "{FunctionName}", "invocations"), 200),
    Route("CheckpointDurableExecution", "POST",
          (EXECUTIONS, "durable-executions", "{Arn}", "checkpoint"), 200),
    Route("GetDurableExecutionState", "GET",
          (EXECUTIONS, "durable-executions", "{Arn}", "state"), 200),
    Route("GetDurableExecution", "GET", (EXECUTIONS, "durable-executions", "{Arn}"), 200),
    Route("GetDurableExecutionHistory", "GET",
          (EXECUTIONS, "durable-executions", "{Arn}", "history"), 200),
    Route("ListDurableExecutionsByFunction", "GET",
          (EXECUTIONS, "functions", "{FunctionName}", "durable-executions"), 200),
    Route("StopDurableExecution", "POST", (EXECUTIONS, "durable-executions", "{Arn}", "stop"),
          200),
    Route("PauseDurableExecution", "POST",
          (EXECUTIONS, "durable-executions", "{Arn}", "pause"), 202),
    Route("ResumeDurableExecution", "POST",
          (EXECUTIONS, "durable-executions", "{Arn}", "resume"), 202),
    Route("DeleteDurableExecution", "DELETE", (EXECUTIONS, "durable-executions", "{Arn}"), 202),
    Route("SendDurableExecutionCallbackSuccess", "POST",
          (EXECUTIONS, "durable-execution-callbacks", "{CallbackId}", "succeed"), 200),
    Route("SendDurableExecutionCallbackFailure", "POST",
          (EXECUTIONS, "durable-execution-callbacks", "{CallbackId}", "fail"), 200),
    Route("SendDurableExecutionCallbackHeartbeat", "POST",
          (EXECUTIONS, "durable-execution-callbacks", "{CallbackId}", "heartbeat"), 200),
)


def match(method: str, path: str) -> tuple[Route, dict[str, str]]:
    """The route of a request and its labels (decoded); `UnknownOperation` if none."""
    segments = path.split("/")[1:]
    known_path = False
    for route in ROUTES:
        if len(route.pattern) != len(segments):
            continue
        labels: dict[str, str] = {}
        for want, got in zip(route.pattern, segments):
            if want.startswith("{"):
                if not got:
                    break
                labels[want[1:-1]] = unquote(got)
            elif want != got:
                break
        else:
            if route.method == method:
                return route, labels
            known_path = True
    shown = path if len(path) <= 120 else path[:117] + "..."
    if known_path:
        raise UnknownOperation(f"{method} is not a method of {shown}")
    raise UnknownOperation(f"no Lambda API route for {method} {shown} (this server serves "
                           "Invoke and the durable-execution calls)")


def error_response(code: str, status: int, message: str) -> HttpResponse:
    """AWS's error shape: the code in x-amzn-ErrorType, the message in the body."""
    body = {"Type": "Service" if status >= 500 else "User", "message": message,
            "Message": message}
    return HttpResponse(status, json.dumps(body).encode(), [
        ("Content-Type", "application/json"), ("x-amzn-ErrorType", code),
        ("x-amzn-RequestId", str(uuid.uuid4()))])


def json_response(status: int, data: dict[str, Any],
                  headers: list[tuple[str, str]] | None = None) -> HttpResponse:
    return HttpResponse(status, json.dumps(data).encode(), [
        ("Content-Type", "application/json"), ("x-amzn-RequestId", str(uuid.uuid4())),
        *(headers or [])])


# -- reading arguments --------------------------------------------------------------------------


class Args:
    """A request's query, headers and body, read as the model types them."""

    def __init__(self, query: str, headers: list[tuple[str, str]], body: bytes) -> None:
        try:
            self.query = parse_qs(query, keep_blank_values=True, strict_parsing=False,
                                  errors="strict")
        except (UnicodeDecodeError, ValueError):
            raise invalid("the query string is not UTF-8 text") from None
        self.headers = {k.lower(): v for k, v in headers}
        self.body = body
        self._json: dict[str, Any] | None = None

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    def text(self, name: str) -> str | None:
        values = self.query.get(name)
        if not values:
            return None
        if len(values) > 1:
            raise invalid(f"{name} is given more than once")
        return values[0]

    def texts(self, name: str) -> list[str] | None:
        return self.query.get(name)

    def integer(self, name: str) -> int | None:
        value = self.text(name)
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            raise invalid(f"{name} is a whole number, not {value[:40]!r}") from None

    def flag(self, name: str) -> bool | None:
        value = self.text(name)
        if value is None:
            return None
        if value.lower() not in ("true", "false"):
            raise invalid(f"{name} is true or false, not {value[:40]!r}")
        return value.lower() == "true"

    def timestamp(self, name: str) -> float | None:
        """An ISO 8601 time (botocore's querystring format) or epoch seconds."""
        value = self.text(name)
        if value is None:
            return None
        try:
            return float(value)
        except ValueError:
            pass
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            raise invalid(f"{name} is an ISO 8601 time or epoch seconds, not "
                          f"{value[:40]!r}") from None
        if when.tzinfo is None:
            raise invalid(f"{name} must say its time zone (e.g. ...Z), not {value[:40]!r}")
        return when.timestamp()

    def json(self) -> dict[str, Any]:
        """The body as a JSON object ({} when empty)."""
        if self._json is None:
            if not self.body.strip():
                self._json = {}
            else:
                try:
                    data = json.loads(self.body)
                except (ValueError, UnicodeDecodeError):
                    raise InvalidRequestContentException(
                        "Could not parse request body into json") from None
                if not isinstance(data, dict):
                    raise InvalidRequestContentException(
                        "the request body must be a JSON object")
                self._json = data
        return self._json

    def field(self, name: str, kind: type | tuple[type, ...] = str) -> Any:
        value = self.json().get(name)
        if value is not None and (not isinstance(value, kind) or
                                  (kind is not bool and isinstance(value, bool))):
            raise invalid(f"{name} has the wrong type ({type(value).__name__})")
        return value

    def error_object(self) -> dict[str, Any] | None:
        """An ErrorObject body (Stop, a callback's failure)."""
        data = self.json()
        if not data:
            return None
        for key in ("ErrorType", "ErrorMessage", "ErrorData"):
            if data.get(key) is not None and not isinstance(data[key], str):
                raise invalid(f"{key} is text")
        return data

    def utf8(self) -> str:
        try:
            return self.body.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRequestContentException("the payload is not UTF-8 text") from None


# -- the answers' timestamps ----------------------------------------------------------------------


def _in_seconds(value: Any) -> Any:
    return value / 1000 if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else value


def operation_over_api(op: dict[str, Any]) -> dict[str, Any]:
    """An operation as the API answers it (epoch seconds, not milliseconds)."""
    out = dict(op)
    for key in _OP_TIMES:
        if key in out:
            out[key] = _in_seconds(out[key])
    for details, key in _DETAIL_TIMES.items():
        if isinstance(out.get(details), dict) and key in out[details]:
            out[details] = dict(out[details], **{key: _in_seconds(out[details][key])})
    return out


def _operations(ops: Any) -> list[dict[str, Any]]:
    return [operation_over_api(op) for op in ops or []]


# -- the calls ------------------------------------------------------------------------------------

Call = Callable[[LambdaApi, dict[str, str], Args, float], Awaitable[HttpResponse]]


async def _invoke(api: LambdaApi, labels: dict[str, str], args: Args,
                  wait_s: float) -> HttpResponse:
    kind = args.header("x-amz-invocation-type") or "RequestResponse"
    out = await api.invoke(labels["FunctionName"], args.utf8(),
                           execution_name=args.header("x-amz-durable-execution-name"),
                           invocation_type=kind, wait_s=wait_s,
                           qualifier=args.text("Qualifier"))
    headers = [("X-Amz-Durable-Execution-Arn", out["DurableExecutionArn"])] \
        if "DurableExecutionArn" in out else []
    if "ExecutedVersion" in out:
        headers.append(("X-Amz-Executed-Version", out["ExecutedVersion"]))
    if "FunctionError" in out:
        headers.append(("X-Amz-Function-Error", out["FunctionError"]))
    payload = out.get("Payload")
    body = b"" if payload is None else str(payload).encode("utf-8")
    if body:
        headers.append(("Content-Type", "application/json"))
    return HttpResponse(int(out["StatusCode"]), body, [
        ("x-amzn-RequestId", str(uuid.uuid4())), *headers])


async def _checkpoint(api: LambdaApi, labels: dict[str, str], args: Args,
                      wait_s: float) -> HttpResponse:
    out = await api.checkpoint(labels["Arn"], args.field("CheckpointToken"),
                               args.field("Updates", list), args.field("ClientToken"))
    state = dict(out.get("NewExecutionState") or {})
    state["Operations"] = _operations(state.get("Operations"))
    if state.get("NextMarker") is None:
        state.pop("NextMarker", None)
    answer: dict[str, Any] = {"NewExecutionState": state}
    if out.get("CheckpointToken") is not None:
        answer["CheckpointToken"] = out["CheckpointToken"]
    return json_response(200, answer)


async def _state(api: LambdaApi, labels: dict[str, str], args: Args,
                 wait_s: float) -> HttpResponse:
    out = await api.get_state(labels["Arn"], args.text("CheckpointToken"), args.text("Marker"),
                              args.integer("MaxItems") or None)
    answer: dict[str, Any] = {"Operations": _operations(out.get("Operations"))}
    if out.get("NextMarker"):
        answer["NextMarker"] = out["NextMarker"]
    return json_response(200, answer)


async def _get(api: LambdaApi, labels: dict[str, str], args: Args,
               wait_s: float) -> HttpResponse:
    return json_response(200, await api.get_execution(labels["Arn"],
                                                      args.flag("IncludeExecutionData")))


async def _history(api: LambdaApi, labels: dict[str, str], args: Args,
                   wait_s: float) -> HttpResponse:
    return json_response(200, await api.history(
        labels["Arn"], args.flag("IncludeExecutionData"), args.text("Marker"),
        args.integer("MaxItems"), args.flag("ReverseOrder")))


async def _list(api: LambdaApi, labels: dict[str, str], args: Args,
                wait_s: float) -> HttpResponse:
    return json_response(200, await api.list_by_function(
        labels["FunctionName"], args.texts("Statuses"), args.timestamp("StartedAfter"),
        args.timestamp("StartedBefore"), args.text("Marker"), args.integer("MaxItems"),
        reverse_order=args.flag("ReverseOrder"),
        execution_name=args.text("DurableExecutionName"), qualifier=args.text("Qualifier")))


async def _stop(api: LambdaApi, labels: dict[str, str], args: Args,
                wait_s: float) -> HttpResponse:
    return json_response(200, await api.stop(labels["Arn"], args.error_object()))


async def _pause(api: LambdaApi, labels: dict[str, str], args: Args,
                 wait_s: float) -> HttpResponse:
    args.field("ClientToken")
    return json_response(202, await api.pause(labels["Arn"], args.field("Reason"),
                                              args.field("ExecutionTimeoutPaused", bool)))


async def _resume(api: LambdaApi, labels: dict[str, str], args: Args,
                  wait_s: float) -> HttpResponse:
    args.field("ClientToken")
    return json_response(202, await api.resume(labels["Arn"], args.field("Reason")))


async def _delete(api: LambdaApi, labels: dict[str, str], args: Args,
                  wait_s: float) -> HttpResponse:
    return json_response(202, await api.delete(labels["Arn"]))


async def _succeed(api: LambdaApi, labels: dict[str, str], args: Args,
                   wait_s: float) -> HttpResponse:
    return json_response(200, await api.callback_success(labels["CallbackId"], args.body))


async def _fail(api: LambdaApi, labels: dict[str, str], args: Args,
                wait_s: float) -> HttpResponse:
    return json_response(200, await api.callback_failure(labels["CallbackId"],
                                                         args.error_object()))


async def _heartbeat(api: LambdaApi, labels: dict[str, str], args: Args,
                     wait_s: float) -> HttpResponse:
    return json_response(200, await api.callback_heartbeat(labels["CallbackId"]))


CALLS: dict[str, Call] = {
    "Invoke": _invoke, "CheckpointDurableExecution": _checkpoint,
    "GetDurableExecutionState": _state, "GetDurableExecution": _get,
    "GetDurableExecutionHistory": _history, "ListDurableExecutionsByFunction": _list,
    "StopDurableExecution": _stop, "PauseDurableExecution": _pause,
    "ResumeDurableExecution": _resume, "DeleteDurableExecution": _delete,
    "SendDurableExecutionCallbackSuccess": _succeed,
    "SendDurableExecutionCallbackFailure": _fail,
    "SendDurableExecutionCallbackHeartbeat": _heartbeat,
}


async def answer(api: LambdaApi, method: str, path: str, query: str,
                 headers: list[tuple[str, str]], body: bytes, wait_s: float) -> HttpResponse:
    """The answer to one (signed, verified) request: the call's, or AWS's error."""
    try:
        route, labels = match(method, path)
        return await CALLS[route.operation](api, labels, Args(query, headers, body), wait_s)
    except AwsServiceError as exc:
        return error_response(exc.code, exc.status, exc.message)
    except (InvalidArgument, ValidationError) as exc:  # bad input the API did not word
        return error_response("InvalidParameterValueException", 400, str(exc))
    except (NotFound, UnknownExecution) as exc:
        return error_response("ResourceNotFoundException", 404, str(exc))
    except AlarmtopError as exc:  # the runtime could not do it (storage, say)
        return error_response("ServiceException", 500, f"{type(exc).__name__}: {exc}")
