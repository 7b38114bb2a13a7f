"""`bulk.start` on a large selection answers with the batch id at once: the
selection's keys are recorded by the batch itself, in the background, so the answer
never passes a command's deadline (the operator was told it failed while the batch
ran). With a client token, a retry returns the same batch and starts nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from alarmtop.core import DurableObject, Runtime, VirtualClock
from alarmtop.core.errors import InvalidArgument
from alarmtop.core.model.alarm_policy import AlarmRecord, AlarmState
from alarmtop.core.model.bulk_items import PREP_CHUNK
from alarmtop.core.storage.faultpoints import FAULT_POINTS
from tests.conftest import START_MS, RuntimeFactory

DEAD = {"kind": "alarms", "state": "dead"}
FAR = START_MS + 10**9
N = 3 * PREP_CHUNK + 7  # four chunks of keys to record


class Job(DurableObject):
    async def alarm(self, info: Any) -> None:
        pass


async def dead_letters(rt: Runtime, n: int) -> None:
    await rt.backend.database.write([AlarmRecord("Job", f"j{i:05d}", START_MS, AlarmState.DEAD,
                                                 6, None, f"boom {i}") for i in range(n)])


async def test_the_answer_does_not_wait_for_the_keys(make_runtime: RuntimeFactory,
                                                     clock: VirtualClock) -> None:
    """One commit before the answer (the batch's row), however large the selection: the
    keys, a chunk per commit, come after it."""
    rt = await make_runtime(Job)
    await dead_letters(rt, N)
    await clock.advance(0)  # nothing else of the runtime's is writing
    commits: list[int] = []
    FAULT_POINTS.arm("index.commit.before", lambda info: commits.append(info["extras"]))
    try:
        bid = await rt.bulk.start("rearm", DEAD, max_in_flight=50, at_ms=FAR)
        before_answer = len(commits)
    finally:
        FAULT_POINTS.disarm()
    assert before_answer == 1, commits
    batch = await rt.bulk.wait(bid)
    assert (batch["status"], batch["total"], batch["done"], batch["failed"]) == \
        ("done", N, N, 0)


async def test_a_retry_with_the_token_starts_nothing(make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime(Job)
    await dead_letters(rt, 50)
    first, again = await asyncio.gather(
        rt.bulk.start("rearm", DEAD, at_ms=FAR, token="click-1"),
        rt.bulk.start("rearm", DEAD, at_ms=FAR, token="click-1"))  # while it starts
    assert first == again
    assert await rt.bulk.start("rearm", DEAD, at_ms=FAR, token="click-1") == first
    await rt.bulk.wait(first)
    assert await rt.bulk.start("rearm", DEAD, at_ms=FAR, token="click-1") == first  # ended
    assert [b["id"] for b in await rt.bulk.list()] == [first]
    rows = await rt.audit.list(limit=1000)
    assert len([r for r in rows if r["action"] == "rearm"]) == 50  # each item once


async def test_the_token_outlives_a_restart(make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime(Job)
    await dead_letters(rt, 5)
    bid = await rt.bulk.start("rearm", DEAD, at_ms=FAR, token="click-2")
    await rt.bulk.wait(bid)
    await rt.stop()
    rt2 = await make_runtime(Job)
    assert await rt2.bulk.start("rearm", DEAD, at_ms=FAR, token="click-2") == bid
    assert len(await rt2.bulk.list()) == 1


async def test_a_refused_start_keeps_no_token(make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime(Job)
    with pytest.raises(InvalidArgument, match="matches nothing"):
        await rt.bulk.start("rearm", DEAD, at_ms=FAR, token="click-3")
    await dead_letters(rt, 3)
    bid = await rt.bulk.start("rearm", DEAD, at_ms=FAR, token="click-3")
    assert (await rt.bulk.wait(bid))["done"] == 3
    for bad in ("", "x" * 201, "a\nb", 7):
        with pytest.raises(InvalidArgument, match="token"):
            await rt.bulk.start("rearm", DEAD, at_ms=FAR, token=bad)
    assert len(await rt.bulk.list()) == 1
