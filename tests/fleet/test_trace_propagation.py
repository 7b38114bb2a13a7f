"""A call forwarded to the node that holds the object carries the caller's trace: the
owner's event span continues it (the OpenTelemetry plugin on both nodes)."""

from __future__ import annotations

import pytest

from tests.environment import unavailable

try:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind
except ImportError:  # pragma: no cover - the otel extra is not installed
    OTEL = False
else:
    OTEL = True

from tests.fleet.conftest import NodeFactory, balance, name_on


async def test_the_owners_event_continues_the_callers_trace(node: NodeFactory) -> None:
    if not OTEL:
        unavailable("opentelemetry-sdk is not installed (pip install 'alarmtop[otel]')")
    from alarmtop.core.otel import OpenTelemetryPlugin

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    a = await node("a", plugins=[OpenTelemetryPlugin(provider)])
    b = await node("b", plugins=[OpenTelemetryPlugin(provider)])
    await balance(a, b)
    name = name_on(b)
    with provider.get_tracer("app").start_as_current_span("caller on a") as caller:
        assert await a.get("Counter", name).add(2) == 2
        with pytest.raises(ValueError):
            await a.get("Counter", name).fail("bad input")
    events = [s for s in exporter.get_finished_spans() if s.name.startswith("alarmtop call")]
    assert [s.name for s in events] == ["alarmtop call Counter.add", "alarmtop call Counter.fail"]
    for span in events:  # run on b, in a's trace, under a's span
        assert span.kind is SpanKind.SERVER
        assert span.context.trace_id == caller.get_span_context().trace_id
        assert span.parent is not None
        assert span.parent.span_id == caller.get_span_context().span_id
    provider.shutdown()
