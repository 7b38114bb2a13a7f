"""Plain checkpoints on PostgreSQL go as one statement with their fence inside
(`MergedCheckpoints.alone`): what that statement must get right, on a real server."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from alarmtop.core import Runtime, VirtualClock
from alarmtop.core.durable import DurableContext, durable_execution
from alarmtop.core.model.alarm_policy import AlarmRecord, AlarmState
from alarmtop.core.model.errors import LeaseLost
from alarmtop.core.model.operations import (
    EXECUTION_CLASS,
    ExecutionRecord,
    ExecutionStatus,
    OperationRecord,
    OpStatus,
    OpType,
)
from alarmtop.core.storage.postgres.execution_log import MergedCheckpoints, PgExecutionLog
from tests.fleet.conftest import NodeFactory, backend_of, balance, cut_off, name_on, until


@durable_execution(name="waits")
async def waits(event: dict[str, str], ctx: DurableContext) -> str:
    cb = await ctx.create_callback("approve")
    return str(await cb.result())


def nap(due_ms: int) -> OperationRecord:
    return OperationRecord("w1", OpType.WAIT, "Wait", "nap", None, OpStatus.STARTED,
                           scheduled_end_ms=due_ms)


async def suspended(rt: Runtime, eid: str, clock: VirtualClock) -> None:
    await rt.executions.start("waits", {}, execution_id=eid)
    await clock.advance(1)

    async def waiting() -> bool:
        return bool((await rt.executions.describe(eid))["status"] == "suspended")
    await until(waiting, what="the execution waits")


async def two_nodes(node: NodeFactory) -> tuple[Runtime, Runtime]:
    """Nodes a and b, each holding its share of the shards."""
    a = await node("a")
    b = await node("b")
    for rt in (a, b):
        rt.register_execution(waits)
    await balance(a, b)
    return a, b


async def waiting_run(node: NodeFactory, clock: VirtualClock, on: Runtime | None = None,
                      via: Runtime | None = None
                      ) -> tuple[Runtime, str, PgExecutionLog, ExecutionRecord]:
    """An execution on `on`'s shards (a node of its own by default) suspended on a
    callback, started through `via` (default: `on`); its owner, id, store and record."""
    if on is None:
        on = await node("a")
        on.register_execution(waits)
    eid = name_on(on, cls=EXECUTION_CLASS, prefix="run")
    await suspended(via or on, eid, clock)
    store = backend_of(on).execution_log
    record = await store.get(eid)
    assert record is not None
    return on, eid, store, record


Alone = tuple[int, int, int, str]  # checkpoints, alarm rows, alarm deletes, outcome


def watch_alone(monkeypatch: pytest.MonkeyPatch) -> list[Alone]:
    """Each batch written as one statement, from now on."""
    seen: list[Alone] = []
    real = MergedCheckpoints.alone

    async def counted(self: MergedCheckpoints, conn: Any, writes: Any, fence: Any,
                      rows: Any = (), dels: Any = ()) -> bool:
        try:
            out = await real(self, conn, writes, fence, rows, dels)
        except Exception as exc:
            seen.append((len(writes), len(rows), len(dels), type(exc).__name__))
            raise
        seen.append((len(writes), len(rows), len(dels), "ok"))
        return out
    monkeypatch.setattr(MergedCheckpoints, "alone", counted)
    return seen


async def test_two_checkpoints_of_one_batch_keep_the_last_of_each_row(
        node: NodeFactory, clock: VirtualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same op, mark and timer in two checkpoints of one statement: the later ones
    win (an upsert may touch a row once per statement), both history events land, and
    the op's earlier timer is replaced, not kept beside the new one."""
    _, eid, store, record = await waiting_run(node, clock)
    last = await store.max_event_id(eid)
    ev = [{"EventId": last + i, "EventType": "WaitStarted", "Id": "w1"} for i in (1, 2)]
    statements = watch_alone(monkeypatch)
    first = store.checkpoint(eid, record, [nap(10_000)], [ev[0]], marks={"k": "1"})
    second = store.checkpoint(eid, record, [nap(20_000)], [ev[1]], marks={"k": "2"})
    await asyncio.gather(first, second)
    assert statements == [(2, 0, 0, "ok")]  # one statement, not a failure retried one by one
    ops = {op.id: op for op in await store.operations(eid)}
    assert ops["w1"].scheduled_end_ms == 20_000
    assert [e["EventId"] for e in await store.history(eid, after=last)] == [last + 1, last + 2]
    assert await store.marks(eid) == {"k": "2"}
    timers = [t for t in await store.timers(execution_id=eid) if t["op_id"] == "w1"]
    assert [(t["kind"], t["due_ms"]) for t in timers] == [("wait", 20_000)]


async def test_a_plain_checkpoint_for_a_shard_lost_keeps_nothing(
        node: NodeFactory, clock: VirtualClock) -> None:
    a, first = await two_nodes(node)
    _, eid, store, record = await waiting_run(node, clock, on=first, via=a)
    await cut_off(first)
    await node("b")  # a restart under the same id takes the shards with new epochs
    with pytest.raises(LeaseLost, match="no longer holds shard"):
        await store.checkpoint(eid, record, [nap(30_000)], marks={"k": "stale"})
    last = await store.max_event_id(eid)
    with pytest.raises(LeaseLost, match="no longer holds shard"):  # a step's op alone
        await store.checkpoint(eid, None, [step(9)], [{"EventId": last + 1, "Id": "s9",
                                                       "EventType": "StepSucceeded"}])
    assert not {"w1", "s9"} & {op.id for op in await store.operations(eid)}
    assert await store.max_event_id(eid) == last
    assert await store.marks(eid) == {}


def step(i: int) -> OperationRecord:
    return OperationRecord(f"s{i}", OpType.STEP, "Step", f"s{i}", None, OpStatus.SUCCEEDED)


async def test_a_node_busy_with_plain_checkpoints_still_sees_other_nodes_counts(
        node: NodeFactory, clock: VirtualClock) -> None:
    """Plain checkpoints move no counter, so their batches read none back; the counts
    other nodes change are still read at least every second while the node is busy."""
    a, b = await two_nodes(node)
    _, eid, store, _ = await waiting_run(node, clock, on=a)
    before = a.backend.alarm_rows.counters().alarms.get("dead", 0)
    await b.backend.database.write([
        AlarmRecord("Counter", name_on(b, prefix=f"d{i}-"), 1, AlarmState.DEAD, 6, None, "x")
        for i in range(3)])
    i = 0

    async def seen() -> bool:
        nonlocal i
        i += 1
        await store.checkpoint(eid, None, [step(i)], [])  # never idle for a second
        return a.backend.alarm_rows.counters().alarms.get("dead", 0) == before + 3
    await until(seen, what="b's dead letters counted on a")


async def test_a_failed_counters_read_is_made_again_by_the_next_batch(
        node: NodeFactory, clock: VirtualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """`counters()` counts every write whose future has completed: when the read after
    a write fails, the next batch reads again, even one of plain checkpoints."""
    from alarmtop.core.storage.postgres import alarm_rows
    a = await node("a")
    a.register_execution(waits)
    eid = name_on(a, cls=EXECUTION_CLASS, prefix="run")
    await suspended(a, eid, clock)
    store, db, rows = backend_of(a).execution_log, a.backend.database, a.backend.alarm_rows
    real, fail = alarm_rows.parse_counters, [1]

    def parse(rows: Any) -> Any:
        if fail[0]:
            fail[0] -= 1
            raise RuntimeError("statement timeout (simulated)")
        return real(rows)
    monkeypatch.setattr(alarm_rows, "parse_counters", parse)
    dead = rows.counters().alarms.get("dead", 0)
    await db.write([AlarmRecord("Counter", name_on(a, prefix="d"), 1, AlarmState.DEAD, 6,
                                 None, "x")])
    assert rows.counters().alarms.get("dead", 0) == dead  # that read failed
    await store.checkpoint(eid, None, [step(1)], [])
    assert rows.counters().alarms.get("dead", 0) == dead + 1



# -- a whole batch as one statement: an execution's start and end, alarm rows alone ----


@durable_execution(name="quick")
async def quick(x: int, ctx: DurableContext) -> int:
    return int(await ctx.step(lambda v: v + 1, x, name="inc"))


async def test_an_execution_start_and_end_go_as_one_statement_each(
        node: NodeFactory, clock: VirtualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its start (record, history and alarm), its steps and its end (alarm deleted,
    timers gone) each go as one statement, and what they leave is what a transaction
    of one statement per table left."""
    a = await node("a")
    a.register_execution(quick)
    batches = watch_alone(monkeypatch)
    eid = name_on(a, cls=EXECUTION_CLASS, prefix="q")
    executions = a.backend.alarm_rows.counters().executions.get("succeeded", 0)
    await a.executions.start("quick", 41, execution_id=eid)
    await clock.advance(1)

    async def done() -> bool:
        return bool((await a.executions.describe(eid))["status"] == "succeeded")
    await until(done, what="the execution ends")
    assert (1, 1, 0, "ok") in batches  # the start: its record and history with its alarm
    assert batches[-1] == (1, 0, 1, "ok")  # the end: its alarm deleted in the same one
    assert (await a.executions.describe(eid))["result"] == 42
    assert await a.backend.alarm_rows.get((EXECUTION_CLASS, eid)) is None
    assert [t for t in await backend_of(a).execution_log.timers(execution_id=eid)] == []
    history = await backend_of(a).execution_log.history(eid)
    assert history[0]["EventType"] == "ExecutionStarted"
    assert history[-1]["EventType"] == "ExecutionSucceeded"
    # The counters moved with it (read back after a batch that changed a status).
    assert a.backend.alarm_rows.counters().executions.get("succeeded", 0) == executions + 1


async def test_an_ended_executions_timers_are_gone_even_if_set_in_the_same_batch(
        node: NodeFactory, clock: VirtualClock) -> None:
    """A timer checkpointed and the execution's end in one batch: the end wins (the
    statement sees the rows as they were before it, so the new timer is not written)."""
    _, eid, store, record = await waiting_run(node, clock)
    await store.checkpoint(eid, None, [nap(40_000)], [])
    assert await store.timers(execution_id=eid) != []
    ended = dataclasses.replace(record, status=ExecutionStatus.FAILED)
    assert ended.finished
    first = store.checkpoint(eid, None, [nap(50_000)], [])
    second = store.checkpoint(eid, ended, [], [])
    await asyncio.gather(first, second)
    assert await store.timers(execution_id=eid) == []
    assert (await store.get(eid)).status is ExecutionStatus.FAILED  # type: ignore[union-attr]


async def test_a_checkpoint_after_an_end_in_one_batch_goes_in_a_transaction(
        node: NodeFactory, clock: VirtualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """After an execution's end in the same batch, a checkpoint of it would need the
    end's deletes to have happened: the batch goes the transaction's way, in order."""
    _, eid, store, record = await waiting_run(node, clock)
    ended = dataclasses.replace(record, status=ExecutionStatus.FAILED)
    alone = watch_alone(monkeypatch)
    first = store.checkpoint(eid, ended, [], [])
    second = store.checkpoint(eid, None, [nap(60_000)], [])
    await asyncio.gather(first, second)
    assert alone == []
    timers = [t for t in await store.timers(execution_id=eid) if t["op_id"] == "w1"]
    assert [t["due_ms"] for t in timers] == [60_000]  # written after the end, as in order


async def test_alarm_rows_alone_for_a_shard_lost_keep_nothing(
        node: NodeFactory, clock: VirtualClock) -> None:
    """Alarm rows without a checkpoint also go as one statement, fenced."""
    first = await node("b")
    name = name_on(first, prefix="lost")
    db, rows = first.backend.database, first.backend.alarm_rows
    await db.write([AlarmRecord("Counter", name, 5, AlarmState.PENDING, 0, None, None)])
    assert await rows.get(("Counter", name)) is not None
    await cut_off(first)
    await node("b")  # a restart under the same id takes the shards with new epochs
    with pytest.raises(LeaseLost, match="no longer holds shard"):
        await db.write([AlarmRecord("Counter", name, 9, AlarmState.PENDING, 0, None, None)])
    with pytest.raises(LeaseLost, match="no longer holds shard"):
        await db.write([], [("Counter", name)])
    kept = await rows.get(("Counter", name))
    assert kept is not None and kept.scheduled_ms == 5


async def test_an_objects_session_settings_do_not_reach_the_next_borrower(
        node: NodeFactory) -> None:
    """The pool no longer resets every connection it gets back (a round trip after
    each read): a connection an object's SQL ran on is reset by the object's store."""
    from alarmtop.core import DurableObject

    class Leaky(DurableObject):
        async def leak(self) -> None:
            await self.ctx.storage.sql.exec(
                "SELECT set_config('application_name', 'leaked', false)")

    a = await node("a", Leaky)
    for i in range(4):
        await a.get(Leaky, name_on(a, cls="Leaky", prefix=f"l{i}")).leak()
    pool = backend_of(a)._require_pool()
    held = [await pool.acquire() for _ in range(pool.get_size())]
    try:
        names = {await c.fetchval("SHOW application_name") for c in held}
    finally:
        for c in held:
            await pool.release(c)
    assert "leaked" not in names
