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
from typing import Any

import pytest

from alarmtop.core import DurableObject, VirtualClock
from tests.fleet.conftest import NodeFactory, backend_of, balance, name_on, until

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


async def _sql(rt: Any, *statements: str) -> None:
    async with backend_of(rt)._require_pool().acquire() as conn:
        for sql in statements:
            await conn.execute(sql)


async def test_an_event_from_before_a_lost_lease_is_fenced_out_after_a_claim_back(
        node: NodeFactory, clock: VirtualClock) -> None:
    GATE.update(read=asyncio.Event(), go=asyncio.Event())
    a = await node("a", Tally, lease_s=LEASE_S)
    b = await node("b", Tally, lease_s=LEASE_S)
    await balance(a, b)
    name = name_on(a, "Tally")
    shard = backend_of(a).shard_of(("Tally", name))
    assert await a.get(Tally, name).add(10) == 10
    first_epoch = backend_of(a).epochs[shard]
    held = asyncio.get_running_loop().create_task(a.get(Tally, name).held_add(1))
    await asyncio.wait_for(GATE["read"].wait(), 30)

    # a stalls with the event in flight: b takes the shard over and writes the object.
    await _sql(a, "UPDATE alarmtop.nodes SET renewed_ms = 0 WHERE node_id = 'a'",
               "UPDATE alarmtop.shards SET expires_ms = 0 WHERE owner = 'a'")

    async def b_holds() -> bool:
        await backend_of(b).keep_leases_once()
        return shard in backend_of(b).epochs
    await until(b_holds, what="b taking the shard over")
    assert await b.get(Tally, name).add(100) == 110
    await b.stop()

    async def a_holds_again() -> bool:
        await backend_of(a).keep_leases_once()
        return backend_of(a).epochs.get(shard, first_epoch) > first_epoch
    await until(a_holds_again, what="a claiming the shard back")

    GATE["go"].set()  # the stalled event goes on to its commit
    with pytest.raises(Exception, match="no longer holds"):
        await asyncio.wait_for(held, 30)
    assert await a.get(Tally, name).add(0) == 110  # b's write stands
