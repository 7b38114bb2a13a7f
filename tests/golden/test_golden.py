"""Stored histories replayed against today's handlers, as Temporal's replayer does.

Each golden (recorded by `tests/golden/record.py`) is folded back into operation
records and replayed in replay-only mode: no body runs, and the handler must
reach the recorded result without a divergence.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from alarmtop.core import Runtime, VirtualClock
from alarmtop.core.durable import DurableContext, DurableFunction, durable_execution
from alarmtop.core.kernel.executions.replay_check import replay_check
from alarmtop.core.model.history import records_from_history
from alarmtop.core.model.operations import ExecutionRecord, ExecutionStatus
from tests.conftest import RuntimeFactory
from tests.golden.handlers import GOLDEN, tries

HERE = Path(__file__).parent


def load(key: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HERE / f"{key}.json").read_text())
    return data


def record_of(data: dict[str, Any]) -> ExecutionRecord:
    started = data["history"][0]
    assert started["EventType"] == "ExecutionStarted"
    text = started["ExecutionStartedDetails"]["Input"]["Payload"]
    return ExecutionRecord(f"golden-{data['handler']}", data["handler"], data["version"],
                           ExecutionStatus.SUCCEEDED, text, 0, 0)


async def replay(rt: Runtime, fn: DurableFunction, data: dict[str, Any]) -> dict[str, Any]:
    engine = rt.executions.engine
    return await replay_check(fn, record_of(data), records_from_history(data["history"]),
                              data["marks"], store=engine.store, clock=engine.clock,
                              faults=engine.faults)


@pytest.mark.parametrize("key", sorted(GOLDEN))
async def test_golden_history_replays_to_its_result(key: str,
                                                    make_runtime: RuntimeFactory) -> None:
    data = load(key)
    fn = GOLDEN[key][0]
    rt = await make_runtime()
    before = dict(tries)
    report = await replay(rt, fn, data)
    assert (report["clean"], report["summary"], report["ended"]) == (True, "replays cleanly",
                                                                     "returned")
    assert report["result"] == data["result"]
    # Every top-level operation was met; contexts replayed whole skip their children.
    top = [i for i in records_from_history(data["history"]) if "-" not in i]
    assert report["replayed"] >= len(top) > 0
    assert tries == before  # no step body ran


async def test_a_changed_handler_diverges_from_its_golden(make_runtime: RuntimeFactory) -> None:
    @durable_execution(name="golden-order")
    async def changed(event: dict[str, Any], ctx: DurableContext) -> str:
        await ctx.step(lambda: "r", name="reserve")
        await ctx.wait(ctx_duration(), name="cool_down")  # moved before the pick
        return "?"

    rt = await make_runtime()
    report = await replay(rt, changed, load("order"))
    assert not report["clean"]
    assert report["divergence"]["op_id"] == "2"
    assert (report["divergence"]["recorded"]["name"],
            report["divergence"]["current"]["kind"]) == ("pick", "Wait")


async def test_a_handler_that_stops_short_of_its_golden_diverges(
        make_runtime: RuntimeFactory) -> None:
    @durable_execution(name="golden-saga")
    async def shorter(event: Any, ctx: DurableContext) -> str:
        ctx.now_ms()
        ctx.random()
        await ctx.step(lambda: "held", name="hold_seat")
        return "done early"

    rt = await make_runtime()
    report = await replay(rt, shorter, load("saga"))
    assert not report["clean"] and report["divergence"]["current"] is None
    assert report["divergence"]["recorded"]["name"] == "charge"


async def test_the_fold_agrees_with_the_engine_s_own_records(make_runtime: RuntimeFactory,
                                                             clock: VirtualClock) -> None:
    """What `records_from_history` rebuilds is what the engine stored."""
    rt = await make_runtime()
    fn, event = GOLDEN["order"]
    rt.register_execution(fn)
    await rt.executions.start(fn.name, event, execution_id="fold-1")
    await clock.advance(30)
    store = rt.executions.engine.store
    stored = {op.id: op for op in await store.operations("fold-1")}
    folded = records_from_history(await store.history("fold-1"))

    def key(o: Any) -> tuple[Any, ...]:
        return (o.type, o.sub_type, o.name, o.status, o.result, o.attempt, o.parent_id)
    assert {k: key(v) for k, v in folded.items()} == {k: key(v) for k, v in stored.items()}


def ctx_duration() -> Any:
    from alarmtop.core.durable import Duration
    return Duration(5)
