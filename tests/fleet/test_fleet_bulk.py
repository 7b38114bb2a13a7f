"""Bulk batches in a fleet: two in-process nodes on one real PostgreSQL, each holding
half the shards (but in the test where a shard moves). A batch started on one node
does the items of the other node's shards through that node (its records, its
scheduler, its events); a batch left open by a node that stops is finished by a
node that keeps running, each item once (none failed for the stop); a cancel made
on another node than the batch's stops it where it runs; a shard moving under a
batch does not stop it.

Every item writes its audit row from the node running the batch (the audit table's
`node` column names the writer), so which node applied an item is read from the
nodes themselves: the alarm events each one's bus carried, the pauses each one's
scheduler holds.

A node taken for gone while it still runs (stalled past its lease) gives its batch
up before its next group; the group it had in flight keeps nothing, because each
group's transaction holds the batch's row and goes on only while its node runs
the batch."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import pytest

from alarmtop.core import AlarmInfo, DurableObject, Runtime, VirtualClock
from alarmtop.core.model.alarm_policy import AlarmRecord, AlarmState
from alarmtop.core.model.errors import StorageError
from tests.conftest import START_MS
from tests.fleet.conftest import (
    SHARDS,
    Counter,
    NodeFactory,
    backend_of,
    balance,
    name_on,
    until,
)

FAR = START_MS + 10 * 24 * 3600 * 1000  # re-armed for then: nothing fires during a test
DEAD = {"kind": "alarms", "state": "dead"}
# Short leases for the tests where a node must notice another one go (the bulk
# service looks every third of a lease); the others keep the fixture's long ones.
LEASE_S = 1.5


class Stuck(DurableObject):
    """Its alarm holds on, cancelled or not, until the test lets go (`env["gate"]`): a
    stop waits for it (within its grace), as for a handler stuck on a slow downstream
    that ignores being cancelled."""

    async def arm(self, at_ms: int) -> None:
        await self.ctx.storage.set_alarm(at_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        env = self.env
        env["started"].set()
        try:
            await env["clock"].idle_wait(env["gate"].wait())
        except asyncio.CancelledError:
            await env["clock"].idle_wait(env["gate"].wait())
            raise


def split(a: Runtime, b: Runtime, n: int, prefix: str = "j") -> tuple[list[str], list[str]]:
    """`n` Counter names, as those of a's shards and those of b's."""
    on_a: list[str] = []
    on_b: list[str] = []
    for i in range(n):
        name = f"{prefix}{i:04d}"
        shard = backend_of(a).shard_of(("Counter", name))
        if shard in backend_of(a).epochs:
            on_a.append(name)
        else:
            assert shard in backend_of(b).epochs, f"no node holds shard {shard}"
            on_b.append(name)
    assert on_a and on_b, "the names must fall on both nodes' shards"
    return on_a, on_b


async def write_alarms(rt: Runtime, names: list[str], state: AlarmState,
                       at_ms: int = START_MS) -> None:
    """Alarm records of `names`, written by `rt` (the holder of their shards: writes
    are fenced by shard) as the runtime keeps them."""
    if state is AlarmState.DEAD:
        recs = [AlarmRecord("Counter", n, at_ms, state, 6, None, f"boom {n}") for n in names]
    else:
        recs = [AlarmRecord("Counter", n, at_ms, state, 0, at_ms) for n in names]
    await rt.backend.database.write(recs)

async def dead_on_both(a: Runtime, b: Runtime, n: int) -> tuple[list[str], list[str]]:
    """`n` dead letters over both nodes' shards, each written by its shard's holder."""
    on_a, on_b = split(a, b, n)
    await write_alarms(a, on_a, AlarmState.DEAD)
    await write_alarms(b, on_b, AlarmState.DEAD)
    return on_a, on_b


async def under_way(rt: Runtime, bid: str, done: int = 10) -> None:
    """Until `done` items of the batch are done, as `rt` sees it."""
    async def some_done() -> bool:
        return int((await rt.bulk.get(bid))["done"]) >= done
    await until(some_done, what="the batch under way")



async def audit_rows(rt: Runtime, action: str) -> list[dict[str, Any]]:
    """The batch's own rows of `action` (the ones the owners of its items wrote, naming
    the node that asked, are `owner_rows`)."""
    return [r for r in await rt.audit.list(limit=100_000)
            if r["action"] == action and r["role"] != "node"]


async def owner_rows(rt: Runtime, action: str) -> list[dict[str, Any]]:
    """The rows each owner wrote of an item another node asked it to run."""
    return [r for r in await rt.audit.list(limit=100_000)
            if r["action"] == action and r["role"] == "node"]


def objects(events: list[Any], kind: str) -> list[str]:
    return [e.data["object"] for e in events if e.type == kind]


async def test_a_rearm_started_on_one_node_rearms_the_other_nodes_dead_letters_there(
        node: NodeFactory) -> None:
    """200 dead letters over both nodes' shards, one batch on a: all re-armed, each
    item audited once plus the batch; b's items were re-armed by b (its bus announced
    exactly those, a's exactly its own) and b's scheduler holds them as re-armed."""
    a = await node("a")
    b = await node("b")
    await balance(a, b)
    on_a, on_b = await dead_on_both(a, b, 200)
    heard = {rt: rt.events.subscribe("alarm.rearmed") for rt in (a, b)}
    bid = await a.bulk.start("rearm", DEAD, max_in_flight=50, at_ms=FAR, reason="fixed it")
    batch = await a.bulk.wait(bid)
    assert (batch["status"], batch["total"], batch["done"], batch["failed"], batch["left"]) \
        == ("done", 200, 200, 0, 0), batch
    assert batch["node"] == "a"
    for rt in (a, b):
        assert await rt.dead_letters() == []  # the listing is the fleet's
    for rt, names in ((a, on_a), (b, on_b)):
        recs = await rt.operator_rows.get_many([("Counter", n) for n in names])
        assert len(recs) == len(names)
        assert {(r.state, r.retry_count, r.next_attempt_ms) for r in recs.values()} == \
            {(AlarmState.PENDING, 0, FAR)}
    # Where each item was applied: the owner's own transition announced it on its bus.
    assert sorted(objects(heard[a].drain(), "alarm.rearmed")) == [f"Counter/{n}" for n in on_a]
    assert sorted(objects(heard[b].drain(), "alarm.rearmed")) == [f"Counter/{n}" for n in on_b]
    for n in on_b[:5]:  # b's scheduler took the change in (a behind its back would not)
        rec = b.scheduler.window.records.get(("Counter", n))
        assert rec is not None and rec.next_attempt_ms == FAR and rec.retry_count == 0
        assert ("Counter", n) not in a.scheduler.window.records
    items = await audit_rows(b, "rearm")  # read from b: the audit log is the fleet's
    assert len(items) == 200
    assert sorted(r["target"] for r in items) == sorted(f"Counter/{n}" for n in on_a + on_b)
    assert all(r["ok"] and r["detail"] == {"batch_id": bid, "outcome": "ok"}
               and r["reason"] == "fixed it" for r in items)
    assert {r["node"] for r in items} == {"a"}  # written by the node that ran the batch
    # And each item run on b is b's own row too, naming a as the node that asked.
    owned = await owner_rows(a, "rearm")
    assert sorted(r["target"] for r in owned) == sorted(f"Counter/{n}" for n in on_b)
    assert all(r["node"] == "b" and r["actor"] == "node a" and r["ok"] for r in owned)
    (whole,) = await audit_rows(b, "bulk_rearm")
    assert (whole["target"], whole["node"], whole["ok"]) == (bid, "a", True)
    assert (whole["detail"]["done"], whole["detail"]["failed"]) == (200, 0)


async def test_pause_then_resume_of_the_other_nodes_alarms(node: NodeFactory) -> None:
    """Pause and resume go through each alarm's owner with the object's turn held:
    started on a, for alarms of b's shards, b's scheduler holds the pauses (and then
    not), as b's listing and its bus say."""
    a = await node("a")
    b = await node("b")
    await balance(a, b)
    _, on_b = split(a, b, 80, prefix="p")
    await write_alarms(b, on_b, AlarmState.PENDING, at_ms=FAR)
    keys = [f"Counter/{n}" for n in on_b]
    heard = b.events.subscribe("alarm.paused", "alarm.resumed")
    bid = await a.bulk.start("pause_alarm", keys=keys, max_in_flight=20, reason="incident 7")
    batch = await a.bulk.wait(bid)
    assert (batch["status"], batch["done"], batch["failed"]) == ("done", len(keys), 0), batch
    for n in on_b:
        status = await b.alarm("Counter", n)
        assert status is not None and status.paused and status.state == "pending"
        assert status.next_attempt_ms == FAR  # held, not moved
    assert {k for k, _ in await b.operator_rows.paused()} == {("Counter", n) for n in on_b}
    assert set(b.scheduler.paused) == {("Counter", n) for n in on_b}
    assert not a.scheduler.paused
    assert sorted(objects(heard.drain(), "alarm.paused")) == sorted(keys)

    bid2 = await a.bulk.start("resume_alarm", keys=keys, max_in_flight=20,
                              reason="incident 7 over")
    batch = await a.bulk.wait(bid2)
    assert (batch["status"], batch["done"], batch["failed"]) == ("done", len(keys), 0), batch
    for n in on_b:
        status = await b.alarm("Counter", n)
        assert status is not None and not status.paused and status.next_attempt_ms == FAR
    assert not b.scheduler.paused and await b.operator_rows.paused(mine=False) == []
    assert sorted(objects(heard.drain(), "alarm.resumed")) == sorted(keys)
    for action, batch_id in (("pause_alarm", bid), ("resume_alarm", bid2)):
        rows = await audit_rows(a, action)
        assert sorted(r["target"] for r in rows) == sorted(keys)
        assert all(r["ok"] and r["detail"]["batch_id"] == batch_id for r in rows)


async def test_a_batch_left_by_a_node_that_stops_is_finished_by_one_still_running(
        node: NodeFactory) -> None:
    """a stops in the middle of its batch (one item at a time); b, running all along,
    takes the batch over once it sees a gone and finishes it: every item done once
    (one audit row per target), the rows before the stop written by a, the rest and
    the batch's own by b."""
    a = await node("a", lease_s=LEASE_S)
    b = await node("b", lease_s=LEASE_S)
    await balance(a, b)
    on_a, on_b = await dead_on_both(a, b, 200)
    bid = await a.bulk.start("rearm", DEAD, max_in_flight=1, at_ms=FAR)

    await under_way(a, bid, 20)
    await a.stop()
    left = await b.bulk.get(bid)
    assert left["status"] == "running" and 0 < left["done"] < 200, left

    async def finished() -> bool:
        return (await b.bulk.get(bid))["status"] not in ("running", "cancelling")
    await until(finished, within=4 * LEASE_S + 5, what="b finished a's batch")
    batch = await b.bulk.get(bid)
    assert (batch["status"], batch["done"], batch["failed"], batch["total"], batch["node"]) \
        == ("done", 200, 0, 200, "b"), batch
    assert await b.dead_letters() == []
    items = await audit_rows(b, "rearm")
    per_target = collections.Counter(r["target"] for r in items)
    assert set(per_target) == {f"Counter/{n}" for n in on_a + on_b}
    assert set(per_target.values()) == {1}, [t for t, c in per_target.items() if c > 1]
    by_node = collections.Counter(r["node"] for r in items)
    assert set(by_node) == {"a", "b"} and by_node["a"] >= left["done"], by_node
    (whole,) = await audit_rows(b, "bulk_rearm")
    assert (whole["target"], whole["node"], whole["detail"]["done"]) == (bid, "b", 200)


async def test_a_cancel_on_another_node_stops_the_batch_where_it_runs(
        node: NodeFactory) -> None:
    """b cancels a batch a runs: a's runner stops (nothing is done after the cancel),
    the batch ends cancelled once, with one audit row for it, and the counts add up."""
    a = await node("a")
    b = await node("b")
    await balance(a, b)
    await dead_on_both(a, b, 300)
    bid = await a.bulk.start("rearm", DEAD, max_in_flight=1, at_ms=FAR)

    await under_way(a, bid)
    answer = await b.bulk.cancel(bid, reason="wrong selection")
    assert answer["status"] in ("cancelling", "cancelled"), answer
    await until(lambda: bid not in a.bulk.runs.runners, what="a's runner ended")
    batch = await b.bulk.get(bid)
    assert batch["status"] == "cancelled" and batch["left"] == 0, batch
    assert batch["done"] + batch["cancelled"] == 300 and batch["cancelled"] > 0, batch
    assert batch["done"] < 300 - 50  # stopped soon after the cancel, not run through
    items = await audit_rows(b, "rearm")
    assert len(items) == batch["done"] and len({r["target"] for r in items}) == batch["done"]
    assert len(await b.dead_letters()) == batch["cancelled"]
    (whole,) = await audit_rows(b, "bulk_rearm")
    assert (whole["target"], whole["detail"]["status"]) == (bid, "cancelled")
    assert (whole["detail"]["done"], whole["detail"]["cancelled"]) == \
        (batch["done"], batch["cancelled"])
    # Given on b, the reason reaches a's runner, which writes the batch's end.
    assert whole["detail"]["cancel_reason"] == "wrong selection"
    assert batch["cancel_reason"] == "wrong selection"


async def test_a_node_taken_for_gone_gives_up_the_batch_taken_from_it(
        node: NodeFactory) -> None:
    """a's row ages (as when a stalls past its lease) while its batch runs: b takes the
    batch over, and a, running still, sees that in the batch's row before its next
    group and stops; b finishes. One batch row, b's, and each item done once: a write
    of a's made after the takeover keeps nothing."""
    a = await node("a")
    b = await node("b")
    await balance(a, b)
    on_a, on_b = await dead_on_both(a, b, 300)
    bid = await a.bulk.start("rearm", DEAD, max_in_flight=1, at_ms=FAR)

    await under_way(a, bid)
    async with backend_of(b)._require_pool().acquire() as conn:
        await conn.execute("UPDATE alarmtop.nodes SET renewed_ms = 0 WHERE node_id = 'a'")
    await b.bulk.resume_open()  # what b's watcher does when it sees a gone
    assert (await b.bulk.get(bid))["node"] == "b" and bid in b.bulk.runs.runners
    await until(lambda: bid not in a.bulk.runs.runners, what="a gave the batch up")
    batch = await b.bulk.wait(bid)
    assert (batch["status"], batch["failed"], batch["left"], batch["node"]) == \
        ("done", 0, 0, "b"), batch
    assert await b.dead_letters() == []
    per_target = collections.Counter(r["target"] for r in await audit_rows(b, "rearm"))
    assert set(per_target) == {f"Counter/{n}" for n in on_a + on_b}
    twice = [t for t, c in per_target.items() if c > 1]
    assert twice == []  # a's group in flight at the takeover was refused, not done twice
    (whole,) = await audit_rows(b, "bulk_rearm")  # a never ended it
    assert (whole["target"], whole["node"]) == (bid, "b")


async def test_items_a_stopping_node_cannot_run_are_left_for_the_next_owner(
        node: NodeFactory, clock: VirtualClock) -> None:
    """a's stop waits on a stuck alarm handler while its batch runner goes on: a node
    that stops refuses the runtime's own actions ("not running"), and an item refused
    so did not fail, it did not run. a's runner stops with the items left open, and b
    finishes them once a is gone: none failed, each done once."""
    gate, started = asyncio.Event(), asyncio.Event()
    env = {"gate": gate, "started": started, "clock": clock}
    a = await node("a", Counter, Stuck, lease_s=LEASE_S, env=env)
    b = await node("b", Counter, Stuck, lease_s=LEASE_S, env=env)
    await balance(a, b)
    _, on_b = split(a, b, 300)
    await write_alarms(b, on_b, AlarmState.DEAD)
    await a.get("Stuck", name_on(a, "Stuck")).arm(START_MS + 1000)
    await clock.advance(1)
    await until(started.is_set, what="the stuck alarm running on a")
    keys = [f"Counter/{n}" for n in on_b]  # every item goes through b, one by one
    bid = await a.bulk.start("rearm", keys=keys, max_in_flight=1, at_ms=FAR)

    await under_way(a, bid)
    # No drain: a stopping node lets its attempts in flight end first (up to drain_s),
    # still running, and this batch would finish meanwhile; the refusals come after.
    backend_of(a).drain_s = 0.0
    stopping = asyncio.create_task(a.stop())
    try:
        await until(lambda: bid not in a.bulk.runs.runners, what="a's runner ended")
        assert not stopping.done()  # still held up by the stuck handler
        left = await a.bulk.get(bid)
        assert (left["status"], left["failed"]) == ("running", 0), left
        assert 0 < left["done"] < len(keys)
    finally:
        gate.set()
        await stopping

    async def finished() -> bool:
        return (await b.bulk.get(bid))["status"] not in ("running", "cancelling")
    await until(finished, within=4 * LEASE_S + 5, what="b finished a's batch")
    batch = await b.bulk.get(bid)
    assert (batch["status"], batch["done"], batch["failed"], batch["node"]) == \
        ("done", len(keys), 0, "b"), batch
    per_target = collections.Counter(r["target"] for r in await audit_rows(b, "rearm"))
    assert per_target == collections.Counter(keys)


async def test_a_shard_moving_under_a_group_does_not_stop_the_batch(
        node: NodeFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """b has joined and a's next lease round hands b one of a's shards, between a
    group's read of its records and its write (fenced out: nothing of it is kept).
    The batch goes on, that shard's items through b once b holds it, and ends done,
    each item once."""
    a = await node("a")
    b = await node("b")  # holds nothing yet: a's lease rounds will offer it shards
    assert len(backend_of(a).epochs) == SHARDS and not backend_of(b).epochs
    names = [f"j{i:04d}" for i in range(200)]
    await write_alarms(a, names, AlarmState.DEAD)
    heard = b.events.subscribe("alarm.rearmed")
    store, moved, handed = a.operator_rows, [], asyncio.Event()
    read = store.get_many

    async def read_then_move(keys: Any) -> Any:
        got = await read(keys)
        if not moved:  # the first group: the shard of its first item goes to b
            moved.append(backend_of(a).shard_of(keys[0]))
            await backend_of(a).hand_over(moved, "b")
            handed.set()
        return got
    monkeypatch.setattr(store, "get_many", read_then_move)
    bid = await a.bulk.start("rearm", DEAD, max_in_flight=10, at_ms=FAR)
    # Once the hand-over is written (not when it starts: b's round would find nothing),
    # and a no longer holds it (the offer is written before it lets go).
    await until(lambda: handed.is_set() and moved[0] not in backend_of(a).epochs,
                what="a shard handed over under a group")
    await backend_of(b).keep_leases_once()  # b takes the shard offered to it
    assert set(backend_of(b).epochs) == set(moved)
    batch = await a.bulk.wait(bid)
    assert (batch["status"], batch["done"], batch["failed"], batch["left"]) == \
        ("done", 200, 0, 0), batch
    assert await a.dead_letters() == []
    per_target = collections.Counter(r["target"] for r in await audit_rows(a, "rearm"))
    assert per_target == collections.Counter(f"Counter/{n}" for n in names)
    went = {f"Counter/{n}" for n in names if backend_of(a).shard_of(("Counter", n)) == moved[0]}
    assert went and set(objects(heard.drain(), "alarm.rearmed")) == went  # through b


async def test_a_takeover_cut_short_is_tried_again(node: NodeFactory,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """b's first look at the open batches after a goes fails (PostgreSQL away for a
    moment): b still takes a's batch over, at its next look."""
    a = await node("a", lease_s=LEASE_S)
    b = await node("b", lease_s=LEASE_S)
    await balance(a, b)
    await dead_on_both(a, b, 200)
    store, looks = b.operator_rows, []
    open_batches = store.open_batches

    async def first_fails() -> Any:
        looks.append(1)
        if len(looks) == 1:
            raise StorageError("connection lost", "postgresql")
        return await open_batches()
    monkeypatch.setattr(store, "open_batches", first_fails)
    bid = await a.bulk.start("rearm", DEAD, max_in_flight=1, at_ms=FAR)

    await under_way(a, bid)
    await a.stop()

    async def finished() -> bool:
        return (await b.bulk.get(bid))["status"] not in ("running", "cancelling")
    await until(finished, within=4 * LEASE_S + 5, what="b finished a's batch")
    assert len(looks) >= 2
    batch = await b.bulk.get(bid)
    assert (batch["status"], batch["done"], batch["failed"], batch["node"]) == \
        ("done", 200, 0, "b"), batch


async def test_a_write_for_a_batch_another_node_took_keeps_nothing(node: NodeFactory) -> None:
    """The batch fence, directly: once b has taken a's batch, a's item write and a's end
    of it are refused in their transaction (no item, count or audit row kept); a late
    "cancelling" mark never reopens a batch that has ended."""
    from alarmtop.core.model.bulk_items import ItemOutcome
    a = await node("a")
    b = await node("b")
    row = {"id": "b-fenced", "action": "rearm", "kind": "alarms", "status": "running",
           "actor": "test", "role": None, "reason": None, "note": None, "throttle": 1,
           "params": {}, "total": 2, "done": 0, "failed": 0, "cancelled": 0,
           "created_ms": 1, "updated_ms": 1, "ended_ms": None, "node": None,
           "prep_after": None}
    mine, theirs = a.operator_rows, b.operator_rows
    await mine.create_batch(row, ["Counter/x", "Counter/y"])
    assert (await mine.get_batch("b-fenced") or {})["node"] == "a"
    assert await theirs.claim_batch("b-fenced", "b", "a")
    entry = {"at_ms": 2, "actor": "test", "action": "rearm", "target": "Counter/x",
             "detail": {"batch_id": "b-fenced"}}
    with pytest.raises(StorageError, match="run by node b now"):
        await mine.submit(mine.items_write("b-fenced", [ItemOutcome(1, "done")], 2, [entry]))
    with pytest.raises(StorageError, match="run by node b now"):
        await mine.submit(mine.finish_write("b-fenced", "done", 3))
    batch = await theirs.get_batch("b-fenced")
    assert batch is not None and (batch["status"], batch["done"]) == ("running", 0)
    assert [r for r in await b.audit.list() if r.get("target") == "Counter/x"] == []
    await theirs.submit(theirs.items_write("b-fenced", [ItemOutcome(1, "done"),
                                                        ItemOutcome(2, "done")], 4))
    await theirs.submit(theirs.finish_write("b-fenced", "done", 5))
    await mine.submit(mine.finish_write("b-fenced", "cancelling", 6))  # a late cancel
    batch = await theirs.get_batch("b-fenced")
    assert batch is not None and (batch["status"], batch["done"]) == ("done", 2)
