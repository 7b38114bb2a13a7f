"""One durable handler per conformance requirement, written from the YAML prose.

Each handler implements the requirement's `handler` / `invocations` text with this
project's API (`ctx.step(fn, *args, name=, config=)`, `ctx.wait`, ...). The SDK's
`StepContext` has no counterpart here (step bodies are called as `fn(*args)`),
so what the AWS handlers keep in DynamoDB or read from `step_context.attempt`
("fails on the first attempt") is counted per execution in `_STATE`, and what they
log is captured per execution in `LOGS` (fed to the suite's log validator).

A "Lambda crash (process.exit)" is the runtime's `step_crash` fault, injected by
the requirement's `setup` before the execution starts: it abandons the
invocation exactly as a dead process would. The invoke suite's target functions
are durable handlers registered next to the caller (`others`).
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from alarmtop.core.durable import (
    BatchResult,
    CallbackConfig,
    ChildConfig,
    CompletionConfig,
    DurableContext,
    DurableFunction,
    DurableOperationError,
    Duration,
    JitterStrategy,
    MapConfig,
    NestingType,
    ParallelConfig,
    RetryDecision,
    RetryPresets,
    RetryStrategyConfig,
    SerDes,
    StepConfig,
    StepError,
    StepSemantics,
    WaitForCallbackConfig,
    WaitForConditionConfig,
    WaitForConditionDecision,
    WaitStrategyConfig,
    create_retry_strategy,
    create_wait_strategy,
    durable_execution,
)

Setup = Callable[[Any, str], None]  # (runtime, execution_id) -> None, before the start


@dataclass(frozen=True)
class HandlerSpec:
    requirement_id: str
    fn: DurableFunction
    setup: Setup | None = None
    others: tuple[DurableFunction, ...] = ()  # functions it invokes, registered alongside


HANDLERS: dict[str, HandlerSpec] = {}

# Per execution: lines the handler logged, and counters that outlive invocations.
LOGS: dict[str, list[dict[str, Any]]] = defaultdict(list)
_STATE: dict[str, dict[str, int]] = defaultdict(dict)
_ingestion = itertools.count()


def requirement(rid: str, *, setup: Setup | None = None,
                others: tuple[DurableFunction, ...] = (), plugins: tuple[Any, ...] = ()
                ) -> Callable[[Callable[[Any, DurableContext], Awaitable[Any]]], Any]:
    """Register the decorated `async def handler(event, ctx)` for requirement `rid`
    (with `plugins`: the handler's own lifecycle hook plugins, as the SDK's
    `durable_execution(plugins=[...])`)."""
    def register(fn: Callable[[Any, DurableContext], Awaitable[Any]]) -> Any:
        if rid in HANDLERS:
            raise ValueError(f"two handlers for requirement {rid}")
        name = "req_" + rid.replace("-", "_")
        HANDLERS[rid] = HandlerSpec(rid, durable_execution(name=name, plugins=plugins)(fn),
                                    setup, others)
        return fn
    return register


def forget(execution_id: str) -> None:
    LOGS.pop(execution_id, None)
    _STATE.pop(execution_id, None)


def log(ctx: DurableContext, message: str) -> None:
    """What the SDK handlers print through their logger (replay logging on)."""
    LOGS[ctx.execution_id].append({"message": message, "timestamp": ctx.now_ms(),
                                   "ingestionTime": next(_ingestion)})


def log_record(execution_id: str, record: dict[str, Any], at_ms: int) -> None:
    """What the SDK's conformance plugins print as JSON lines to stdout (CloudWatch
    would carry them): one record of execution `execution_id`, at `at_ms`."""
    LOGS[execution_id].append({"message": json.dumps(record), "timestamp": at_ms,
                               "ingestionTime": next(_ingestion)})


def runs(ctx: DurableContext, key: str) -> int:
    """Count one more run of the body `key` of this execution; returns the count."""
    counters = _STATE[ctx.execution_id]
    counters[key] = counters.get(key, 0) + 1
    return counters[key]


def crash_step(step: str, point: str = "B") -> Setup:
    """Kill the invocation once, inside step `step` (B: body ran, result not checkpointed)."""
    def setup(rt: Any, execution_id: str) -> None:
        rt.faults.inject(target=execution_id, kind="step_crash", step=step, point=point)
    return setup


class TransientError(Exception):
    """The custom error of 1-15 / 1-16."""


NO_RETRY = StepConfig(retry_strategy=RetryPresets.none())


def fixed_retry(max_attempts: int, delay: int = 1) -> StepConfig:
    return StepConfig(retry_strategy=create_retry_strategy(RetryStrategyConfig(
        max_attempts=max_attempts, initial_delay=Duration(delay), max_delay=Duration(delay),
        backoff_rate=1, jitter_strategy=JitterStrategy.NONE)))


def echo(value: Any) -> Any:
    return value


def fail(message: str = "step failed") -> Any:
    raise RuntimeError(message)


# ===================================================================== step (1-x)

def greet(name: Any) -> str:
    return f"Hello, {name}!"


@requirement("1-1")
async def step_basic(event: Any, ctx: DurableContext) -> Any:
    return await ctx.step(greet, event)


@requirement("1-2")
async def step_named(event: Any, ctx: DurableContext) -> Any:
    return await ctx.step(greet, event, name="custom_step_name")


@requirement("1-3")
async def step_sequential(event: Any, ctx: DurableContext) -> Any:
    def step_one() -> str:
        return "first"

    def step_two(previous: str) -> str:
        return f"{previous}_second"

    result1 = await ctx.step(step_one)
    return await ctx.step(step_two, result1)


@requirement("1-4")
async def step_complex_object(event: Any, ctx: DurableContext) -> Any:
    def build_response(e: dict[str, Any]) -> dict[str, Any]:
        return {"user": {"name": e["name"], "tags": list(e["tags"])}, "count": len(e["tags"])}

    return await ctx.step(build_response, event)


@requirement("1-5")
async def step_null(event: Any, ctx: DurableContext) -> Any:
    def do_nothing() -> None:
        return None

    return await ctx.step(do_nothing)


def _upper(value: Any) -> Any:
    if isinstance(value, str):
        return value.upper()
    if isinstance(value, list):
        return [_upper(v) for v in value]
    if isinstance(value, dict):
        return {k: _upper(v) for k, v in value.items()}
    return value


UPPERCASE_JSON = SerDes(lambda v: json.dumps(_upper(v)), json.loads)


@requirement("1-6")
async def step_custom_serdes(event: Any, ctx: DurableContext) -> Any:
    def return_input(value: Any) -> Any:
        return value

    return await ctx.step(return_input, event, config=StepConfig(serdes=UPPERCASE_JSON))


@requirement("1-7")  # not run: see manifest.CANNOT_HONOUR
async def step_logger(event: Any, ctx: DurableContext) -> Any:
    def greet_logged(name: Any) -> str:
        log(ctx, f"Greeting step started for: {name}")
        out = f"Hello, {name}!"
        log(ctx, f"Greeting step completed with: {out}")
        return out

    return await ctx.step(greet_logged, event)


@requirement("1-8")
async def step_then_wait(event: Any, ctx: DurableContext) -> Any:
    def compute() -> str:
        return "computed"

    result = await ctx.step(compute)
    await ctx.wait(Duration.from_seconds(2))
    return result


@requirement("1-9")
async def step_replay_skips(event: Any, ctx: DurableContext) -> Any:
    def cached() -> str:
        log(ctx, "step executed")
        return "cached_value"

    result = await ctx.step(cached)
    await ctx.wait(Duration.from_seconds(1))
    return result


@requirement("1-10")
async def step_replay_rethrows(event: Any, ctx: DurableContext) -> Any:
    def failing() -> Any:
        log(ctx, "step executed")
        raise RuntimeError("permanent failure")

    outcome = "no error"
    try:
        await ctx.step(failing, config=NO_RETRY)
    except StepError as exc:
        outcome = f"caught: {exc.message}"
    await ctx.wait(Duration.from_seconds(1))
    return outcome


@requirement("1-11")
async def step_retry_then_success(event: Any, ctx: DurableContext) -> Any:
    def unreliable() -> str:
        if runs(ctx, "unreliable") == 1:
            raise RuntimeError("first attempt fails")
        return "Operation succeeded"

    return await ctx.step(unreliable, config=fixed_retry(3))


@requirement("1-12")
async def step_retry_exhausted(event: Any, ctx: DurableContext) -> Any:
    def always_fail() -> Any:
        raise RuntimeError("always fails")

    return await ctx.step(always_fail, config=fixed_retry(4))


@requirement("1-13")
async def step_default_retry(event: Any, ctx: DurableContext) -> Any:
    def unreliable() -> str:
        if runs(ctx, "unreliable") <= 2:
            raise RuntimeError("fails on the first two attempts")
        return "succeeded on third attempt"

    return await ctx.step(unreliable)  # no config: the SDK's default strategy


@requirement("1-14")
async def step_custom_backoff(event: Any, ctx: DurableContext) -> Any:
    def unreliable() -> str:
        if runs(ctx, "unreliable") <= 2:
            raise RuntimeError("fails twice")
        return "succeeded"

    strategy = create_retry_strategy(RetryStrategyConfig(
        max_attempts=5, initial_delay=Duration.from_seconds(2), backoff_rate=3,
        jitter_strategy=JitterStrategy.NONE))
    return await ctx.step(unreliable, config=StepConfig(retry_strategy=strategy))


def retry_on_transient(error: BaseException, attempts_made: int) -> RetryDecision:
    if isinstance(error, TransientError) and attempts_made < 3:
        return RetryDecision.retry(Duration.from_seconds(1))
    return RetryDecision.no_retry()


def no_retry_on_transient_error(error: BaseException, attempts_made: int) -> RetryDecision:
    if isinstance(error, TransientError) or attempts_made >= 3:
        return RetryDecision.no_retry()
    return RetryDecision.retry(Duration.from_seconds(1))


@requirement("1-15")
async def step_retry_specific(event: Any, ctx: DurableContext) -> Any:
    def flaky() -> str:
        if runs(ctx, "flaky") == 1:
            raise TransientError("transient failure")
        return "recovered"

    return await ctx.step(flaky, config=StepConfig(retry_strategy=retry_on_transient))


@requirement("1-16")
async def step_retry_refused(event: Any, ctx: DurableContext) -> Any:
    def flaky() -> str:
        raise TransientError("transient failure")

    return await ctx.step(flaky, config=StepConfig(retry_strategy=no_retry_on_transient_error))


@requirement("1-17", setup=crash_step("at_most_once_flaky_step"))
async def step_at_most_once_no_retry(event: Any, ctx: DurableContext) -> Any:
    def flaky(value: Any) -> str:
        log(ctx, f"at_most_once_flaky_step running with {value}")
        return "unreachable: the process dies before this is checkpointed"

    return await ctx.step(flaky, event, name="at_most_once_flaky_step", config=StepConfig(
        retry_strategy=RetryPresets.none(),
        step_semantics=StepSemantics.AT_MOST_ONCE_PER_RETRY))


@requirement("1-18", setup=crash_step("at_most_once_step"))
async def step_at_most_once_retry(event: Any, ctx: DurableContext) -> Any:
    def flaky(value: Any) -> str:
        log(ctx, f"at_most_once_step running with {value}")
        return "succeeded on second attempt"

    cfg = fixed_retry(3)
    return await ctx.step(flaky, event, name="at_most_once_step", config=StepConfig(
        retry_strategy=cfg.retry_strategy, step_semantics=StepSemantics.AT_MOST_ONCE_PER_RETRY))


@requirement("1-19")
async def step_fails(event: Any, ctx: DurableContext) -> Any:
    def failing() -> Any:
        raise ValueError("something went wrong")

    return await ctx.step(failing, config=NO_RETRY)


@requirement("1-20")
async def step_error_caught(event: Any, ctx: DurableContext) -> Any:
    def failing() -> Any:
        raise ValueError("something went wrong")

    def use_fallback(value: str) -> str:
        return value

    try:
        fallback = await ctx.step(failing, config=NO_RETRY)
    except StepError:
        fallback = "fallback_result"
    return await ctx.step(use_fallback, fallback)


# ===================================================================== wait (2-x)

@requirement("2-1")
async def wait_basic(event: Any, ctx: DurableContext) -> Any:
    await ctx.wait(Duration.from_seconds(2))
    return None


@requirement("2-2")
async def wait_named(event: Any, ctx: DurableContext) -> Any:
    await ctx.wait(Duration.from_seconds(2), name="custom_wait_name")
    return None


@requirement("2-3")
async def wait_sequential(event: Any, ctx: DurableContext) -> Any:
    await ctx.wait(Duration.from_seconds(2), name="wait-1")
    await ctx.wait(Duration.from_seconds(2), name="wait-2")
    return {"completedWaits": 2}


@requirement("2-4")
async def wait_minutes(event: Any, ctx: DurableContext) -> Any:
    await ctx.wait(Duration.from_minutes(1))
    return None


@requirement("2-5")
async def wait_hours(event: Any, ctx: DurableContext) -> Any:
    await ctx.wait(Duration.from_hours(1))
    return None


# ===================================================================== child (3-x)

@requirement("3-1")
async def child_basic(event: Any, ctx: DurableContext) -> Any:
    return await ctx.run_in_child_context(lambda child: child.step(echo, event))


@requirement("3-2")
async def child_named(event: Any, ctx: DurableContext) -> Any:
    return await ctx.run_in_child_context(lambda child: child.step(echo, event["value"]),
                                          name=event["name"])


@requirement("3-3")
async def child_two_steps(event: Any, ctx: DurableContext) -> Any:
    async def child_with_two_steps(child: DurableContext) -> Any:
        first = await child.step(echo, event)
        return await child.step(echo, first)

    return await ctx.run_in_child_context(child_with_two_steps)


@requirement("3-4")
async def child_error(event: Any, ctx: DurableContext) -> Any:
    async def failing_child(child: DurableContext) -> Any:
        return await child.step(fail, "inner step failed", config=NO_RETRY)

    return await ctx.run_in_child_context(failing_child)


@requirement("3-5")
async def child_error_caught(event: Any, ctx: DurableContext) -> Any:
    async def failing_child(child: DurableContext) -> Any:
        return await child.step(fail, "inner step failed", config=NO_RETRY)

    try:
        await ctx.run_in_child_context(failing_child)
    except DurableOperationError:
        pass
    return await ctx.step(echo, event)


@requirement("3-6")
async def child_nested(event: Any, ctx: DurableContext) -> Any:
    async def inner_child(child: DurableContext) -> Any:
        return await child.step(echo, event)

    async def outer_child(child: DurableContext) -> Any:
        await child.step(echo, event)
        return await child.run_in_child_context(inner_child)

    return await ctx.run_in_child_context(outer_child)


@requirement("3-7")
async def child_step_retry(event: Any, ctx: DurableContext) -> Any:
    def unreliable(value: Any) -> Any:
        if runs(ctx, "unreliable") == 1:
            raise RuntimeError("first attempt fails")
        return value

    async def child_with_retry(child: DurableContext) -> Any:
        return await child.step(unreliable, event, config=fixed_retry(3))

    return await ctx.run_in_child_context(child_with_retry)


@requirement("3-8")
async def child_step_retry_exhausted(event: Any, ctx: DurableContext) -> Any:
    async def child_always_failing(child: DurableContext) -> Any:
        return await child.step(fail, "always fails", config=fixed_retry(2))

    return await ctx.run_in_child_context(child_always_failing)


@requirement("3-9")
async def child_replay_cached(event: Any, ctx: DurableContext) -> Any:
    result = await ctx.run_in_child_context(lambda child: child.step(echo, event))
    await ctx.wait(Duration.from_seconds(1))
    return result


@requirement("3-10")
async def child_step_and_wait(event: Any, ctx: DurableContext) -> Any:
    async def child_step_wait(child: DurableContext) -> Any:
        await child.step(echo, event)
        await child.wait(Duration.from_seconds(1))
        return event

    return await ctx.run_in_child_context(child_step_wait)


@requirement("3-11")
async def child_large_result(event: Any, ctx: DurableContext) -> Any:
    async def large_child(child: DurableContext) -> Any:
        log(ctx, f"building large result for {event}")
        small = await child.step(lambda: "x")
        return small * (300 * 1024)  # > 256 KiB once serialized

    big = await ctx.run_in_child_context(large_child)
    await ctx.wait(Duration.from_seconds(1))
    return len(big)


@requirement("3-12", setup=crash_step("crashing_step"))
async def child_interrupted(event: Any, ctx: DurableContext) -> Any:
    async def child_with_crash(child: DurableContext) -> Any:
        return await child.step(echo, event, name="crashing_step")

    return await ctx.run_in_child_context(child_with_crash)


@requirement("3-13")
async def child_only_wait(event: Any, ctx: DurableContext) -> Any:
    async def waiting_child(child: DurableContext) -> Any:
        await child.wait(Duration.from_seconds(1))
        return event

    await ctx.run_in_child_context(waiting_child)
    return await ctx.step(echo, event)


UPPERCASE_RAW = SerDes(lambda v: str(v).upper(), lambda text: text)


@requirement("3-14")
async def child_custom_serdes(event: Any, ctx: DurableContext) -> Any:
    async def uppercase_child(child: DurableContext) -> Any:
        return await child.step(echo, event)

    return await ctx.run_in_child_context(uppercase_child,
                                          config=ChildConfig(serdes=UPPERCASE_RAW))


@requirement("3-15")
async def child_raises(event: Any, ctx: DurableContext) -> Any:
    async def raising_child(child: DurableContext) -> Any:
        raise ValueError("child body failed without any operation")

    return await ctx.run_in_child_context(raising_child)


@requirement("3-16")
async def child_returns_null(event: Any, ctx: DurableContext) -> Any:
    async def null_child(child: DurableContext) -> Any:
        return None

    return await ctx.run_in_child_context(null_child)


@requirement("3-17")
async def child_logger_only(event: Any, ctx: DurableContext) -> Any:
    async def logging_child(child: DurableContext) -> Any:
        log(ctx, f"child context received {event}")
        return event

    result = await ctx.run_in_child_context(logging_child)
    await ctx.wait(Duration.from_seconds(1))
    return result


@requirement("3-18")
async def child_mixed(event: Any, ctx: DurableContext) -> Any:
    async def child_step_wait(child: DurableContext) -> Any:
        await child.step(echo, event)
        await child.wait(Duration.from_seconds(1))
        return event

    result = await ctx.run_in_child_context(child_step_wait)
    await ctx.step(echo, result)
    await ctx.wait(Duration.from_seconds(1))
    return result


# ===================================================================== callback (4-x)

async def _create_and_await(ctx: DurableContext, name: str,
                            config: CallbackConfig | None = None) -> Any:
    callback = await ctx.create_callback(name=name, config=config)
    return await callback.result()


@requirement("4-1")
async def callback_basic(event: Any, ctx: DurableContext) -> Any:
    return await _create_and_await(ctx, event)


@requirement("4-2")
async def callback_named(event: Any, ctx: DurableContext) -> Any:
    return await _create_and_await(ctx, "approval")


@requirement("4-3")
async def callback_timeout(event: Any, ctx: DurableContext) -> Any:
    return await _create_and_await(ctx, event, CallbackConfig(timeout=Duration.from_seconds(5)))


@requirement("4-4")
async def callback_heartbeat_timeout(event: Any, ctx: DurableContext) -> Any:
    return await _create_and_await(
        ctx, event, CallbackConfig(heartbeat_timeout=Duration.from_seconds(5)))


@requirement("4-5")
async def callback_heartbeat_then_success(event: Any, ctx: DurableContext) -> Any:
    return await _create_and_await(
        ctx, event, CallbackConfig(heartbeat_timeout=Duration.from_seconds(10)))


@requirement("4-6")
async def callback_failure(event: Any, ctx: DurableContext) -> Any:
    return await _create_and_await(ctx, event)


async def _callback_step_await(ctx: DurableContext, name: str,
                               config: CallbackConfig | None = None) -> Any:
    callback = await ctx.create_callback(name=name, config=config)
    await ctx.step(lambda: "step between create and await")
    return await callback.result()


@requirement("4-7")
async def callback_step_failure(event: Any, ctx: DurableContext) -> Any:
    return await _callback_step_await(ctx, event)


@requirement("4-8")
async def callback_step_timeout(event: Any, ctx: DurableContext) -> Any:
    return await _callback_step_await(ctx, event, CallbackConfig(timeout=Duration(5)))


async def _callback_wait_await(ctx: DurableContext, name: str, wait_s: int,
                               config: CallbackConfig | None = None) -> Any:
    callback = await ctx.create_callback(name=name, config=config)
    await ctx.wait(Duration.from_seconds(wait_s))
    return await callback.result()


@requirement("4-9")
async def callback_wait_success(event: Any, ctx: DurableContext) -> Any:
    return await _callback_wait_await(ctx, event, 5)


@requirement("4-10")
async def callback_wait_failure(event: Any, ctx: DurableContext) -> Any:
    return await _callback_wait_await(ctx, event, 5)


@requirement("4-11")
async def callback_wait_timeout(event: Any, ctx: DurableContext) -> Any:
    return await _callback_wait_await(ctx, event, 6, CallbackConfig(timeout=Duration(3)))


@requirement("4-12")
async def callback_then_wait(event: Any, ctx: DurableContext) -> Any:
    result = await _create_and_await(ctx, event)
    await ctx.wait(Duration.from_seconds(2))
    return result


@requirement("4-13")
async def callback_failure_caught(event: Any, ctx: DurableContext) -> Any:
    try:
        message = await _create_and_await(ctx, event)
    except DurableOperationError as exc:
        message = f"callback failed: {exc.message}"
    await ctx.wait(Duration.from_seconds(2))
    return message


@requirement("4-14")
async def callback_timeout_caught(event: Any, ctx: DurableContext) -> Any:
    try:
        message = await _create_and_await(ctx, event, CallbackConfig(timeout=Duration(3)))
    except DurableOperationError as exc:
        message = f"callback timed out: {exc.message}"
    await ctx.wait(Duration.from_seconds(2))
    return message


def _typed_payload(text: str) -> dict[str, Any]:
    raw = json.loads(text)
    stamp = datetime.fromisoformat(raw["timestamp"].replace("Z", "+00:00"))
    return {"id": raw["id"], "message": raw["message"], "timestamp": int(stamp.timestamp())}


@requirement("4-15")
async def callback_custom_serdes(event: Any, ctx: DurableContext) -> Any:
    serdes = SerDes(json.dumps, _typed_payload)
    received = await _create_and_await(ctx, event, CallbackConfig(serdes=serdes))
    return {"received": received}


@requirement("4-16")
async def callback_numeric_serdes(event: Any, ctx: DurableContext) -> Any:
    serdes = SerDes(json.dumps, lambda text: float(json.loads(text)))
    count = await _create_and_await(ctx, event, CallbackConfig(serdes=serdes))
    number = int(count) if float(count).is_integer() else count
    return {"count": number, "doubled": number * 2}


@requirement("4-17")
async def callback_two_sequential(event: Any, ctx: DurableContext) -> Any:
    first = await _create_and_await(ctx, event[0])
    second = await _create_and_await(ctx, event[1])
    return [first, second]


@requirement("4-18")
async def callback_two_in_order(event: Any, ctx: DurableContext) -> Any:
    a = await ctx.create_callback(name=event[0])
    b = await ctx.create_callback(name=event[1])
    result_a = await a.result()
    result_b = await b.result()
    return [result_a, result_b]


@requirement("4-19")
async def callback_two_reverse(event: Any, ctx: DurableContext) -> Any:
    a = await ctx.create_callback(name=event[0])
    b = await ctx.create_callback(name=event[1])
    result_b = await b.result()
    result_a = await a.result()
    return [result_a, result_b]


# ===================================================================== wait_for_condition (6-x)

def _counter_strategy(threshold: int, delay: int = 1,
                      max_attempts: int = 60) -> Callable[[Any, int], WaitForConditionDecision]:
    return create_wait_strategy(WaitStrategyConfig(
        should_continue_polling=lambda state: state < threshold, max_attempts=max_attempts,
        initial_delay=Duration(delay), max_delay=Duration(delay), backoff_rate=1,
        jitter_strategy=JitterStrategy.NONE))


def increment(state: int) -> int:
    return state + 1


@requirement("6-1")
async def wfc_basic(event: Any, ctx: DurableContext) -> Any:
    return await ctx.wait_for_condition(increment, WaitForConditionConfig(
        wait_strategy=_counter_strategy(event), initial_state=0))


@requirement("6-2")
async def wfc_immediate(event: Any, ctx: DurableContext) -> Any:
    def unchanged(state: int) -> int:
        return state

    def strategy(state: int, attempt: int) -> WaitForConditionDecision:
        if state >= 5:
            return WaitForConditionDecision.stop_polling()
        return WaitForConditionDecision.continue_waiting(Duration(1))

    return await ctx.wait_for_condition(unchanged, WaitForConditionConfig(
        wait_strategy=strategy, initial_state=5))


@requirement("6-3")
async def wfc_named(event: Any, ctx: DurableContext) -> Any:
    return await ctx.wait_for_condition(increment, WaitForConditionConfig(
        wait_strategy=_counter_strategy(event), initial_state=0), name="poll-status")


@requirement("6-4")
async def wfc_initial_state(event: Any, ctx: DurableContext) -> Any:
    return await ctx.wait_for_condition(increment, WaitForConditionConfig(
        wait_strategy=_counter_strategy(event), initial_state=5))


@requirement("6-5")
async def wfc_fixed_delay(event: Any, ctx: DurableContext) -> Any:
    return await ctx.wait_for_condition(increment, WaitForConditionConfig(
        wait_strategy=_counter_strategy(event, delay=2), initial_state=0))


@requirement("6-6")
async def wfc_max_attempts(event: Any, ctx: DurableContext) -> Any:
    never = create_wait_strategy(WaitStrategyConfig(
        should_continue_polling=lambda state: True, max_attempts=3, initial_delay=Duration(1),
        max_delay=Duration(1), backoff_rate=1, jitter_strategy=JitterStrategy.NONE))
    return await ctx.wait_for_condition(increment, WaitForConditionConfig(
        wait_strategy=never, initial_state=event))


def _raising_check(state: Any) -> Any:
    raise RuntimeError("check failed on its first call")


@requirement("6-7")
async def wfc_check_raises(event: Any, ctx: DurableContext) -> Any:
    return await ctx.wait_for_condition(_raising_check, WaitForConditionConfig(
        wait_strategy=_counter_strategy(1), initial_state=0))


@requirement("6-8")
async def wfc_check_raises_caught(event: Any, ctx: DurableContext) -> Any:
    try:
        return await ctx.wait_for_condition(_raising_check, WaitForConditionConfig(
            wait_strategy=_counter_strategy(1), initial_state=0))
    except DurableOperationError:
        return "recovered"


@requirement("6-9")
async def wfc_object_state(event: Any, ctx: DurableContext) -> Any:
    def check(state: dict[str, Any]) -> dict[str, Any]:
        attempts = state["attempts"] + 1
        return {"status": "DONE" if attempts >= 2 else "PENDING", "attempts": attempts}

    def strategy(state: dict[str, Any], attempt: int) -> WaitForConditionDecision:
        if state["status"] == "PENDING":
            return WaitForConditionDecision.continue_waiting(Duration(1))
        return WaitForConditionDecision.stop_polling()

    return await ctx.wait_for_condition(check, WaitForConditionConfig(
        wait_strategy=strategy, initial_state={"status": "PENDING", "attempts": 0}))


@requirement("6-10")
async def wfc_null(event: Any, ctx: DurableContext) -> Any:
    def check(state: Any) -> None:
        return None

    return await ctx.wait_for_condition(check, WaitForConditionConfig(
        wait_strategy=lambda state, attempt: WaitForConditionDecision.stop_polling(),
        initial_state=None))


STATE_SERDES = SerDes(lambda state: json.dumps({"encoded": state}),
                      lambda text: json.loads(text)["encoded"])


@requirement("6-11")
async def wfc_custom_serdes(event: Any, ctx: DurableContext) -> Any:
    def append_x(state: str) -> str:
        return state + "x"

    def strategy(state: str, attempt: int) -> WaitForConditionDecision:
        if len(state) < 2:
            return WaitForConditionDecision.continue_waiting(Duration(1))
        return WaitForConditionDecision.stop_polling()

    return await ctx.wait_for_condition(append_x, WaitForConditionConfig(
        wait_strategy=strategy, initial_state="", serdes=STATE_SERDES))


@requirement("6-12")
async def wfc_then_step(event: Any, ctx: DurableContext) -> Any:
    final = await ctx.wait_for_condition(increment, WaitForConditionConfig(
        wait_strategy=_counter_strategy(event), initial_state=0))
    return await ctx.step(lambda value: value * 10, final)


@requirement("6-13")
async def wfc_sequential(event: Any, ctx: DurableContext) -> Any:
    first = await ctx.wait_for_condition(increment, WaitForConditionConfig(
        wait_strategy=_counter_strategy(2), initial_state=0))
    return await ctx.wait_for_condition(increment, WaitForConditionConfig(
        wait_strategy=_counter_strategy(4), initial_state=first))


# ===================================================================== wait_for_callback (7-x)

def submit(callback_id: str) -> None:
    """The submitter: hands the id to the outside world (nothing durable)."""
    return None


@requirement("7-1")
async def wfcb_basic(event: Any, ctx: DurableContext) -> Any:
    return await ctx.wait_for_callback(submit, name=event)


@requirement("7-2")
async def wfcb_static_name(event: Any, ctx: DurableContext) -> Any:
    return await ctx.wait_for_callback(submit, name="approval")


@requirement("7-3")
async def wfcb_anonymous(event: Any, ctx: DurableContext) -> Any:
    return await ctx.wait_for_callback(lambda callback_id: None)


@requirement("7-4")
async def wfcb_failure(event: Any, ctx: DurableContext) -> Any:
    return await ctx.wait_for_callback(submit, name=event)


@requirement("7-5")
async def wfcb_timeout(event: Any, ctx: DurableContext) -> Any:
    return await ctx.wait_for_callback(submit, name=event,
                                       config=WaitForCallbackConfig(timeout=Duration(3)))


@requirement("7-6")
async def wfcb_failure_caught(event: Any, ctx: DurableContext) -> Any:
    try:
        return await ctx.wait_for_callback(submit, name=event)
    except DurableOperationError:
        return "recovered"


@requirement("7-7")
async def wfcb_submitter_fails(event: Any, ctx: DurableContext) -> Any:
    def failing_submitter(callback_id: str) -> None:
        raise RuntimeError("submitter failed")

    retry = fixed_retry(2).retry_strategy
    return await ctx.wait_for_callback(failing_submitter, name=event,
                                       config=WaitForCallbackConfig(retry_strategy=retry))


@requirement("7-8")
async def wfcb_in_child(event: Any, ctx: DurableContext) -> Any:
    async def wrapper(child: DurableContext) -> Any:
        return await child.wait_for_callback(submit, name=event)

    return await ctx.run_in_child_context(wrapper, name="wrapper")


@requirement("7-9")
async def wfcb_sequential(event: Any, ctx: DurableContext) -> Any:
    await ctx.wait_for_callback(submit, name="first")
    return await ctx.wait_for_callback(submit, name="second")


@requirement("7-10")
async def wfcb_mixed(event: Any, ctx: DurableContext) -> Any:
    await ctx.wait(Duration.from_seconds(1))
    await ctx.step(lambda: {"data": "fixed"})
    return await ctx.wait_for_callback(submit, name=event)


JSON_RESULT = SerDes(json.dumps, json.loads)


@requirement("7-11")
async def wfcb_json_result(event: Any, ctx: DurableContext) -> Any:
    result = await ctx.wait_for_callback(submit, name=event,
                                         config=WaitForCallbackConfig(serdes=JSON_RESULT))
    return result["status"]


@requirement("7-12")
async def wfcb_heartbeat_timeout(event: Any, ctx: DurableContext) -> Any:
    return await ctx.wait_for_callback(
        submit, name=event, config=WaitForCallbackConfig(heartbeat_timeout=Duration(5)))


@requirement("7-13")
async def wfcb_heartbeat_then_success(event: Any, ctx: DurableContext) -> Any:
    return await ctx.wait_for_callback(
        submit, name=event, config=WaitForCallbackConfig(heartbeat_timeout=Duration(10)))


@requirement("7-14")
async def wfcb_timeout_caught(event: Any, ctx: DurableContext) -> Any:
    try:
        return await ctx.wait_for_callback(submit, name=event,
                                           config=WaitForCallbackConfig(timeout=Duration(3)))
    except DurableOperationError:
        return "timed-out-handled"


@requirement("7-15")
async def wfcb_empty_payload(event: Any, ctx: DurableContext) -> Any:
    return await ctx.wait_for_callback(submit, name=event)


# ===================================================================== parallel (8-x)

Branch = Callable[[DurableContext], Awaitable[Any]]


def constant(value: Any) -> Branch:
    """A branch that returns `value` directly (no operation inside)."""
    async def branch(ctx: DurableContext) -> Any:
        return value
    return branch


def step_returning(value: Any) -> Branch:
    """A branch that runs one step returning `value`."""
    async def branch(ctx: DurableContext) -> Any:
        return await ctx.step(lambda: value)
    return branch


def raising(message: str = "branch failed") -> Branch:
    async def branch(ctx: DurableContext) -> Any:
        raise RuntimeError(message)
    return branch


def sequential(completion: CompletionConfig | None = None, **kw: Any) -> ParallelConfig:
    if completion is not None:
        kw["completion_config"] = completion
    return ParallelConfig(max_concurrency=1, **kw)


def projection(batch: BatchResult, *keys: str) -> dict[str, Any]:
    """The `{completionReason, status, successCount, ...}` objects the handlers return."""
    every = {"completionReason": batch.completion_reason, "status": batch.status,
             "successCount": batch.success_count, "failureCount": batch.failure_count,
             "totalCount": batch.total_count}
    return {k: every[k] for k in keys}


FULL = ("completionReason", "status", "successCount", "failureCount", "totalCount")
NO_STATUS = ("completionReason", "successCount", "failureCount", "totalCount")


@requirement("8-1")
async def parallel_basic(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.parallel([step_returning("task-1"), step_returning("task-2")],
                               name="parallel", config=sequential())
    return batch.get_results()


@requirement("8-2")
async def parallel_branches_only(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.parallel([constant("alpha"), constant("beta")], config=sequential())
    return batch.get_results()


@requirement("8-3")
async def parallel_named_branches(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.parallel([("first", constant("one")), ("second", constant("two"))],
                               name="named", config=sequential())
    return batch.get_results()


@requirement("8-4")
async def parallel_mixed_types(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.parallel([constant("hello"), constant(42), constant({"k": "v"})],
                               name="hetero", config=sequential())
    return batch.get_results()


@requirement("8-5")
async def parallel_empty(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.parallel([], name="empty")
    return batch.get_results()


@requirement("8-6")
async def parallel_fail_fast(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.parallel(
        [constant("ok"), raising(), constant("never")], name="failfast",
        config=sequential(CompletionConfig(tolerated_failure_count=0)))
    return projection(batch, *FULL)


@requirement("8-7")
async def parallel_throw_if_error(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.parallel([raising(), constant("never")], name="throwing",
                               config=sequential(CompletionConfig(tolerated_failure_count=0)))
    batch.throw_if_error()
    return batch.get_results()


@requirement("8-8")
async def parallel_min_successful(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.parallel([constant(f"b{i}") for i in range(4)], name="min-successful",
                               config=sequential(CompletionConfig(min_successful=2)))
    return projection(batch, "completionReason", "successCount", "totalCount")


@requirement("8-9")
async def parallel_tolerated_count(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.parallel([constant("b0"), raising(), constant("b2")], name="tolerated",
                               config=sequential(CompletionConfig(tolerated_failure_count=1)))
    return projection(batch, *FULL)


@requirement("8-10")
async def parallel_tolerated_count_exceeded(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.parallel([raising(), raising(), constant("never")],
                               name="tolerated-exceeded",
                               config=sequential(CompletionConfig(tolerated_failure_count=1)))
    return projection(batch, *NO_STATUS)


@requirement("8-11")
async def parallel_concurrent(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.parallel([constant("r0"), constant("r1"), constant("r2")],
                               name="concurrent", config=ParallelConfig(max_concurrency=2))
    return batch.get_results()


@requirement("8-12")
async def parallel_flat(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.parallel([step_returning("fa"), step_returning("fb")], name="flat",
                               config=sequential(nesting_type=NestingType.FLAT))
    return batch.get_results()


@requirement("8-13")
async def parallel_tolerated_percentage(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.parallel(
        [raising(), raising(), constant("b2"), constant("b3")], name="tolerated-pct",
        config=sequential(CompletionConfig(tolerated_failure_percentage=25)))
    return projection(batch, *NO_STATUS)


@requirement("8-14")
async def parallel_branch_waits(event: Any, ctx: DurableContext) -> Any:
    async def waits_then_returns(branch: DurableContext) -> Any:
        await branch.wait(Duration.from_seconds(2))
        return "b1"

    batch = await ctx.parallel([step_returning("b0"), waits_then_returns], name="replay",
                               config=sequential())
    return batch.get_results()


WRAPPED = SerDes(lambda v: json.dumps({"wrapped": v}), lambda text: json.loads(text)["wrapped"])


@requirement("8-15")
async def parallel_item_serdes(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.parallel([constant("x"), constant("y")], name="serde",
                               config=sequential(item_serdes=WRAPPED))
    return batch.get_results()


@requirement("8-16")
async def parallel_all_fail_tolerated(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.parallel([raising(), raising(), raising()], name="all-fail",
                               config=sequential(CompletionConfig(tolerated_failure_count=3)))
    return projection(batch, *FULL)


@requirement("8-17")
async def parallel_min_not_reached(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.parallel([constant("b0"), raising(), constant("b2")],
                               name="min-not-reached",
                               config=sequential(CompletionConfig(min_successful=3)))
    return projection(batch, *FULL)


@requirement("8-18")
async def parallel_combined_criteria(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.parallel(
        [raising(), raising(), constant("b2"), constant("b3")], name="combined",
        config=sequential(CompletionConfig(min_successful=3, tolerated_failure_count=1)))
    return projection(batch, *NO_STATUS)


@requirement("8-19")
async def parallel_bad_concurrency(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.parallel([constant("b0"), constant("b1")], name="bad-concurrency",
                               config=ParallelConfig(max_concurrency=0))
    return batch.get_results()


@requirement("8-20")
async def parallel_accessors(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.parallel([constant("b0"), raising(), constant("b2")], name="accessors",
                               config=sequential(CompletionConfig(tolerated_failure_count=1)))
    return {"hasFailure": batch.has_failure, "successCount": len(batch.succeeded()),
            "failureCount": len(batch.failed()), "errorCount": len(batch.get_errors())}


@requirement("8-21")
async def parallel_nested(event: Any, ctx: DurableContext) -> Any:
    async def branch_a(branch: DurableContext) -> Any:
        inner = await branch.parallel([step_returning("i1"), step_returning("i2")],
                                      name="inner", config=sequential())
        return inner.get_results()

    batch = await ctx.parallel([branch_a], name="outer", config=sequential())
    return batch.get_results()


@requirement("8-22")
async def parallel_percentage_boundary(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.parallel(
        [raising(), constant("b1"), constant("b2"), constant("b3")], name="pct-boundary",
        config=sequential(CompletionConfig(tolerated_failure_percentage=25)))
    return projection(batch, *FULL)


# ===================================================================== map (9-x)

def map_sequential(completion: CompletionConfig | None = None, **kw: Any) -> MapConfig:
    if completion is not None:
        kw["completion_config"] = completion
    return MapConfig(max_concurrency=1, **kw)


async def upper_item(ctx: DurableContext, item: str, index: int, items: Any) -> str:
    return item.upper()


def fail_on(*bad: Any) -> Callable[[DurableContext, Any, int, Any], Awaitable[Any]]:
    """An iteration function that raises for the listed items and returns the others."""
    async def iteration(ctx: DurableContext, item: Any, index: int, items: Any) -> Any:
        if item in bad:
            raise RuntimeError(f"item {item!r} failed")
        return item
    return iteration


@requirement("9-1")
async def map_basic(event: Any, ctx: DurableContext) -> Any:
    async def greet_item(c: DurableContext, item: Any, index: int, items: Any) -> Any:
        return await c.step(greet, item)

    batch = await ctx.map(event, greet_item, name="map", config=map_sequential())
    return batch.get_results()


@requirement("9-2")
async def map_items_only(event: Any, ctx: DurableContext) -> Any:
    async def double(c: DurableContext, item: int, index: int, items: Any) -> int:
        return item * 2

    batch = await ctx.map(event, double, config=map_sequential())
    return batch.get_results()


@requirement("9-3")
async def map_item_and_index(event: Any, ctx: DurableContext) -> Any:
    async def plus_index(c: DurableContext, item: int, index: int, items: Any) -> int:
        return item + index

    batch = await ctx.map(event, plus_index, config=map_sequential())
    return batch.get_results()


@requirement("9-4")
async def map_empty(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.map(event, fail_on(), name="empty")
    return batch.get_results()


@requirement("9-5")
async def map_fail_fast(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.map(["ok", "bad", "never"], fail_on("bad"), name="failfast",
                          config=map_sequential(CompletionConfig(tolerated_failure_count=0)))
    return projection(batch, *FULL)


@requirement("9-6")
async def map_throw_if_error(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.map(["bad", "never"], fail_on("bad"), name="throwing",
                          config=map_sequential(CompletionConfig(tolerated_failure_count=0)))
    batch.throw_if_error()
    return batch.get_results()


@requirement("9-7")
async def map_min_successful(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.map(["a", "b", "c", "d"], fail_on(), name="min-successful",
                          config=map_sequential(CompletionConfig(min_successful=2)))
    return projection(batch, "completionReason", "successCount", "totalCount")


@requirement("9-8")
async def map_tolerated_count(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.map(["a", "bad", "c"], fail_on("bad"), name="tolerated",
                          config=map_sequential(CompletionConfig(tolerated_failure_count=1)))
    return projection(batch, *FULL)


@requirement("9-9")
async def map_tolerated_count_exceeded(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.map(["bad1", "bad2", "c"], fail_on("bad1", "bad2"),
                          name="tolerated-exceeded",
                          config=map_sequential(CompletionConfig(tolerated_failure_count=1)))
    return projection(batch, *NO_STATUS)


@requirement("9-10")
async def map_tolerated_percentage(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.map(
        ["bad1", "bad2", "c", "d"], fail_on("bad1", "bad2"), name="tolerated-pct",
        config=map_sequential(CompletionConfig(tolerated_failure_percentage=25)))
    return projection(batch, *NO_STATUS)


@requirement("9-11")
async def map_concurrent(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.map(["r0", "r1", "r2"], fail_on(), name="concurrent",
                          config=MapConfig(max_concurrency=2))
    return batch.get_results()


@requirement("9-12")
async def map_flat(event: Any, ctx: DurableContext) -> Any:
    async def step_item(c: DurableContext, item: str, index: int, items: Any) -> Any:
        return await c.step(echo, item)

    batch = await ctx.map(["fa", "fb"], step_item, name="flat",
                          config=map_sequential(nesting_type=NestingType.FLAT))
    return batch.get_results()


@requirement("9-13")
async def map_item_namer(event: Any, ctx: DurableContext) -> Any:
    async def times_ten(c: DurableContext, item: int, index: int, items: Any) -> int:
        return item * 10

    batch = await ctx.map(event, times_ten, name="named-items", config=map_sequential(
        item_namer=lambda item, index: f"item-{item}"))
    return batch.get_results()


PREFIXED = SerDes(lambda v: f"wrapped:{v}", lambda text: text.removeprefix("wrapped:"))


@requirement("9-14")
async def map_item_serdes(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.map(["x", "y"], upper_item, name="item-serde",
                          config=map_sequential(item_serdes=PREFIXED))
    return batch.get_results()


@requirement("9-15")
async def map_wait_in_iteration(event: Any, ctx: DurableContext) -> Any:
    async def iteration(c: DurableContext, item: str, index: int, items: Any) -> Any:
        if index == 1:
            await c.wait(Duration.from_seconds(1))
        return await c.step(echo, item)

    batch = await ctx.map(["r0", "r1"], iteration, name="suspend", config=map_sequential())
    return batch.get_results()


@requirement("9-16")
async def map_large_results(event: Any, ctx: DurableContext) -> Any:
    async def large(c: DurableContext, item: int, index: int, items: Any) -> str:
        return str(item) * (70 * 1024)

    batch = await ctx.map([0, 1, 2, 3], large, name="large", config=map_sequential())
    return projection(batch, "successCount", "totalCount")


@requirement("9-17")
async def map_then_wait(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.map(["a", "b"], upper_item, name="then-wait", config=map_sequential())
    await ctx.wait(Duration.from_seconds(1))
    return batch.get_results()


@requirement("9-18")
async def map_failure_then_wait(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.map(["ok", "bad"], fail_on("bad"), name="failed-then-wait",
                          config=map_sequential(CompletionConfig(tolerated_failure_count=1)))
    await ctx.wait(Duration.from_seconds(1))
    return projection(batch, *FULL)


def _opserde_serialize(value: Any) -> str:
    """The whole map result -> "OPSERDE:X,Y"; anything else (an item) as JSON.

    The engine hands the batch to the serdes as `BatchResult.to_dict()`, and items
    fall back to this serdes when there is no `item_serdes` (as in the AWS SDK).
    """
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    if isinstance(value, dict) and "all" in value:
        return "OPSERDE:" + ",".join(str(i["result"]) for i in value["all"]
                                     if i["status"] == "SUCCEEDED")
    return json.dumps(value)


def _opserde_deserialize(text: str) -> Any:
    """The inverse: the `BatchResult.to_dict()` form back (or an item)."""
    if text.startswith("OPSERDE:"):
        results = text.removeprefix("OPSERDE:").split(",") if text != "OPSERDE:" else []
        return {"all": [{"index": i, "status": "SUCCEEDED", "result": r, "error": None}
                        for i, r in enumerate(results)], "completionReason": "ALL_COMPLETED"}
    return json.loads(text)


OPSERDE = SerDes(_opserde_serialize, _opserde_deserialize)


@requirement("9-19")
async def map_operation_serdes(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.map(["x", "y"], upper_item, name="op-serde",
                          config=map_sequential(serdes=OPSERDE))
    return batch.get_results()


@requirement("9-20")
async def map_operation_serdes_replay(event: Any, ctx: DurableContext) -> Any:
    batch = await ctx.map(["x", "y"], upper_item, name="op-serde-replay",
                          config=map_sequential(serdes=OPSERDE))
    await ctx.wait(Duration.from_seconds(1))
    return batch.get_results()


# ===================================================================== invoke (5-x)

@durable_execution(name="ct_echo_target")
async def echo_target(event: Any, ctx: DurableContext) -> Any:
    """The target function: returns what it receives."""
    return event


@durable_execution(name="ct_failing_target")
async def failing_target(event: Any, ctx: DurableContext) -> Any:
    raise RuntimeError("target function failed")


@durable_execution(name="ct_second_target")
async def second_target(event: Any, ctx: DurableContext) -> Any:
    return {"second": event}


ECHO = (echo_target,)
FAILING = (failing_target,)


@requirement("5-1", others=ECHO)
async def invoke_basic(event: Any, ctx: DurableContext) -> Any:
    return await ctx.invoke(echo_target.name, event)


@requirement("5-2", others=ECHO)
async def invoke_named(event: Any, ctx: DurableContext) -> Any:
    return await ctx.invoke(echo_target.name, event["payload"], name=event["name"])


@requirement("5-3", others=ECHO)
async def invoke_complex(event: Any, ctx: DurableContext) -> Any:
    return await ctx.invoke(echo_target.name, event)


@requirement("5-4", others=ECHO)
async def invoke_null(event: Any, ctx: DurableContext) -> Any:
    return await ctx.invoke(echo_target.name, None)


@requirement("5-5", others=FAILING)
async def invoke_fails(event: Any, ctx: DurableContext) -> Any:
    return await ctx.invoke(failing_target.name)


@requirement("5-6", others=FAILING)
async def invoke_fails_caught(event: Any, ctx: DurableContext) -> Any:
    try:
        return await ctx.invoke(failing_target.name)
    except DurableOperationError:
        return "fallback"


@requirement("5-7", others=ECHO)
async def invoke_large_payload(event: Any, ctx: DurableContext) -> Any:
    large = "x" * (1024 * 1024 - 1024)  # just under 1 MiB, TST's chained payload cap
    result = await ctx.invoke(echo_target.name, large)
    return len(result)


@requirement("5-8", others=ECHO)
async def invoke_tenant(event: Any, ctx: DurableContext) -> Any:
    return await ctx.invoke(echo_target.name, event["payload"], tenant_id=event["tenantId"])


@requirement("5-9", others=ECHO)
async def invoke_then_wait(event: Any, ctx: DurableContext) -> Any:
    result = await ctx.invoke(echo_target.name, "cached")
    await ctx.wait(Duration.from_seconds(1))
    return result


@requirement("5-10", others=FAILING)
async def invoke_failure_then_wait(event: Any, ctx: DurableContext) -> Any:
    try:
        outcome = await ctx.invoke(failing_target.name)
    except DurableOperationError as exc:
        outcome = f"caught: {exc.message}"
    await ctx.wait(Duration.from_seconds(1))
    return outcome


@requirement("5-11", others=ECHO)
async def invoke_after_step(event: Any, ctx: DurableContext) -> Any:
    value = await ctx.step(lambda: "from step")
    return await ctx.invoke(echo_target.name, value)


@requirement("5-12", others=ECHO)
async def invoke_then_step(event: Any, ctx: DurableContext) -> Any:
    result = await ctx.invoke(echo_target.name, "from invoke")
    return await ctx.step(lambda value: f"processed {value}", result)


@requirement("5-13", others=ECHO)
async def invoke_in_child(event: Any, ctx: DurableContext) -> Any:
    return await ctx.run_in_child_context(
        lambda child: child.invoke(echo_target.name, "in child"))


@requirement("5-14", others=(echo_target, second_target))
async def invoke_sequential(event: Any, ctx: DurableContext) -> Any:
    first = await ctx.invoke(echo_target.name, "one")
    second = await ctx.invoke(second_target.name, "two")
    return [first, second]


def _invoke_config(**options: Any) -> Any:
    """The AWS SDK's `InvokeConfig(serdes_payload=, serdes_result=)`, if the engine has it."""
    from alarmtop.core import durable

    invoke_config = getattr(durable, "InvokeConfig", None)
    if invoke_config is None:
        raise NotImplementedError("alarmtop.core.durable has no InvokeConfig(serdes_payload=, "
                                  "serdes_result=) for ctx.invoke()")
    return invoke_config(**options)


UPPERCASE_PAYLOAD = SerDes(lambda v: json.dumps(_upper(v)), json.loads)
UPPERCASE_RAW_RESULT = SerDes(lambda v: json.dumps(v), lambda text: text.upper())


@requirement("5-15", others=ECHO)
async def invoke_payload_serdes(event: Any, ctx: DurableContext) -> Any:
    return await ctx.invoke(
        echo_target.name, event, config=_invoke_config(serdes_payload=UPPERCASE_PAYLOAD))


@requirement("5-16", others=ECHO)
async def invoke_result_serdes(event: Any, ctx: DurableContext) -> Any:
    return await ctx.invoke(
        echo_target.name, event, config=_invoke_config(serdes_result=UPPERCASE_RAW_RESULT))


# The plugin suite's handlers (10-x) register themselves alongside.
from tests.conformance import plugin_handlers  # noqa: E402, F401
