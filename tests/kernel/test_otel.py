"""The OpenTelemetry plugin, against the SDK's in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.environment import unavailable

try:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind, StatusCode
except ImportError:  # pragma: no cover - the otel extra is not installed
    OTEL = False
else:
    OTEL = True

from alarmtop.core import AlarmInfo, DurableObject, RetryPolicy, VirtualClock
from alarmtop.core.durable import (
    DurableContext,
    Duration,
    RetryStrategyConfig,
    StepConfig,
    create_retry_strategy,
    durable_execution,
)
from alarmtop.core.model.errors import UnknownFault
from tests.conftest import START_MS, RuntimeFactory


@pytest.fixture(autouse=True)
def _need_otel() -> None:
    if not OTEL:
        unavailable("opentelemetry-sdk is not installed (pip install 'alarmtop[otel]')")


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    # The application's own provider, passed in; the global one is never touched.
    p = TracerProvider()
    p.add_span_processor(SimpleSpanProcessor(exporter))
    yield p
    p.shutdown()


@pytest.fixture
def plugin(provider: TracerProvider) -> Any:
    from alarmtop.core.otel import OpenTelemetryPlugin
    return OpenTelemetryPlugin(provider)


def spans(exporter: InMemorySpanExporter, prefix: str = "alarmtop") -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


class Shop(DurableObject):
    async def buy(self, item: str) -> str:
        await self.ctx.storage.put(item, True)
        return item

    async def refuse(self) -> None:
        raise PermissionError("closed")

    async def arm(self, at_ms: int) -> None:
        await self.ctx.storage.set_alarm(at_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        if info.retry_count < 2:
            raise RuntimeError(f"try {info.retry_count}")


async def test_calls_nest_under_the_callers_span(make_runtime: RuntimeFactory, plugin: Any,
                                                 provider: TracerProvider,
                                                 exporter: InMemorySpanExporter) -> None:
    global_before = trace.get_tracer_provider()
    rt = await make_runtime(Shop, plugins=[plugin])
    shop = rt.get(Shop, "s")
    with provider.get_tracer("app").start_as_current_span("checkout") as app:
        assert await shop.buy("tea") == "tea"
        with pytest.raises(PermissionError):
            await shop.refuse()
    buy, refuse = spans(exporter)
    assert (buy.name, refuse.name) == ("alarmtop call Shop.buy", "alarmtop call Shop.refuse")
    assert parent_of(buy) == parent_of(refuse) == app.get_span_context().span_id
    assert buy.attributes is not None and dict(buy.attributes) == {
        "alarmtop.object.class": "Shop", "alarmtop.object.name": "s",
        "alarmtop.event": "call", "alarmtop.method": "buy", "alarmtop.outcome": "ok"}
    assert buy.status.status_code is StatusCode.UNSET
    assert refuse.status.status_code is StatusCode.ERROR
    assert [e.name for e in refuse.events] == ["exception"]
    assert trace.get_tracer_provider() is global_before


async def test_alarm_attempts_carry_retry_count_and_outcome(
        make_runtime: RuntimeFactory, clock: VirtualClock, plugin: Any,
        exporter: InMemorySpanExporter) -> None:
    rt = await make_runtime(Shop, plugins=[plugin], policies={"Shop": RetryPolicy(
        max_retries=3, initial_delay_s=1.0)})
    await rt.get(Shop, "a").arm(START_MS + 1000)
    exporter.clear()
    await clock.advance(20)
    alarms = spans(exporter, "alarmtop alarm")
    assert [(s.attributes or {}).get("alarmtop.alarm.retry_count") for s in alarms] == [0, 1, 2]
    assert [(s.attributes or {}).get("alarmtop.alarm.outcome") for s in alarms] == [
        "retry_scheduled", "retry_scheduled", "ok"]
    assert [s.status.status_code for s in alarms] == [StatusCode.ERROR, StatusCode.ERROR,
                                                      StatusCode.UNSET]
    events = [s for s in spans(exporter) if (s.attributes or {}).get("alarmtop.event") == "alarm"]
    assert len(events) == 3
    # Each attempt's object event is its child, in the attempt's trace.
    assert [parent_of(e) for e in events] == [a.context.span_id for a in alarms]
    assert all(s.start_time is not None and s.start_time >= START_MS * 1_000_000
               for s in alarms)  # the runtime clock's time


tries: dict[str, int] = {}


def flaky() -> str:
    tries["n"] = tries.get("n", 0) + 1
    if tries["n"] == 1:
        raise RuntimeError("first try fails")
    return "ok"


@durable_execution(name="traced")
async def traced(event: Any, ctx: DurableContext) -> str:
    a = await ctx.step(lambda: "a", name="first")
    await ctx.wait(Duration(5), name="pause")
    b = await ctx.step(flaky, name="flaky", config=StepConfig(
        retry_strategy=create_retry_strategy(RetryStrategyConfig(
            max_attempts=3, initial_delay=Duration(1)))))
    return a + b


async def test_invocations_join_the_starters_trace_and_replayed_steps_are_not_spans(
        make_runtime: RuntimeFactory, clock: VirtualClock, plugin: Any,
        provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    tries.clear()
    rt = await make_runtime(plugins=[plugin])
    rt.register_execution(traced)
    with provider.get_tracer("app").start_as_current_span("signup") as app:
        await rt.executions.start("traced", None, execution_id="t1")
    await clock.advance(0)
    await clock.advance(5)
    await clock.advance(2)
    assert (await rt.executions.describe("t1"))["status"] == "succeeded"

    invokes = spans(exporter, "alarmtop invoke")
    assert [(s.attributes or {}).get("alarmtop.invocation") for s in invokes] == [1, 2, 3]
    assert [(s.attributes or {}).get("alarmtop.is_first_invocation") for s in invokes] == [
        True, False, False]
    assert [(s.attributes or {}).get("alarmtop.invocation.status") for s in invokes] == [
        "PENDING", "PENDING", "SUCCEEDED"]
    trace_id = app.get_span_context().trace_id
    assert all(s.context.trace_id == trace_id for s in invokes)
    assert all(parent_of(s) == app.get_span_context().span_id for s in invokes)

    steps = spans(exporter, "alarmtop step")
    assert [(s.name, (s.attributes or {}).get("alarmtop.step.attempt"),
             (s.attributes or {}).get("alarmtop.step.outcome")) for s in steps] == [
        ("alarmtop step first", 1, "SUCCEEDED"), ("alarmtop step flaky", 1, "FAILED"),
        ("alarmtop step flaky", 2, "SUCCEEDED")]
    # Each attempt is a child of the invocation that ran it.
    assert [parent_of(s) for s in steps] == [invokes[0].context.span_id,
                                             invokes[1].context.span_id,
                                             invokes[2].context.span_id]
    # The engine's own objects get no spans of their own by default.
    assert not [s for s in spans(exporter)
                if (s.attributes or {}).get("alarmtop.object.class") == "Execution"]


async def test_a_failed_invocation_is_an_error_span(
        make_runtime: RuntimeFactory, clock: VirtualClock, plugin: Any,
        exporter: InMemorySpanExporter) -> None:
    @durable_execution(name="fails")
    async def fails(event: Any, ctx: DurableContext) -> None:
        raise ValueError("bad input")

    rt = await make_runtime(plugins=[plugin])
    rt.register_execution(fails)
    await rt.executions.start("fails", None, execution_id="f1")
    await clock.advance(0)
    (invoke,) = spans(exporter, "alarmtop invoke")
    assert (invoke.attributes or {}).get("alarmtop.invocation.status") == "FAILED"
    assert invoke.status.status_code is StatusCode.ERROR
    assert invoke.status.description is not None and "bad input" in invoke.status.description


async def test_a_forwarded_call_continues_the_callers_trace(
        make_runtime: RuntimeFactory, plugin: Any, provider: TracerProvider,
        exporter: InMemorySpanExporter) -> None:
    """What a node sends with a call it forwards (the runtime's `propagation()` in the
    caller's task) makes the receiving node's event a server span of that trace."""
    rt = await make_runtime(Shop, plugins=[plugin])
    with provider.get_tracer("app").start_as_current_span("remote caller") as caller:
        carried = rt.hooks.propagation()
    assert carried is not None and "traceparent" in carried
    async def held(key: Any) -> None:  # this runtime holds every object
        pass
    await rt.calls.serve({"op": "call", "cls": "Shop", "name": "s", "method": "buy",
                          "args": ["cake"], "kwargs": {}, "propagation": carried}, held)
    (event,) = spans(exporter)
    assert event.kind is SpanKind.SERVER
    assert event.context.trace_id == caller.get_span_context().trace_id
    assert parent_of(event) == caller.get_span_context().span_id
    # Outside any span there is nothing to carry.
    assert rt.hooks.propagation() is None


async def test_operator_commands_are_spans_and_queries_are_not(
        make_runtime: RuntimeFactory, plugin: Any, exporter: InMemorySpanExporter) -> None:
    from alarmtop.server.ops import OpsService, Session
    from alarmtop.server.wire import Command

    rt = await make_runtime(Shop, plugins=[plugin])
    ops = OpsService(rt)
    who = Session("operator", "127.0.0.1:5000")
    await ops.run(Command("inject_fault", 1, {"target": "Shop/s", "kind": "alarm_raise"}),
                  who)
    await ops.run(Command("faults", 2, {}), who)
    with pytest.raises(UnknownFault):
        await ops.run(Command("clear_fault", 3, {"fault_id": "nope"}), who)
    commands = spans(exporter, "alarmtop command")
    assert [s.name for s in commands] == ["alarmtop command inject_fault",
                                          "alarmtop command clear_fault"]
    attrs = dict(commands[0].attributes or {})
    assert attrs == {"alarmtop.command": "inject_fault", "alarmtop.command.target": "Shop/s",
                     "alarmtop.command.role": "operator",
                     "alarmtop.command.client": "127.0.0.1:5000",
                     "alarmtop.command.query": False, "alarmtop.outcome": "ok"}
    assert commands[1].status.status_code is StatusCode.ERROR
