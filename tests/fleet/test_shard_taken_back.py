"""A shard another node owned for a while, taken back: what this node remembers of its
objects from before is out of date.

Node a holds a shard and keeps one of its objects in memory (its cached alarm intent
says "no alarm"). Its lease lapses unnoticed (a loaded machine: the lease round that
finds out is the one that claims the shard back), node b takes the shard over, the
object sets an alarm there, and b goes away. a's next lease round claims the shard again
under a newer epoch. Before the fix a saw nothing change (it held the shard before and
after the round): it kept the object's old memory and its old alarm window, the object
told its caller it had no alarm, and when the alarm fell due a compared b's row with the
stale intent, took the row for one written ahead of a commit that never landed, and
deleted it: an alarm the object's own storage asks for, gone from the index (found by
the fleet chaos run, seed 20260601: "alarm vanished or wrong ... final row null, the
object sees ...").
"""

from __future__ import annotations

from typing import Any

from alarmtop.core import AlarmInfo, DurableObject, VirtualClock
from alarmtop.core.model.errors import StorageError
from tests.fleet.conftest import (
    NodeFactory,
    backend_of,
    balance,
    name_on,
    stall_and_claim_back,
    until,
)

LEASE_S = 120.0  # the keepers' own rounds (every 40 s) stay out of the way


class Armed(DurableObject):
    """The chaos workload's alarm object: storage writes beside every alarm change."""

    async def arm(self, at_ms: int) -> int:
        await self.ctx.storage.put("armed", at_ms)
        await self.ctx.storage.set_alarm(at_ms)
        return at_ms

    async def disarm(self) -> None:
        await self.ctx.storage.put("armed", None)
        await self.ctx.storage.delete_alarm()

    async def view(self) -> int | None:
        return await self.ctx.storage.get_alarm()

    async def fired(self) -> int:
        return int(await self.ctx.storage.get("fired") or 0)

    async def alarm(self, info: AlarmInfo) -> None:
        await self.ctx.storage.put("fired", int(await self.ctx.storage.get("fired") or 0) + 1)


async def test_a_shard_taken_back_after_another_node_owned_it_forgets_what_it_knew(
        node: NodeFactory, clock: VirtualClock) -> None:
    a = await node("a", Armed, lease_s=LEASE_S)
    b = await node("b", Armed, lease_s=LEASE_S)
    await balance(a, b)
    name = name_on(a, "Armed")
    shard = backend_of(a).shard_of(("Armed", name))
    obj = a.get(Armed, name)
    await obj.arm(clock.now_ms() + 60_000)
    await obj.disarm()  # a keeps the object in memory: its intent, "no alarm", cached
    assert ("Armed", name) in a.resident_objects()
    at = clock.now_ms() + 5_000

    async def arm_on_b() -> None:
        # a has stalled: b took every shard over; the object sets an alarm there.
        assert await b.get(Armed, name).arm(at) == at
    await stall_and_claim_back(a, b, shard, arm_on_b)

    # What b committed is what a now serves: the object sees its alarm ...
    assert await obj.view() == at
    # ... and it fires, on a.
    await clock.advance(6)
    await until(lambda: _fired(obj), what="the alarm set on b firing on a")
    assert await a.alarm("Armed", name) is None  # done: no row left, and no intent
    assert await obj.view() is None


async def _fired(obj: Any) -> bool:
    try:
        return bool(await obj.fired() == 1)
    except StorageError:
        return False
