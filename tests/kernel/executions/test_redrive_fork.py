"""Redrive, fork and the replay check, on real SQLite with a virtual clock."""

from __future__ import annotations

from typing import Any

import pytest

from alarmtop.core import VirtualClock
from alarmtop.core.durable import (
    DurableContext,
    Duration,
    RetryPresets,
    StepConfig,
    ValidationError,
    durable_execution,
)
from alarmtop.core.model.execution_errors import InvalidExecutionState, ReplayDivergence
from tests.conftest import RuntimeFactory

bodies: list[str] = []
broken = {"charge": True}


def body(label: str) -> Any:
    def run() -> str:
        bodies.append(label)
        if label == "charge" and broken["charge"]:
            raise ConnectionError("card processor down")
        return label
    run.__name__ = label
    return run


ONCE = StepConfig(retry_strategy=RetryPresets.none())


@durable_execution(name="trip")
async def trip(event: Any, ctx: DurableContext) -> list[str]:
    a = await ctx.step(body("book_flight"))
    b = await ctx.step(body("book_hotel"))
    c = await ctx.step(body("charge"), config=ONCE)
    d = await ctx.step(body("send_ticket"))
    return [a, b, c, d]


@durable_execution(name="trip", version="2")
async def trip_v2(event: Any, ctx: DurableContext) -> list[str]:
    a = await ctx.step(body("book_flight"))
    b = await ctx.step(body("reserve_room"))  # renamed: the log says book_hotel
    return [a, b]


@durable_execution(name="trip", version="3")
async def trip_v3(event: Any, ctx: DurableContext) -> list[str]:
    a = await ctx.step(body("book_flight"))
    b = await ctx.step(body("book_hotel"))
    c = await ctx.step(body("charge"), config=ONCE)
    return [a, b, c, "no ticket in v3"]


async def failed_trip(make_runtime: RuntimeFactory, clock: VirtualClock,
                      execution_id: str) -> Any:
    bodies.clear()
    broken["charge"] = True
    rt = await make_runtime()
    for fn in (trip, trip_v2, trip_v3):
        rt.register_execution(fn)
    await rt.executions.start("trip", None, execution_id=execution_id, version="1")
    await clock.advance(1)
    assert (await rt.executions.describe(execution_id))["status"] == "failed"
    return rt


async def test_redrive_after_the_cause_was_removed(make_runtime: RuntimeFactory,
                                                   clock: VirtualClock) -> None:
    """The charge failed for good; once the processor is back, a redrive carries on
    from it: the bookings are not made again."""
    rt = await failed_trip(make_runtime, clock, "t1")
    broken["charge"] = False
    out = await rt.executions.redrive("t1", reason="processor back", actor="ops")
    assert (out["from_operation"], out["reset"], out["redrives"]) == ("3", ["3"], 1)
    assert out["replay_check"]["clean"]
    await clock.advance(1)
    d = await rt.executions.describe("t1")
    assert (d["status"], d["result"], d["redrives"]) == (
        "succeeded", ["book_flight", "book_hotel", "charge", "send_ticket"], 1)
    assert bodies == ["book_flight", "book_hotel", "charge", "charge", "send_ticket"]
    history = d["history"]
    redriven = [e for e in history if e["EventType"] == "ExecutionRedriven"]
    assert len(redriven) == 1
    assert redriven[0]["ExecutionRedrivenDetails"]["FromOperationId"] == "3"
    assert [e["EventId"] for e in history] == list(range(1, len(history) + 1))
    assert history[-1]["EventType"] == "ExecutionSucceeded"
    rows = [(r["action"], r["ok"], r["reason"]) for r in await rt.audit.list()]
    assert rows[0] == ("redrive", True, "processor back")


async def test_a_redrive_restarts_the_execution_timeout(make_runtime: RuntimeFactory,
                                                        clock: VirtualClock) -> None:
    @durable_execution(name="slow", timeout=60)
    async def slow(event: Any, ctx: DurableContext) -> str:
        cb = await ctx.create_callback("never")
        return str(await cb.result())

    rt = await make_runtime()
    rt.register_execution(slow)
    await rt.executions.start("slow", None, execution_id="t2")
    await clock.advance(61)
    assert (await rt.executions.describe("t2"))["status"] == "timed_out"
    assert await rt.executions.timers(execution_id="t2") == []
    redriven_at = clock.now_ms()
    await rt.executions.redrive("t2")
    await clock.advance(1)
    timers = await rt.executions.timers(execution_id="t2")
    assert [(t["kind"], t["due_ms"]) for t in timers] == [
        ("execution_timeout", redriven_at + 60_000)]
    await clock.advance(59)
    assert (await rt.executions.describe("t2"))["status"] == "timed_out"


async def test_only_failed_or_timed_out_executions_are_redriven(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    rt = await failed_trip(make_runtime, clock, "t3")
    broken["charge"] = False
    await rt.executions.redrive("t3")
    await clock.advance(1)
    with pytest.raises(InvalidExecutionState, match="succeeded; only a failed or timed-out"):
        await rt.executions.redrive("t3")
    assert (await rt.audit.list())[0]["ok"] is False


async def test_the_replay_check_names_the_first_divergence(make_runtime: RuntimeFactory,
                                                           clock: VirtualClock) -> None:
    rt = await failed_trip(make_runtime, clock, "t4")
    same = await rt.executions.replay_check("t4")
    assert (same["clean"], same["summary"], same["version"]) == (True, "replays cleanly", "1")
    changed = await rt.executions.replay_check("t4", version="2")
    assert not changed["clean"]
    assert changed["divergence"] == {
        "op_id": "2", "index": 1,
        "recorded": {"type": "STEP", "kind": "Step", "name": "book_hotel"},
        "current": {"type": "STEP", "kind": "Step", "name": "reserve_room"}}
    assert "'book_hotel'" in changed["summary"] and "'reserve_room'" in changed["summary"]
    assert bodies == ["book_flight", "book_hotel", "charge"]  # the check ran no body


async def test_a_divergent_redrive_is_refused_unless_forced(make_runtime: RuntimeFactory,
                                                            clock: VirtualClock) -> None:
    rt = await failed_trip(make_runtime, clock, "t5")
    before = await rt.executions.describe("t5")
    with pytest.raises(ReplayDivergence, match=r"operation 2.*force=True") as caught:
        await rt.executions.redrive("t5", version="2")
    assert caught.value.report["divergence"]["op_id"] == "2"
    after = await rt.executions.describe("t5")
    assert (after["status"], after["history"]) == ("failed", before["history"])
    refused = (await rt.audit.list())[0]
    assert (refused["action"], refused["ok"]) == ("redrive", False)
    assert refused["detail"]["replay_check"]["divergence"]["op_id"] == "2"
    with pytest.raises(InvalidExecutionState, match="version '9' is not registered"):
        await rt.executions.redrive("t5", version="9")
    out = await rt.executions.redrive("t5", version="2", force=True)
    assert out["version"] == "2"
    await clock.advance(1)
    d = await rt.executions.describe("t5")
    # Forced on: the replay met the renamed step and failed it as non-deterministic.
    assert (d["status"], d["error"]["ErrorType"]) == ("failed",
                                                      "NonDeterministicExecutionError")


async def test_a_redrive_on_a_newer_version_that_replays(make_runtime: RuntimeFactory,
                                                         clock: VirtualClock) -> None:
    rt = await failed_trip(make_runtime, clock, "t6")
    broken["charge"] = False
    await rt.executions.redrive("t6", version="3")
    await clock.advance(1)
    d = await rt.executions.describe("t6")
    assert (d["version"], d["result"][-1]) == ("3", "no ticket in v3")


async def test_a_redrive_never_goes_back_to_an_older_version(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    rt = await failed_trip(make_runtime, clock, "t8")
    await rt.executions.start("trip", None, execution_id="t9", version="3")
    await clock.advance(1)
    with pytest.raises(ValidationError, match="'1' of 'trip' is older than the pinned '3'"):
        await rt.executions.redrive("t9", version="1")
    assert (await rt.executions.describe("t9"))["status"] == "failed"


async def test_fork_from_the_third_step(make_runtime: RuntimeFactory,
                                        clock: VirtualClock) -> None:
    """The fork keeps the first two results (their bodies do not run again) and runs
    the charge and what follows, under a new id; the source is untouched."""
    rt = await failed_trip(make_runtime, clock, "t7")
    broken["charge"] = False
    bodies.clear()
    out = await rt.executions.fork("t7", from_step="charge", execution_id="t7-retry",
                                   input={"note": "fresh input"})
    assert (out["execution_id"], out["from_operation"], out["kept"]) == ("t7-retry", "3",
                                                                         ["1", "2"])
    await clock.advance(1)
    d = await rt.executions.describe("t7-retry")
    assert (d["status"], d["input"]) == ("succeeded", {"note": "fresh input"})
    assert bodies == ["charge", "send_ticket"]
    assert d["forked_from"]["ExecutionId"] == "t7"
    names = [(e["EventType"], e.get("Name")) for e in d["history"]][:5]
    assert names == [("ExecutionStarted", None), ("StepStarted", "book_flight"),
                     ("StepSucceeded", "book_flight"), ("StepStarted", "book_hotel"),
                     ("StepSucceeded", "book_hotel")]
    assert (await rt.executions.describe("t7"))["status"] == "failed"


@durable_execution(name="poller")
async def poller(event: Any, ctx: DurableContext) -> int:
    n = 0
    for _ in range(2):
        n += await ctx.step(lambda: 1, name="poll")
        await ctx.wait(Duration(1))
    return n


async def test_a_repeated_step_name_is_refused_for_a_fork(make_runtime: RuntimeFactory,
                                                          clock: VirtualClock) -> None:
    rt = await make_runtime()
    rt.register_execution(poller)
    await rt.executions.start("poller", None, execution_id="f1")
    await clock.advance(5)
    with pytest.raises(ValidationError, match=r"occurs 2 times.*1, 3.*operation id"):
        await rt.executions.fork("f1", from_step="poll", execution_id="f1-copy")
    assert await rt.executions.list() == [r for r in await rt.executions.list()
                                          if r["execution_id"] != "f1-copy"]
    out = await rt.executions.fork("f1", from_step="3", execution_id="f1-copy")
    await clock.advance(5)
    assert (await rt.executions.describe(out["execution_id"]))["result"] == 2


@durable_execution(name="child-job")
async def child_job(event: Any, ctx: DurableContext) -> str:
    cb = await ctx.create_callback("done")
    return str(await cb.result())


@durable_execution(name="parent-job")
async def parent_job(event: Any, ctx: DurableContext) -> Any:
    async def ask(c: DurableContext) -> Any:
        return await c.invoke("child-job", None, name="child")

    async def work(c: DurableContext) -> Any:
        return await c.step(lambda: "worked", name="work")

    return (await ctx.parallel([ask, work], name="both")).get_results()


async def test_a_fork_never_keeps_an_invoke_still_waiting(make_runtime: RuntimeFactory,
                                                          clock: VirtualClock) -> None:
    rt = await make_runtime()
    rt.register_execution(child_job)
    rt.register_execution(parent_job)
    await rt.executions.start("parent-job", None, execution_id="pj")
    await clock.advance(1)
    with pytest.raises(ValidationError, match=r"invoke 1-1-1 .* still waiting for its child"):
        await rt.executions.fork("pj", from_step="work", execution_id="pj-copy")
    assert [r["execution_id"] for r in await rt.executions.list()
            if r["execution_id"] == "pj-copy"] == []
