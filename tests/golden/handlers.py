"""The handlers whose recorded histories are kept under tests/golden/.

Change one of these and its golden no longer replays: that is the point. A
deliberate change gets a new version and a new golden (`python -m
tests.golden.record`), never an edited old one.
"""

from __future__ import annotations

from typing import Any

from alarmtop.core.durable import (
    CallbackConfig,
    DurableContext,
    DurableFunction,
    Duration,
    MapConfig,
    RetryStrategyConfig,
    StepConfig,
    StepError,
    WaitForConditionConfig,
    WaitForConditionDecision,
    create_retry_strategy,
    durable_execution,
)
from alarmtop.core.model.execution_config import JitterStrategy

FLAKY = StepConfig(retry_strategy=create_retry_strategy(RetryStrategyConfig(
    max_attempts=3, initial_delay=Duration(2), jitter_strategy=JitterStrategy.NONE)))
ONCE = StepConfig(retry_strategy=create_retry_strategy(RetryStrategyConfig(max_attempts=1)))
tries: dict[str, int] = {}


def flaky_once(key: str) -> str:
    tries[key] = tries.get(key, 0) + 1
    if tries[key] == 1:
        raise ConnectionError("warehouse busy")
    return "picked"


@durable_execution(name="golden-order")
async def order(event: dict[str, Any], ctx: DurableContext) -> dict[str, Any]:
    reserved = await ctx.step(lambda: f"r-{event['sku']}", name="reserve")
    picked = await ctx.step(flaky_once, ctx.execution_id, name="pick", config=FLAKY)
    await ctx.wait(Duration(5), name="cool_down")
    shipped = await ctx.step(lambda: {"tracking": "T-1"}, name="ship")
    return {"reserved": reserved, "picked": picked, "shipped": shipped}


@durable_execution(name="golden-fanout")
async def fanout(event: dict[str, Any], ctx: DurableContext) -> dict[str, Any]:
    async def prepare(child: DurableContext) -> int:
        a = await child.step(lambda: 2, name="two")
        b = await child.step(lambda: 3, name="three")
        return int(a) * int(b)

    six = await ctx.run_in_child_context(prepare, name="prepare")

    def branch(n: int) -> Any:
        async def run(child: DurableContext) -> int:
            return int(await child.step(lambda: n * n, name=f"square-{n}"))
        return run

    squares = await ctx.parallel([branch(n) for n in (1, 2, 3)], name="squares")

    async def double(child: DurableContext, item: int, index: int, items: Any) -> int:
        return int(await child.step(lambda: item * 2, name="double"))

    doubled = await ctx.map([5, 6], double, name="doubles", config=MapConfig(max_concurrency=1))
    cb = await ctx.create_callback("approval", CallbackConfig(timeout=Duration(60)))
    approval = await cb.result()

    def poll(state: int) -> int:
        return state + 1

    polled = await ctx.wait_for_condition(poll, WaitForConditionConfig(
        wait_strategy=lambda s, attempt: (WaitForConditionDecision.stop_polling() if s >= 2
                                          else WaitForConditionDecision.continue_waiting(
                                              Duration(3))),
        initial_state=0), name="until-two")
    return {"six": six, "squares": squares.get_results(), "doubled": doubled.get_results(),
            "approval": approval, "polled": polled}


@durable_execution(name="golden-saga")
async def saga(event: dict[str, Any], ctx: DurableContext) -> dict[str, Any]:
    stamp = ctx.now_ms()
    lucky = ctx.random().randint(1, 1000)
    stack = ctx.saga()
    await ctx.step(lambda: "held", name="hold_seat")
    stack.push("hold_seat", lambda: "released")
    await ctx.step(lambda: "charged", name="charge")
    stack.push("charge", lambda: "refunded")

    def confirm() -> None:
        raise RuntimeError("venue cancelled")

    try:
        await ctx.step(confirm, name="confirm", config=ONCE)
    except StepError as exc:
        undone = await stack.compensate()
        return {"status": "rolled back", "why": exc.message, "stamp": stamp,
                "lucky": lucky, "saga": undone}
    return {"status": "confirmed"}


GOLDEN: dict[str, tuple[DurableFunction, Any]] = {
    "order": (order, {"sku": "tea-42"}),
    "fanout": (fanout, {"n": 3}),
    "saga": (saga, None),
}
