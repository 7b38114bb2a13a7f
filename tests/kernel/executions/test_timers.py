"""Every pending timer of every execution, in one table written with the checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from alarmtop.core import VirtualClock
from alarmtop.core.durable import (
    CallbackConfig,
    DurableContext,
    Duration,
    ParallelConfig,
    RetryStrategyConfig,
    StepConfig,
    ValidationError,
    create_retry_strategy,
    durable_execution,
)
from alarmtop.core.model.execution_config import JitterStrategy
from tests.conftest import RuntimeFactory
from tests.sqlite_versions import as_version, migration_adding

RETRY = StepConfig(retry_strategy=create_retry_strategy(RetryStrategyConfig(
    max_attempts=10, initial_delay=Duration(7), jitter_strategy=JitterStrategy.NONE)))


@durable_execution(name="many", timeout=600)
async def many(event: Any, ctx: DurableContext) -> str:
    async def short(c: DurableContext) -> None:
        await c.wait(Duration(20), name="short")

    async def long(c: DurableContext) -> None:
        await c.wait(Duration(90), name="long")

    async def asked(c: DurableContext) -> Any:
        cb = await c.create_callback("approval", CallbackConfig(
            timeout=Duration(300), heartbeat_timeout=Duration(45)))
        return await cb.result()

    def flaky() -> None:
        raise ConnectionError("not yet")

    async def retrying(c: DurableContext) -> None:
        await c.step(flaky, name="flaky", config=RETRY)

    await ctx.parallel([("s", short), ("l", long), ("a", asked), ("r", retrying)],
                       config=ParallelConfig(max_concurrency=4))
    return "done"


async def test_waits_retries_and_deadlines_are_listed_soonest_first(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    rt = await make_runtime()
    rt.register_execution(many)
    start = clock.now_ms()
    await rt.executions.start("many", None, execution_id="m1")
    await clock.advance(1)
    rows = await rt.executions.timers()
    got = [(r["kind"], r["name"], r["due_ms"] - start) for r in rows]
    assert got == [("retry", "flaky", 7_000), ("wait", "short", 20_000),
                   ("heartbeat", "approval", 45_000), ("wait", "long", 90_000),
                   ("callback_timeout", "approval", 300_000),
                   ("execution_timeout", "many", 600_000)]
    assert {r["execution_id"] for r in rows} == {"m1"}
    alarm = await rt.alarm("Execution", "m1")
    assert alarm is not None and alarm.scheduled_ms == rows[0]["due_ms"]  # the soonest
    page = await rt.executions.timers(limit=2, after=rows[1]["key"])
    assert [r["kind"] for r in page] == ["heartbeat", "wait"]
    await clock.advance(25)  # the short wait is over, the flaky step retried twice
    later = [(r["kind"], r["name"], r["due_ms"] - start) for r in await rt.executions.timers()]
    assert later[:3] == [("heartbeat", "approval", 45_000), ("retry", "flaky", 49_000),
                         ("wait", "long", 90_000)]
    assert ("wait", "short") not in [row[:2] for row in later]


async def test_a_finished_execution_has_no_timers(make_runtime: RuntimeFactory,
                                                  clock: VirtualClock) -> None:
    rt = await make_runtime()
    rt.register_execution(many)
    await rt.executions.start("many", None, execution_id="m2")
    await clock.advance(1)
    await rt.executions.abort("m2", reason="test")
    assert await rt.executions.timers(execution_id="m2") == []


async def test_bad_pages_are_refused(make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime()
    with pytest.raises(ValidationError, match="limit"):
        await rt.executions.timers(limit=0)
    with pytest.raises(ValidationError, match="key"):
        await rt.executions.timers(after=[1, 2])


@pytest.mark.sqlite_only  # the SQLite schema's own migration
async def test_executions_of_an_earlier_version_get_their_timers_by_migration(
        make_runtime: RuntimeFactory, clock: VirtualClock, data_dir: Path) -> None:
    """A data dir from before the timers table: the migration rebuilds the rows from
    the running executions' logs."""
    rt = await make_runtime()
    rt.register_execution(many)
    await rt.executions.start("many", None, execution_id="m3")
    await clock.advance(1)
    before = await rt.executions.timers()
    await rt.stop()
    as_version(data_dir / "runtime.sqlite", migration_adding("execution_timers"))
    rt2 = await make_runtime()
    rt2.register_execution(many)
    assert await rt2.executions.timers() == before and len(before) == 6
