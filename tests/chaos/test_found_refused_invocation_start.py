"""Found by the chaos harness's lock mode (seed 11, 200 kills): an invocation whose
start checkpoint is refused while its later checkpoints land leaves the execution
suspended with no alarm, for good.

`ExecutionObject._invoke` queues the invocation's start (the record marked running,
and what the alarm completed: a wait's end, a step retry made ready) without
awaiting it, on the grounds that "each later write of this invocation queues
behind it, so whatever the invocation makes durable implies it". That holds for a
death, not for a refused write: the runtime database commits queued writes in
batches, a batch refused by a lock fails alone, and the next batch (the step's
result, written once the lock is gone) lands. The log then holds the step's
success but not the invocation's start: the record still says "suspended, the
step retries at T" and does not ask for an invocation. The next alarm attempt
(the failed one is retried) finds nothing due: the step is done, no wait or
retry is pending, so it deletes the alarm. The execution stays suspended, with
nothing to wake it.

In the chaos run: trip-107-1's book_hotel retry ran while a lock held
runtime.sqlite (the invocation's start was refused, the step's success landed
after the lock), the process died in the next step; after the restart the retry
of that attempt found nothing due, and the trip ended the run "suspended: step
'book_hotel' retries in 1s" with no alarm.

Here the same with a fault point refusing the invocation's start, and a short
hibernation so the retry reads the log from disk as a restart would.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from alarmtop.core import VirtualClock
from alarmtop.core.durable import (
    DurableContext,
    Duration,
    RetryStrategyConfig,
    StepConfig,
    create_retry_strategy,
    durable_execution,
)
from alarmtop.core.kernel.executions.ledger import Ledger
from alarmtop.core.model.execution_config import JitterStrategy
from alarmtop.core.storage.faultpoints import FAULT_POINTS, locked, when
from tests.conftest import RuntimeFactory

ATTEMPTS = [0]
LEDGER: list[Ledger] = []
RETRY = StepConfig(retry_strategy=create_retry_strategy(RetryStrategyConfig(
    max_attempts=3, initial_delay=Duration(1), backoff_rate=1.0,
    jitter_strategy=JitterStrategy.NONE)))


async def flaky() -> str:
    ATTEMPTS[0] += 1
    if ATTEMPTS[0] == 1:
        raise RuntimeError("the first attempt fails: the step retries in 1 s")
    # A read on the runtime database's one thread: the invocation's start, queued
    # before this body ran, has been written (or refused) by the time it returns, so
    # the step's result goes in a batch of its own.
    await LEDGER[0].get("probe")
    return "ok"


@durable_execution(name="retried-step")
async def retried_step(event: Any, ctx: DurableContext) -> str:
    return str(await ctx.step(flaky, name="flaky", config=RETRY))


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    ATTEMPTS[0] = 0
    LEDGER.clear()
    yield
    FAULT_POINTS.disarm()


def log_write(info: dict[str, Any]) -> bool:
    """A write of an execution's log on its own (no alarm row rides it): the first
    after arming is the retry invocation's start."""
    return info.get("extras", 0) > 0 and not info.get("keys")


async def test_a_refused_invocation_start_does_not_strand_the_execution(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    rt = await make_runtime(hibernate_after=0.5)
    LEDGER.append(rt.ledger)
    rt.register_execution(retried_step)
    await rt.executions.start("retried-step", None, execution_id="x1")
    await clock.advance(0)  # the first attempt failed; the step retries in 1 s
    assert (await rt.executions.describe("x1"))["status"] == "suspended"
    FAULT_POINTS.arm("index.commit.before", when(log_write, locked))
    await clock.advance(1.5)  # the retry's invocation: its start refused, its step lands
    FAULT_POINTS.disarm()
    await clock.advance(300)  # whatever retry of the attempt comes, it has run
    d = await rt.executions.describe("x1")
    assert (d["status"], d["result"]) == ("succeeded", "ok"), (
        [e["EventType"] for e in d["history"]],
        d["status"], d.get("blocked_on"), await rt.alarm("Execution", "x1"))
