"""The recovery of an attempt cut short runs in its object's turn, from its row read
again there (found by the fleet chaos harness, seed 17: a lease ledger whose leases
stopped expiring).

A node gaining a shard (or a runtime starting) recovers the 'running' rows it finds,
while events of those objects may already run there. The recovery read the row and the
object's intent, then wrote the retry; an event that set an earlier alarm in between
was overwritten by a row later than the object's own alarm, and that alarm never
fired (the object, seeing its own alarm early enough, never set it again)."""

from __future__ import annotations

import asyncio
from typing import Any

from alarmtop.core import AlarmInfo, DurableObject
from alarmtop.core.model.alarm_policy import AlarmState
from tests.conftest import START_MS, RuntimeFactory

FAR = START_MS + 3_600_000
SOON = START_MS + 60_000


class Sets(DurableObject):
    async def arm(self, at_ms: int) -> int:
        await self.ctx.storage.put("armed", at_ms)
        await self.ctx.storage.set_alarm(at_ms)
        return at_ms

    async def alarm_at(self) -> int | None:
        return await self.ctx.storage.get_alarm()

    async def alarm(self, info: AlarmInfo) -> None:
        pass


async def test_an_event_between_the_recoverys_read_and_its_write_is_not_overwritten(
        make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime(Sets)
    obj = rt.get(Sets, "s")
    await obj.arm(START_MS + 30_000)
    db, rows, sched = rt.backend.database, rt.backend.alarm_rows, rt.scheduler
    cut = await rows.get(("Sets", "s"))
    assert cut is not None
    await obj.arm(FAR)  # as the handler of the attempt cut short committed: a new alarm
    # The row as that attempt left it when its node died: running, its own generation.
    running = cut._replace(state=AlarmState.RUNNING, started_ms=START_MS)
    await db.write([running])

    reading, gate = asyncio.Event(), asyncio.Event()
    firing = rt._dispatcher  # what the scheduler asks for an object's intent
    real = firing.intent_of

    async def slow_intent(rec: Any, storage: Any = None) -> Any:
        intent = await real(rec)
        reading.set()
        await gate.wait()  # the recovery has read; an event may come now
        return intent
    firing.intent_of = slow_intent  # type: ignore[method-assign]
    recovering = asyncio.ensure_future(sched.recover(running, "the node died (test)"))
    await asyncio.wait_for(reading.wait(), 5)
    event = asyncio.ensure_future(obj.arm(SOON))  # earlier than FAR
    await asyncio.sleep(0.1)  # the event runs now if nothing holds the object's turn
    gate.set()
    await asyncio.wait_for(asyncio.gather(recovering, event), 5)
    firing.intent_of = real  # type: ignore[method-assign]

    assert await obj.alarm_at() == SOON
    row = await rows.get(("Sets", "s"))
    assert row is not None and row.due_ms is not None and row.due_ms <= SOON, row
