"""parallel and map: nesting, completion policies, suspension mid-batch."""

from __future__ import annotations

from typing import Any

import pytest

from alarmtop.core import VirtualClock
from alarmtop.core.durable import (
    CompletionConfig,
    DurableContext,
    Duration,
    MapConfig,
    NestingType,
    ParallelConfig,
    RetryPresets,
    StepConfig,
    durable_execution,
)
from alarmtop.core.kernel.executions.batch import (
    ALL_COMPLETED,
    FAILURE_TOLERANCE_EXCEEDED,
    MIN_SUCCESSFUL_REACHED,
    completion,
)
from tests.conftest import RuntimeFactory

NO_RETRY = StepConfig(retry_strategy=RetryPresets.none())


def boom() -> None:
    raise ValueError("boom")


@pytest.mark.parametrize(("cfg", "counts", "expected"), [
    (CompletionConfig(), (4, 0, 1, 2, 1), FAILURE_TOLERANCE_EXCEEDED),  # fail fast
    (CompletionConfig(tolerated_failure_count=1), (4, 2, 1, 1, 0), None),
    (CompletionConfig(tolerated_failure_count=1), (4, 2, 2, 0, 0), FAILURE_TOLERANCE_EXCEEDED),
    (CompletionConfig(tolerated_failure_percentage=25), (4, 3, 1, 0, 0), ALL_COMPLETED),
    (CompletionConfig(tolerated_failure_percentage=25), (4, 2, 2, 0, 0),
     FAILURE_TOLERANCE_EXCEEDED),
    (CompletionConfig(min_successful=2), (4, 2, 0, 1, 1), MIN_SUCCESSFUL_REACHED),
    (CompletionConfig(min_successful=3, tolerated_failure_count=1), (4, 1, 2, 1, 0),
     FAILURE_TOLERANCE_EXCEEDED),
    (CompletionConfig.all_completed(), (3, 0, 3, 0, 0), ALL_COMPLETED),
])
def test_completion_policy(cfg: CompletionConfig, counts: tuple[int, int, int, int, int],
                           expected: str | None) -> None:
    """The AWS rules: strict comparisons, tolerance first, then all completed, then min."""
    assert completion(cfg, *counts) == expected


@durable_execution(name="fan-out")
async def fan_out(event: dict[str, Any], ctx: DurableContext) -> dict[str, Any]:
    async def branch(tag: str) -> Any:
        async def run(c: DurableContext) -> Any:
            if tag == "fail":
                return await c.step(boom, name="fails", config=NO_RETRY)
            if tag == "wait":
                await c.wait(Duration(3))
            return await c.step(lambda: tag.upper(), name=f"step-{tag}")
        return run

    branches = [await branch(t) for t in event["tags"]]
    cfg = ParallelConfig(max_concurrency=event.get("max"),
                         completion_config=CompletionConfig(**event.get("completion", {})),
                         nesting_type=NestingType(event.get("nesting", "NESTED")))
    batch = await ctx.parallel(branches, name="fan", config=cfg)
    return {"results": batch.get_results(), "reason": batch.completion_reason,
            "status": batch.status, "total": batch.total_count}


@durable_execution(name="squares")
async def squares(event: list[int], ctx: DurableContext) -> list[Any]:
    async def square(c: DurableContext, item: int, index: int, items: Any) -> int:
        return int(await c.step(lambda: item * item, name="square"))
    batch = await ctx.map(event, square, name="squares", config=MapConfig(max_concurrency=2))
    return batch.get_results()


async def run(make_runtime: RuntimeFactory, clock: VirtualClock, name: str, event: Any,
              seconds: float = 0) -> dict[str, Any]:
    rt = await make_runtime()
    rt.register_execution(fan_out)
    rt.register_execution(squares)
    await rt.executions.start(name, event, execution_id="b")
    await clock.advance(seconds)
    return await rt.executions.describe("b")


async def test_parallel_nesting_and_results(make_runtime: RuntimeFactory,
                                            clock: VirtualClock) -> None:
    d = await run(make_runtime, clock, "fan-out", {"tags": ["a", "b"], "max": 1})
    assert d["result"] == {"results": ["A", "B"], "reason": ALL_COMPLETED,
                           "status": "SUCCEEDED", "total": 2}
    h = d["history"]
    parent = next(e for e in h if e.get("SubType") == "Parallel")
    branches = [e for e in h if e.get("SubType") == "ParallelBranch"
                and e["EventType"] == "ContextStarted"]
    assert [b["ParentId"] for b in branches] == [parent["Id"]] * 2
    steps = [e for e in h if e["EventType"] == "StepSucceeded"]
    assert [s["ParentId"] for s in steps] == [b["Id"] for b in branches]
    assert [e["EventType"] for e in h][-3:] == ["ContextSucceeded", "InvocationCompleted",
                                                "ExecutionSucceeded"]


async def test_parallel_fail_fast_leaves_later_branches_unstarted(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    d = await run(make_runtime, clock, "fan-out", {"tags": ["fail", "b"], "max": 1})
    assert d["status"] == "succeeded"  # a branch failure never fails the parent
    assert d["result"] == {"results": [], "reason": FAILURE_TOLERANCE_EXCEEDED,
                           "status": "FAILED", "total": 1}
    assert not any(e.get("Name") == "step-b" for e in d["history"])


async def test_parallel_flat_parents_steps_to_the_batch(make_runtime: RuntimeFactory,
                                                        clock: VirtualClock) -> None:
    d = await run(make_runtime, clock, "fan-out", {"tags": ["a", "b"], "nesting": "FLAT"})
    h = d["history"]
    parent = next(e for e in h if e.get("SubType") == "Parallel")
    assert not any(e.get("SubType") == "ParallelBranch" for e in h)
    assert {e["ParentId"] for e in h if e["EventType"] == "StepSucceeded"} == {parent["Id"]}
    assert d["result"]["results"] == ["A", "B"]


async def test_parallel_suspends_and_replays_finished_branches(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    """A waiting branch suspends the whole execution; the finished branch is replayed,
    not re-run, when it resumes."""
    rt = await make_runtime()
    rt.register_execution(fan_out)
    await rt.executions.start("fan-out", {"tags": ["a", "wait"], "max": 1}, execution_id="s")
    await clock.advance(0)
    assert (await rt.executions.describe("s"))["status"] == "suspended"
    await clock.advance(3)
    d = await rt.executions.describe("s")
    assert d["result"]["results"] == ["A", "WAIT"]
    started = [e.get("Name") for e in d["history"] if e["EventType"] == "StepStarted"]
    assert started == ["step-a", "step-wait"]
    assert [e["EventType"] for e in d["history"]].count("InvocationCompleted") == 2


async def test_map_runs_every_item(make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    d = await run(make_runtime, clock, "squares", [1, 2, 3, 4])
    assert d["result"] == [1, 4, 9, 16]
    names = [e["Name"] for e in d["history"]
             if e.get("SubType") == "MapIteration" and e["EventType"] == "ContextStarted"]
    assert names == ["map-item-0", "map-item-1", "map-item-2", "map-item-3"]


# -- the batch owns its branches --------------------------------------------------------

SIBLING: dict[str, Any] = {}


@durable_execution(name="crash-beside-a-slow-branch")
async def crash_beside_a_slow_branch(event: dict[str, Any], ctx: DurableContext) -> Any:
    async def slow() -> str:
        SIBLING["state"] = "running"
        try:
            await SIBLING["gate"].wait()  # never set: only a cancel ends it
        finally:
            SIBLING["state"] = "ended"
        return "slow"

    async def crashing(c: DurableContext) -> Any:
        return await c.step(lambda: "x", name="crashes")

    async def waiting(c: DurableContext) -> Any:
        return await c.step(slow, name="slow")

    return (await ctx.parallel([waiting, crashing])).to_dict()


async def test_a_crashing_branch_leaves_no_sibling_running(make_runtime: RuntimeFactory,
                                                           clock: VirtualClock) -> None:
    """Observation 11: a branch that dies (here an injected crash, as if the process
    died there) used to end the batch with its sibling still running, owned by nobody.
    The batch now cancels and awaits the siblings before the invocation ends."""
    import asyncio
    SIBLING.clear()
    SIBLING["gate"] = asyncio.Event()
    rt = await make_runtime()
    rt.register_execution(crash_beside_a_slow_branch)
    rt.faults.inject("e-crash", "step_crash", step="crashes", point="A", times=None)
    await rt.executions.start("crash-beside-a-slow-branch", {}, execution_id="e-crash")
    await clock.advance(0)
    assert SIBLING["state"] == "ended", "the sibling branch was left running"
