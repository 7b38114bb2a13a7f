"""Handlers written with the real AWS SDK, for the tests of alarmtop as its service side.

Importing this module needs the SDK (`pip install -e '.[aws]'`): the tests that use
it skip without it, and fail under ALARMTOP_REQUIRE_ALL. Handlers that must be
steered from a test (held inside a step until the test lets them go, told to
fail) read `GATES` and `SWITCHES`, keyed by the execution's ARN.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

import pytest

from tests.environment import required

try:
    from aws_durable_execution_sdk_python import DurableContext, StepContext, durable_execution
    from aws_durable_execution_sdk_python.config import (
        CallbackConfig,
        Duration,
        StepConfig,
    )
    from aws_durable_execution_sdk_python.retries import RetryPresets
except ImportError:  # pragma: no cover - the aws extra is missing
    if required():
        raise
    pytest.skip("the AWS SDK is not installed (pip install -e '.[aws]')",
                allow_module_level=True)

NO_RETRY = StepConfig(retry_strategy=RetryPresets.none())
# Per execution ARN: events a held step waits on, and what a test asks a step to do.
GATES: dict[str, threading.Event] = defaultdict(threading.Event)
SWITCHES: dict[str, dict[str, Any]] = defaultdict(dict)
RUNS: dict[str, list[str]] = defaultdict(list)  # step bodies that ran, per ARN


def ran(arn: str, name: str) -> None:
    RUNS[arn].append(name)


@durable_execution
def two_steps(event: Any, context: DurableContext) -> Any:
    arn = context.execution_context.durable_execution_arn
    a = context.step(lambda _: (ran(arn, "a"), f"a:{event}")[1], name="a")
    context.wait(Duration.from_seconds(2))
    b = context.step(lambda _: (ran(arn, "b"), f"b:{a}")[1], name="b")
    return b


@durable_execution
def held(event: Any, context: DurableContext) -> Any:
    """Checkpoints step `a`, then holds inside step `b` until its gate opens."""
    arn = context.execution_context.durable_execution_arn
    context.step(lambda _: ran(arn, "a") or "a", name="a")

    def wait_for_gate(_: StepContext) -> str:
        ran(arn, "b")
        if not GATES[arn].wait(timeout=20):
            raise TimeoutError("the test never opened the gate")
        return "b"
    context.step(wait_for_gate, name="b")
    context.step(lambda _: ran(arn, "c") or "c", name="c")
    return "done"


@durable_execution
def held_with_callback(event: Any, context: DurableContext) -> Any:
    """Creates a callback, holds inside step `b`, then waits for the callback."""
    arn = context.execution_context.durable_execution_arn
    cb = context.create_callback(name="cb")

    def wait_for_gate(_: StepContext) -> str:
        ran(arn, "b")
        if not GATES[arn].wait(timeout=20):
            raise TimeoutError("the test never opened the gate")
        return "b"
    context.step(wait_for_gate, name="b")
    return cb.result()


@durable_execution
def callback_then_step(event: Any, context: DurableContext) -> Any:
    cb = context.create_callback(name="approval", config=CallbackConfig(
        timeout=Duration.from_seconds(event.get("timeout", 0)),
        heartbeat_timeout=Duration.from_seconds(event.get("heartbeat", 0))))
    verdict = cb.result()
    return context.step(lambda _: f"approved:{verdict}", name="after")


@durable_execution
def fails_until_fixed(event: Any, context: DurableContext) -> Any:
    arn = context.execution_context.durable_execution_arn
    first = context.step(lambda _: (ran(arn, "first"), "first")[1], name="first")

    def flaky(_: StepContext) -> str:
        ran(arn, "flaky")
        if SWITCHES["fixed"].get("on") is not True:
            raise RuntimeError("not fixed yet")
        return "fixed"
    second = context.step(flaky, name="flaky", config=NO_RETRY)
    return [first, second]


@durable_execution
def big_result(event: Any, context: DurableContext) -> Any:
    return context.step(lambda _: "x" * event["size"], name="big", config=NO_RETRY)


@durable_execution
def many_steps(event: Any, context: DurableContext) -> Any:
    return [context.step(lambda _, i=i: i, name=f"s{i}") for i in range(event["n"])]


@durable_execution
def invokes(event: Any, context: DurableContext) -> Any:
    return context.invoke(event["target"], event.get("payload"), name="call")


@durable_execution
def echo_after_wait(event: Any, context: DurableContext) -> Any:
    context.wait(Duration.from_seconds(1))
    return event


def plain_double(event: Any, _context: Any) -> Any:
    return event * 2


@durable_execution
def exits_once(event: Any, context: DurableContext) -> Any:
    """Ends its own process inside step `b` the first time (a Lambda crash)."""
    import os
    from pathlib import Path

    def crash_once(_: StepContext) -> str:
        marker = Path(event["marker"])
        if not marker.exists():
            marker.write_text("crashed")
            os._exit(1)
        return "b"
    a = context.step(lambda _: "a", name="a")
    return [a, context.step(crash_once, name="b")]


def plain_fails(event: Any, _context: Any) -> Any:
    raise ValueError(f"cannot take {event!r}")
