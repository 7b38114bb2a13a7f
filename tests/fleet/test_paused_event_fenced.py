"""An event in flight on a node that lost its shard and then claimed it back: its
commit is refused, whatever epoch the node holds by then.

Node a runs an event that has read the object's storage and not yet written it. a
stalls (its heartbeat and leases run out), b takes the shard over and writes the
same object, b goes away, and a's next lease round claims the shard back under a
newer epoch. The event then commits. Before the fix the commit was fenced by the
epoch a held *at the commit*, which was a's again: the write landed over b's,
computed from a read b's write had made stale (the process test of a SIGSTOPped node
found it now and then: the paused event's answer was ok, 11). It is fenced by the
epoch the object was woken under.
"""

from __future__ import annotations

import asyncio

import pytest

from alarmtop.core import DurableObject, VirtualClock
from tests.fleet.conftest import NodeFactory, backend_of, balance, name_on, stall_and_claim_back

LEASE_S = 120.0  # the nodes' own lease rounds stay out of the way
GATE: dict[str, asyncio.Event] = {}


class Tally(DurableObject):
    async def add(self, n: int) -> int:
        total = int(await self.ctx.storage.get("n") or 0) + n
        await self.ctx.storage.put("n", total)
        return total

    async def held_add(self, n: int) -> int:
        """Reads, waits for the test to let it go on, then writes what it read plus n."""
        total = int(await self.ctx.storage.get("n") or 0) + n
        GATE["read"].set()
        await GATE["go"].wait()
        await self.ctx.storage.put("n", total)
        return total


class Beacon(DurableObject):
    """An object with no database: its alarm row is its one durable state."""

    async def arm(self, at_ms: int) -> None:
        await self.ctx.storage.set_alarm(at_ms)

    async def held_arm(self, at_ms: int) -> None:
        await self.ctx.storage.get_alarm()
        GATE["read"].set()
        await GATE["go"].wait()
        await self.ctx.storage.set_alarm(at_ms)

    async def alarm_at(self) -> int | None:
        return await self.ctx.storage.get_alarm()


async def test_an_event_from_before_a_lost_lease_is_fenced_out_after_a_claim_back(
        node: NodeFactory, clock: VirtualClock) -> None:
    GATE.update(read=asyncio.Event(), go=asyncio.Event())
    a = await node("a", Tally, lease_s=LEASE_S)
    b = await node("b", Tally, lease_s=LEASE_S)
    await balance(a, b)
    name = name_on(a, "Tally")
    assert await a.get(Tally, name).add(10) == 10
    held = asyncio.get_running_loop().create_task(a.get(Tally, name).held_add(1))
    await asyncio.wait_for(GATE["read"].wait(), 30)

    async def write_on_b() -> None:
        assert await b.get(Tally, name).add(100) == 110
    await stall_and_claim_back(a, b, backend_of(a).shard_of(("Tally", name)), write_on_b)

    GATE["go"].set()  # the stalled event goes on to its commit
    with pytest.raises(Exception, match="no longer holds"):
        await asyncio.wait_for(held, 30)
    assert await a.get(Tally, name).add(0) == 110  # b's write stands


async def test_an_alarm_only_objects_stale_event_is_fenced_out_too(
        node: NodeFactory, clock: VirtualClock) -> None:
    """The same for an object with no database: its event's one commit is its alarm
    row, written through the runtime database's batched writer."""
    GATE.update(read=asyncio.Event(), go=asyncio.Event())
    a = await node("a", Beacon, lease_s=LEASE_S)
    b = await node("b", Beacon, lease_s=LEASE_S)
    await balance(a, b)
    name = name_on(a, "Beacon")
    now = clock.now_ms()
    await a.get(Beacon, name).arm(now + 600_000)
    held = asyncio.get_running_loop().create_task(a.get(Beacon, name).held_arm(now + 900_000))
    await asyncio.wait_for(GATE["read"].wait(), 30)

    async def arm_on_b() -> None:
        await b.get(Beacon, name).arm(now + 700_000)
    await stall_and_claim_back(a, b, backend_of(a).shard_of(("Beacon", name)), arm_on_b)

    GATE["go"].set()
    with pytest.raises(Exception, match="no longer holds"):
        await asyncio.wait_for(held, 30)
    assert await a.get(Beacon, name).alarm_at() == now + 700_000  # b's alarm stands
