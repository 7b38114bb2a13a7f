"""OpenTelemetry traces for alarmtop, as a lifecycle hook plugin (`alarmtop[otel]`).

    from alarmtop.core.otel import OpenTelemetryPlugin
    rt = Runtime(data_dir, plugins=[OpenTelemetryPlugin()])

Spans (all named `alarmtop ...`, attributes under `alarmtop.`):

- an object event: `alarmtop call Class.method`, `alarmtop socket Class.method`,
  `alarmtop event Class.alarm` (an alarm attempt's), its outcome, the error it
  raised;
- an alarm attempt: `alarmtop alarm Class`, with `alarmtop.alarm.retry_count`,
  `max_retries` and `outcome` (ok, retry_scheduled, dead, abandoned); the attempt's
  object event is its child;
- an execution's invocation: `alarmtop invoke name`, with the invocation number,
  `is_first_invocation` and the final status (SUCCEEDED, FAILED, PENDING, RETRY);
- one span per attempt of a step (or of a condition's check): `alarmtop step name`,
  with its attempt number and outcome, a child of the invocation that ran it. A
  replay runs no attempt, so a replayed step is never a new span;
- an operator command of the ops channel: `alarmtop command op` (queries too with
  `trace_queries=True`).

Each span is current while its work runs, so spans the application makes inside a
handler, and calls it makes to other objects, nest under it. The trace context
goes with a call forwarded to another node of a fleet, and with an execution's
start: its invocations, even days later, join the trace that started it. Context
is carried with the propagator the application configured (W3C trace context by
default), and spans are made by the tracer provider it set: the global one unless
`tracer_provider` is given. This plugin never sets either.

The execution engine's own objects (class `Execution`) get no object or alarm
spans by default: their invocation spans say what they did
(`trace_execution_objects=True` adds them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from alarmtop.core.kernel.hooks import Plugin
from alarmtop.core.model import hook_info
from alarmtop.core.model.operations import EXECUTION_CLASS

_MS = 1_000_000  # nanoseconds in a millisecond: OpenTelemetry times are ns


class OpenTelemetryPlugin(Plugin):
    """Spans for object events, alarm attempts, invocations, step attempts, commands.

    Args:
        tracer_provider: where spans go; the global provider (as the application set
            it, looked up at each span) when None.
        trace_queries: also a span per ops-channel query (the console sends several a
            second: off by default).
        trace_execution_objects: also object and alarm spans for the engine's
            `Execution` objects.
    """

    def __init__(self, tracer_provider: trace.TracerProvider | None = None, *,
                 trace_queries: bool = False, trace_execution_objects: bool = False) -> None:
        self.tracer = trace.get_tracer("alarmtop", tracer_provider=tracer_provider)
        self.trace_queries = trace_queries
        self.trace_execution_objects = trace_execution_objects
        # A start's span and the context token that made it current, by the start's
        # info (infos hash by identity); its end pops it.
        self._open: dict[Any, tuple[Span, object]] = {}

    # -- the bookkeeping of every span ----------------------------------------------------

    def _start(self, key: Any, name: str, start_ms: int, attributes: dict[str, Any], *,
               kind: SpanKind = SpanKind.INTERNAL,
               parent: otel_context.Context | None = None) -> None:
        span = self.tracer.start_span(name, context=parent, kind=kind,
                                      attributes=_clean(attributes),
                                      start_time=start_ms * _MS)
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        self._open[key] = (span, token)

    def _end(self, key: Any, end_ms: int, attributes: dict[str, Any],
             error: BaseException | str | None = None, failed: bool = False) -> None:
        opened = self._open.pop(key, None)
        if opened is None:
            return  # started before this plugin was added
        span, token = opened
        try:
            otel_context.detach(token)  # type: ignore[arg-type]
        finally:
            span.set_attributes(_clean(attributes))
            if isinstance(error, BaseException):
                span.record_exception(error)
            if error is not None or failed:
                span.set_status(Status(StatusCode.ERROR, _describe(error)))
            span.end(end_time=end_ms * _MS)

    def _traced(self, object_class: str) -> bool:
        return self.trace_execution_objects or object_class != EXECUTION_CLASS

    # -- objects and alarms ---------------------------------------------------------------

    def on_object_event_start(self, info: hook_info.ObjectEventInfo) -> None:
        if not self._traced(info.object_class):
            return
        parent = propagate.extract(info.propagation) if info.propagation else None
        # An alarm's event is "event": "alarm" names the attempt that holds it.
        label = "event" if info.event == "alarm" else info.event
        self._start(info, f"alarmtop {label} {info.object_class}.{info.method}",
                    info.start_ms, {
            "alarmtop.object.class": info.object_class,
            "alarmtop.object.name": info.object_name,
            "alarmtop.event": info.event,
            "alarmtop.method": info.method,
        }, kind=SpanKind.SERVER if parent is not None else SpanKind.INTERNAL, parent=parent)

    def on_object_event_end(self, info: hook_info.ObjectEventEndInfo) -> None:
        self._end(info.start, info.end_ms, {"alarmtop.outcome": info.outcome.value},
                  info.error, info.outcome is not hook_info.Outcome.OK)

    def on_alarm_attempt_start(self, info: hook_info.AlarmAttemptInfo) -> None:
        if not self._traced(info.object_class):
            return
        self._start(info, f"alarmtop alarm {info.object_class}", info.start_ms, {
            "alarmtop.object.class": info.object_class,
            "alarmtop.object.name": info.object_name,
            "alarmtop.alarm.scheduled_ms": info.scheduled_ms,
            "alarmtop.alarm.retry_count": info.retry_count,
            "alarmtop.alarm.max_retries": info.max_retries,
        })

    def on_alarm_attempt_end(self, info: hook_info.AlarmAttemptEndInfo) -> None:
        self._end(info.start, info.end_ms, {
            "alarmtop.alarm.outcome": info.outcome.value,
            "alarmtop.alarm.next_attempt_ms": info.next_attempt_ms,
        }, info.error)

    # -- executions -----------------------------------------------------------------------

    def on_invocation_start(self, info: hook_info.InvocationStartInfo) -> None:
        # The trace of the code that started the execution, recorded with it; without
        # one, the context of the invocation's own task.
        parent = propagate.extract(info.propagation) if info.propagation else None
        self._start(info, f"alarmtop invoke {info.name}", info.start_ms, {
            "alarmtop.execution.id": info.execution_id,
            "alarmtop.execution.name": info.name,
            "alarmtop.execution.version": info.version,
            "alarmtop.invocation": info.invocation,
            "alarmtop.is_first_invocation": info.is_first_invocation,
        }, parent=parent)

    def on_invocation_end(self, info: hook_info.InvocationEndInfo) -> None:
        error = info.error or {}
        self._end(info.start, info.end_ms, {
            "alarmtop.invocation.status": info.status.value,
            "alarmtop.execution.status": info.execution_status,
            "alarmtop.error.type": error.get("ErrorType"),
        }, error.get("ErrorMessage") if info.status is hook_info.InvocationStatus.FAILED else None,
            info.status is hook_info.InvocationStatus.FAILED)

    def on_user_function_start(self, info: hook_info.UserFunctionStartInfo) -> None:
        self._start(info, f"alarmtop {info.sub_type.lower()} {info.name or info.operation_id}",
                    info.start_ms, {
                        "alarmtop.execution.id": info.execution_id,
                        "alarmtop.operation.id": info.operation_id,
                        "alarmtop.operation.type": info.operation_type.value,
                        "alarmtop.operation.name": info.name,
                        "alarmtop.step.attempt": info.attempt,
                    })

    def on_user_function_end(self, info: hook_info.UserFunctionEndInfo) -> None:
        self._end(info.start, info.end_ms, {"alarmtop.step.outcome": info.outcome.value},
                  info.exception)

    # -- operators ------------------------------------------------------------------------

    def on_command_start(self, info: hook_info.CommandInfo) -> None:
        if info.query and not self.trace_queries:
            return
        self._start(info, f"alarmtop command {info.op}", info.start_ms, {
            "alarmtop.command": info.op,
            "alarmtop.command.target": info.target,
            "alarmtop.command.role": info.role,
            "alarmtop.command.client": info.client,
            "alarmtop.command.query": info.query,
        }, kind=SpanKind.SERVER)

    def on_command_end(self, info: hook_info.CommandEndInfo) -> None:
        self._end(info.start, info.end_ms, {"alarmtop.outcome": info.outcome.value},
                  info.error, info.outcome is not hook_info.Outcome.OK)

    # -- propagation ----------------------------------------------------------------------

    def propagation_metadata(self) -> Mapping[str, str] | None:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        return carrier or None


def _clean(attributes: dict[str, Any]) -> dict[str, Any]:
    """OpenTelemetry takes no None values: leave those attributes out."""
    return {k: v for k, v in attributes.items() if v is not None}


def _describe(error: BaseException | str | None) -> str | None:
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {error}"
    return error
