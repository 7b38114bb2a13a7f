"""Two or three nodes in one process, on one real PostgreSQL: who owns what, and an
object's events reaching its owner from any node."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from alarmtop.core import Runtime, VirtualClock
from alarmtop.core.durable import DurableContext, durable_execution
from alarmtop.core.fleet.links import NodeClient
from alarmtop.core.model.errors import InvalidArgument, NodeUnreachable
from alarmtop.core.model.operations import EXECUTION_CLASS
from tests.fleet.conftest import (
    SHARDS,
    Counter,
    NodeFactory,
    backend_of,
    balance,
    cut_off,
    name_on,
    until,
)


async def test_nodes_settle_on_a_fair_share_and_every_shard_is_held(node: NodeFactory) -> None:
    a = await node("a")
    assert len(backend_of(a).epochs) == SHARDS  # alone, it takes everything
    b = await node("b")
    c = await node("c")
    await balance(a, b, c)
    held = [set(backend_of(rt).epochs) for rt in (a, b, c)]
    assert sorted(len(h) for h in held) == [2, 3, 3]
    assert set().union(*held) == set(range(SHARDS))
    assert not (held[0] & held[1] or held[1] & held[2] or held[0] & held[2])
    listed = {n["node_id"]: n for n in await b.nodes()}
    assert set(listed) == {"a", "b", "c"} and all(n["up"] for n in listed.values())
    assert sum(n["shards"] for n in listed.values()) == SHARDS


async def test_a_call_from_any_node_runs_on_the_owner(node: NodeFactory) -> None:
    a = await node("a")
    b = await node("b")
    await balance(a, b)
    name = name_on(b)
    assert await a.get("Counter", name).add(2) == 2
    assert await b.get("Counter", name).add(3) == 5
    assert ("Counter", name) in b.resident_objects()
    assert ("Counter", name) not in a.resident_objects()
    # The owner's error reaches the caller with its own type and message.
    with pytest.raises(ValueError, match="bad input"):
        await a.get("Counter", name).fail("bad input")


async def test_an_alarm_set_through_another_node_fires_on_the_owner(
        node: NodeFactory, clock: VirtualClock) -> None:
    a = await node("a")
    b = await node("b")
    await balance(a, b)
    name = name_on(b)
    await a.get("Counter", name).arm(5_000)
    await clock.advance(6)
    await until(lambda: _fired(a, name), what="the alarm fired")
    statuses = {(s.object_class, s.object_name) for s in await a.alarms()}
    assert ("Counter", name) not in statuses  # done: no alarm left, seen from any node


async def _fired(rt: object, name: str) -> bool:
    from alarmtop.core import Runtime
    assert isinstance(rt, Runtime)
    return bool(await rt.get("Counter", name).fired() == 1)


async def test_operator_actions_run_on_the_owner(node: NodeFactory, clock: VirtualClock) -> None:
    a = await node("a")
    b = await node("b")
    await balance(a, b)
    name = name_on(b)
    await a.get("Counter", name).break_alarm()
    await a.get("Counter", name).arm(0)
    await clock.advance(200)  # the default ladder: 126 s of retries, then a dead letter
    dead = [s for s in await a.dead_letters() if s.object_name == name]
    assert dead and dead[0].retry_count > 0
    rearmed = await a.rearm("Counter", name)
    assert rearmed.state == "pending" and rearmed.retry_count == 0
    status = await b.alarm("Counter", name)
    assert status is not None and status.state == "pending"


async def test_a_clean_stop_hands_its_shards_over(node: NodeFactory) -> None:
    a = await node("a")
    b = await node("b")
    await balance(a, b)
    name = name_on(b)
    await a.get("Counter", name).add(1)
    await b.stop()
    await backend_of(a).keep_leases_once()
    assert len(backend_of(a).epochs) == SHARDS
    assert await a.get("Counter", name).add(1) == 2  # its storage moved with it
    assert {n["node_id"]: n["up"] for n in await a.nodes()} == {"a": True, "b": False}


async def test_a_shard_without_a_live_owner_is_claimed_by_the_caller(
        node: NodeFactory) -> None:
    a = await node("a")
    b = await node("b")
    await balance(a, b)
    name = name_on(b)
    await a.get("Counter", name).add(1)
    # b vanishes without handing over (as a crash would): its node row says stopped
    # only once its leases ran out; here the row is aged by hand.
    await b.stop()
    async with backend_of(a)._require_pool().acquire() as conn:
        await conn.execute("UPDATE alarmtop.shards SET owner = 'b', expires_ms = 0 "
                           "WHERE owner IS NULL")
    shard = backend_of(a).shard_of(("Counter", name))
    assert shard not in backend_of(a).epochs
    assert await a.get("Counter", name).add(1) == 2
    assert shard in backend_of(a).epochs


async def test_a_restarted_node_fences_its_earlier_run_out(node: NodeFactory) -> None:
    a = await node("a")
    first = await node("b")
    await balance(a, first)
    name = name_on(first)
    await a.get("Counter", name).add(1)
    old_epochs = dict(backend_of(first).epochs)
    # A second process under the same id (a restart before the leases ran out, the
    # earlier run not answering any more) takes the id's shards with new epochs: the
    # earlier run can no longer commit.
    await cut_off(first)
    second = await node("b")
    assert set(backend_of(second).epochs) == set(old_epochs)
    assert all(backend_of(second).epochs[s] > e for s, e in old_epochs.items())
    with pytest.raises(Exception, match="no longer holds shard"):
        await first.get("Counter", name).add(1)
    assert await a.get("Counter", name).add(1) == 2  # the write above kept nothing


async def test_a_node_refuses_to_start_as_a_node_that_runs(
        node: NodeFactory, pg_dsn: str, clock: VirtualClock, tmp_path: Path) -> None:
    """The same node id given to a second process by mistake: it refuses to start,
    saying which node answers under that id, and takes nothing from it."""
    from alarmtop.core import PostgresBackend
    a = await node("a")
    b = await node("b")
    await balance(a, b)
    epochs = dict(backend_of(b).epochs)
    twin = Runtime(tmp_path / "twin", clock=clock,
                   backend=PostgresBackend(pg_dsn, node_id="b", shards=SHARDS))
    twin.register(Counter)
    address = backend_of(b).address
    with pytest.raises(InvalidArgument, match=f"node id 'b' is in use: .* answers at {address}"):
        await twin.start()
    await backend_of(b).keep_leases_once()
    assert backend_of(b).epochs == epochs and not backend_of(b).displaced
    assert await b.get("Counter", name_on(b)).add(1) == 1


async def test_a_node_whose_id_another_process_took_over_lets_go_and_says_so(
        node: NodeFactory, caplog: pytest.LogCaptureFixture) -> None:
    """Two processes that started as one node at the same moment (neither running
    yet when the other looked): the one whose row the other took over holds nothing
    any more, claims nothing, and says why, instead of taking shards back at every
    lease round."""
    a = await node("a")
    b = await node("b")
    await balance(a, b)
    await cut_off(b)  # so the twin's start sees no node answering as b
    twin = await node("b")
    assert backend_of(twin).epochs
    held = dict(backend_of(twin).epochs)
    for _ in range(3):
        await backend_of(b).keep_leases_once()
        await backend_of(twin).keep_leases_once()
    assert backend_of(b).epochs == {} and backend_of(twin).epochs == held
    assert "another process now runs as node b" in caplog.text
    assert backend_of(b).displaced
    name = name_on(twin)
    assert await a.get("Counter", name).add(1) == 1  # reaches the twin, its owner


async def test_a_forwarded_call_takes_its_owner_from_the_lease_round(
        node: NodeFactory) -> None:
    """Another node's lease as the last round read it names the owner: forwarding a
    call reads no shard row (here with the pool away, it could not)."""
    a = await node("a")
    b = await node("b")
    await balance(a, b)
    name = name_on(b)
    backend = backend_of(a)
    pool, backend._pool = backend._pool, None
    try:
        assert await backend.owner_of(("Counter", name)) == ("b", backend_of(b).address)
    finally:
        backend._pool = pool
    assert await a.get("Counter", name).add(2) == 2


async def test_a_call_sent_to_an_owner_as_last_seen_reaches_the_new_one(
        node: NodeFactory) -> None:
    """The shard moved (b gave it to a new node c) since a's last lease round: b
    answers that it does not hold it, a reads the shard's row again and reaches c.
    Nothing ran twice."""
    a = await node("a")
    b = await node("b")
    await balance(a, b)
    before = set(backend_of(b).epochs)
    c = await node("c")
    for _ in range(4):  # a's round not among them: its view of b's shards is old
        await backend_of(b).keep_leases_once()
        await backend_of(c).keep_leases_once()
    moved = before & set(backend_of(c).epochs)
    assert moved
    name = next(f"obj-{i}" for i in range(10_000)
                if backend_of(c).shard_of(("Counter", f"obj-{i}")) in moved)
    assert backend_of(a)._owners[backend_of(a).shard_of(("Counter", name))][0] == "b"
    assert await a.get("Counter", name).add(1) == 1
    assert await c.get("Counter", name).add(1) == 2


@durable_execution(name="greet")
async def greet(event: dict[str, str], ctx: DurableContext) -> str:
    hello = await ctx.step(lambda: f"hello {event['who']}", name="hello")
    cb = await ctx.create_callback("approve")
    verdict = await cb.result()
    return f"{hello}: {verdict}"


async def test_an_execution_started_anywhere_runs_on_its_owner(
        node: NodeFactory, clock: VirtualClock) -> None:
    a = await node("a")
    b = await node("b")
    for rt in (a, b):
        rt.register_execution(greet)
    await balance(a, b)
    eid = name_on(b, cls=EXECUTION_CLASS, prefix="run")
    await a.executions.start("greet", {"who": "fleet"}, execution_id=eid)
    await clock.advance(1)
    await until(lambda: _status(a, eid, "suspended"), what="the execution waits")
    cb = (await a.executions.describe(eid))["callbacks"][0]["callback_id"]
    await a.executions.send_callback_success(cb, "yes")
    await clock.advance(1)
    await until(lambda: _status(b, eid, "succeeded"), what="the execution succeeded")
    assert (await a.executions.describe(eid))["result"] == "hello fleet: yes"
    assert (EXECUTION_CLASS, eid) in b.resident_objects()
    assert (EXECUTION_CLASS, eid) not in a.resident_objects()


async def test_an_executions_log_is_fenced_by_its_objects_shard(
        node: NodeFactory, clock: VirtualClock) -> None:
    """A node that lost the shard of an execution (here: to a restart under its id)
    can no longer write that execution's log: its checkpoint keeps nothing."""
    a = await node("a")
    first = await node("b")
    for rt in (a, first):
        rt.register_execution(greet)
    await balance(a, first)
    eid = name_on(first, cls=EXECUTION_CLASS, prefix="run")
    await a.executions.start("greet", {"who": "fleet"}, execution_id=eid)
    await clock.advance(1)
    await until(lambda: _status(a, eid, "suspended"), what="the execution waits")
    store = backend_of(first).execution_log
    record = await store.get(eid)
    assert record is not None
    await cut_off(first)
    second = await node("b")
    second.register_execution(greet)
    stale = record.__class__.from_dict({**record.to_dict(), "status": "failed"})
    with pytest.raises(Exception, match="no longer holds shard"):
        await store.checkpoint(eid, stale)
    assert (await a.executions.describe(eid))["status"] == "suspended"


async def _status(rt: object, eid: str, status: str) -> bool:
    from alarmtop.core import Runtime
    assert isinstance(rt, Runtime)
    return bool((await rt.executions.describe(eid))["status"] == status)


async def test_a_node_refuses_a_caller_without_the_cluster_secret(node: NodeFactory) -> None:
    a = await node("a")
    address = backend_of(a).address
    assert address is not None
    intruder = NodeClient(address, "intruder", "not-the-secret")
    try:
        with pytest.raises(NodeUnreachable):
            await intruder.request("call", timeout_s=5, cls="Counter", name="x",
                                   method="add", args=[1], kwargs={})
    finally:
        await intruder.close()


async def test_a_node_refuses_to_start_with_another_shard_count(
        node: NodeFactory, pg_dsn: str, clock: VirtualClock, tmp_path: object) -> None:
    from alarmtop.core import PostgresBackend, Runtime
    await node("a")
    rt = Runtime(clock=clock, backend=PostgresBackend(pg_dsn, node_id="z", shards=SHARDS * 2))
    with pytest.raises(InvalidArgument, match=f"set up with {SHARDS} shards"):
        await rt.start()


async def test_a_cron_job_runs_on_one_node_per_fire(node: NodeFactory, clock: VirtualClock
                                                    ) -> None:
    """Every node keeps the schedule; each fire runs once in the fleet."""
    a = await node("a")
    b = await node("b")
    ran: list[tuple[str, int]] = []
    for rt, name in ((a, "a"), (b, "b")):
        rt.cron("* * * * *", lambda name=name: ran.append((name, clock.now_ms())), name="tick")
    await clock.advance(60 * 5 + 1)
    await until(lambda: len(ran) >= 5, what="five fires")
    await asyncio.sleep(0.1)  # a second run of one fire, if any, would land by now
    fires = [at for _, at in ran]
    assert len(fires) == 5 and len(set(fires)) == 5, ran


async def test_the_dead_letter_reminder_is_said_once_for_the_fleet(
        node: NodeFactory, clock: VirtualClock, caplog: pytest.LogCaptureFixture) -> None:
    a = await node("a", sweep_interval=30.0)
    b = await node("b", sweep_interval=30.0)
    await balance(a, b)
    name = name_on(b)
    await a.get("Counter", name).break_alarm()
    await a.get("Counter", name).arm(0)
    await clock.advance(200)
    assert [s for s in await a.dead_letters() if s.object_name == name]
    caplog.clear()
    caplog.set_level(logging.WARNING, logger="alarmtop")
    await clock.advance(30 * 4)
    said = [r for r in caplog.records if getattr(r, "event", None) == "alarm.dead_letters"
            or "dead letter" in r.getMessage()]
    assert 3 <= len(said) <= 5, [r.getMessage() for r in said]


async def test_faults_are_the_fleets(node: NodeFactory, clock: VirtualClock) -> None:
    """Injected on one node, a fault applies where its target runs, is listed by every
    node, and a clear from any node ends it everywhere."""
    a = await node("a")
    b = await node("b")
    await balance(a, b)
    name = name_on(b)
    target = f"Counter/{name}"
    fid = a.faults.inject(target, "alarm_raise", times=None)
    assert fid.endswith("@a")
    await a.faults.flush()
    await until(lambda: any(f["id"] == fid for f in b.faults.list()), what="b sees the fault")
    await a.get("Counter", name).arm(0)
    await clock.advance(1)
    await until(lambda: any(f["id"] == fid and f["triggered"] >= 1 for f in b.faults.list()),
                what="the fault applied on the owner")
    status = await a.alarm("Counter", name)
    assert status is not None and status.retry_count >= 1  # the owner's attempt failed
    # Used on b, the count reaches a.
    await b.faults.flush()
    await until(lambda: any(f["id"] == fid and f["triggered"] >= 1 for f in a.faults.list()),
                what="a sees the fault used")
    other = b.faults.inject(target, "alarm_delay", times=1, seconds=5)
    assert other.endswith("@b") and other != fid
    a.faults.clear(fid)
    await a.faults.flush()
    await until(lambda: all(f["id"] != fid for f in b.faults.list()), what="cleared on b")
    await until(lambda: any(f["id"] == other for f in a.faults.list()), what="a sees b's")
