"""Found by the chaos harness's lock mode (seed 3, 200 kills): a checkpoint write that
fails because runtime.sqlite is locked fails the whole execution, for good.

A step's checkpoint is awaited inside the handler (`Invocation.save`). When the
write fails (another connection held the lock past the busy timeout), the
`StorageError` comes out of `ctx.step` into the user's handler, and unless the
handler catches it, `ExecutionObject._invoke` records it as the handler's own
failure: `ExecutionFailed` with "database is locked". DESIGN section 11 treats a
failed write of the runtime database as a crash of the attempt (retried, counted),
and a crash of an invocation is retried by its alarm; a transient lock should
leave the execution to finish once the lock is gone, as a SIGKILL at the same
instant would. (A handler that catches broad exceptions would even carry on past
a step whose result was never recorded.)

In the chaos run, festival fest-14-1 failed while compensating and trip trip-53-2
while rolling back, both with the lock error as the execution's error.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from alarmtop.core import VirtualClock
from alarmtop.core.durable import DurableContext, durable_execution
from alarmtop.core.storage.faultpoints import FAULT_POINTS, locked, when
from tests.conftest import RuntimeFactory

SECOND_RAN = [False]


def first() -> str:
    return "a"


def second() -> str:
    SECOND_RAN[0] = True
    return "b"


@durable_execution(name="two-checkpoints")
async def two_checkpoints(event: Any, ctx: DurableContext) -> str:
    a = await ctx.step(first)
    b = await ctx.step(second)
    return f"{a}{b}"


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    SECOND_RAN[0] = False
    yield
    FAULT_POINTS.disarm()


def second_checkpoint(info: dict[str, Any]) -> bool:
    """The first runtime-database write that carries a log, once `second` has run: its
    checkpoint (`first`'s, and the invocation's start, landed before it ran)."""
    return SECOND_RAN[0] and info.get("extras", 0) > 0


async def test_a_locked_checkpoint_is_retried_not_the_executions_failure(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    rt = await make_runtime()
    rt.register_execution(two_checkpoints)
    FAULT_POINTS.arm("index.commit.before", when(second_checkpoint, locked))
    await rt.executions.start("two-checkpoints", None, execution_id="x1")
    await clock.advance(0)
    FAULT_POINTS.disarm()
    await clock.advance(120)  # any retry of the invocation has run
    d = await rt.executions.describe("x1")
    assert (d["status"], d["result"], d["error"]) == ("succeeded", "ab", None)
