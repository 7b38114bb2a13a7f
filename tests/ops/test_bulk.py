"""Bulk actions (runtime.bulk) and the timers board (runtime.timers), on a real
backend and a VirtualClock."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from alarmtop.core import AlarmInfo, DurableObject, Runtime, VirtualClock
from alarmtop.core.durable import CallbackConfig, DurableContext, Duration, durable_execution
from alarmtop.core.model.alarm_policy import AlarmRecord, AlarmState
from alarmtop.core.model.errors import InvalidArgument
from tests.conftest import START_MS, RuntimeFactory

FAR = START_MS + 10 * 24 * 3600 * 1000  # re-armed for then: nothing fires during a test


class Job(DurableObject):
    async def arm(self, at_ms: int) -> None:
        await self.ctx.storage.set_alarm(at_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        self.env.append(self.ctx.id)


async def dead_letters(rt: Runtime, n: int, cls: str = "Job", error: str = "boom") -> None:
    """`n` dead letters, written as the runtime keeps them (its own records)."""
    recs = [AlarmRecord(cls, f"j{i:05d}", START_MS, AlarmState.DEAD, 6, None,
                        f"{error} {i}") for i in range(n)]
    await rt.backend.database.write(recs)


async def audit_rows(rt: Runtime) -> list[dict[str, Any]]:
    return await rt.audit.list(limit=100_000)


async def test_bulk_rearm_of_1000_dead_letters(make_runtime: RuntimeFactory) -> None:
    """All re-armed (fresh retry count, no object woken), 1,001 audit rows (each item
    and the batch), progress events, and never more than the throttle in flight."""
    fired: list[str] = []
    rt = await make_runtime(Job, env=fired)
    await dead_letters(rt, 1000)
    sub = rt.events.subscribe("bulk.")
    preview = await rt.bulk.preview({"kind": "alarms", "state": "dead"})
    assert preview["count"] == 1000 and preview["sample"][0] == "Job/j00000"
    bid = await rt.bulk.start("rearm", {"kind": "alarms", "state": "dead"},
                              max_in_flight=50, at_ms=FAR, reason="fixed the bug")
    batch = await rt.bulk.wait(bid)
    assert (batch["status"], batch["done"], batch["failed"], batch["left"]) == \
        ("done", 1000, 0, 0)
    assert (await rt.backend.alarm_rows.counts())["dead"] == 0
    status = await rt.alarm(Job, "j00999")
    assert status is not None and (status.state, status.retry_count,
                                   status.next_attempt_ms) == ("pending", 0, FAR)
    assert rt.resident_objects() == [] and fired == []
    rows = await audit_rows(rt)
    assert len(rows) == 1001
    items = [r for r in rows if r["action"] == "rearm"]
    assert len({r["target"] for r in items}) == 1000 and all(r["ok"] for r in items)
    (whole,) = [r for r in rows if r["action"] == "bulk_rearm"]
    assert whole["target"] == bid and whole["reason"] == "fixed the bug"
    events = sub.drain()
    kinds = [e.type for e in events]
    assert kinds[0] == "bulk.started" and kinds[-1] == "bulk.finished"
    progress = [e.data for e in events if e.type == "bulk.progress"]
    assert len(progress) >= 10
    assert [p["done"] for p in progress] == sorted(p["done"] for p in progress)
    assert progress[-1]["done"] == 1000 and progress[-1]["left"] == 0
    assert all(p["in_flight"] <= 50 for p in progress)
    assert events[-1].data["max_in_flight"] == 50  # the bound, reached and not passed


async def test_failures_carry_their_reasons(make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime(Job, env=[])
    await dead_letters(rt, 3)
    await rt.get(Job, "live").arm(FAR)
    bid = await rt.bulk.start("clear_dead_letter",
                              keys=["Job/j00000", "Job/live", "Job/nobody", "Job/j00001"])
    batch = await rt.bulk.wait(bid)
    assert (batch["status"], batch["done"], batch["failed"]) == ("failed", 2, 2)
    reasons = {f["key"]: f["error"] for f in batch["failures"]}
    assert "not a dead letter" in reasons["Job/live"]
    assert "no alarm" in reasons["Job/nobody"]
    assert await rt.alarm(Job, "j00000") is None and await rt.alarm(Job, "j00002") is not None


async def test_a_batch_survives_a_runtime_restart(make_runtime: RuntimeFactory) -> None:
    """Stopped halfway, the batch resumes at the next start and finishes: every item
    done once, each audited once."""
    rt = await make_runtime(Job, env=[])
    await dead_letters(rt, 2000)
    sub = rt.events.subscribe("bulk.progress")
    bid = await rt.bulk.start("rearm", {"kind": "alarms", "state": "dead", "class": "Job"},
                              max_in_flight=5, at_ms=FAR)
    await asyncio.wait_for(sub.get(), 30)
    await rt.stop()
    rt = await make_runtime(Job, env=[])
    half = await rt.bulk.get(bid)
    assert half["status"] == "running" and 0 < half["done"] < 2000
    batch = await rt.bulk.wait(bid)
    assert (batch["status"], batch["done"], batch["failed"], batch["total"]) == \
        ("done", 2000, 0, 2000)
    items = [r for r in await audit_rows(rt) if r["action"] == "rearm"]
    assert len(items) == 2000 and len({r["target"] for r in items}) == 2000
    assert (await rt.backend.alarm_rows.counts())["dead"] == 0


async def test_cancel_stops_a_batch(make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime(Job, env=[])
    await dead_letters(rt, 2000)
    sub = rt.events.subscribe("bulk.progress")
    bid = await rt.bulk.start("rearm", {"kind": "alarms", "state": "dead"}, max_in_flight=5,
                              at_ms=FAR)
    await asyncio.wait_for(sub.get(), 30)
    batch = await rt.bulk.cancel(bid)
    assert batch["status"] == "cancelled" and batch["left"] == 0
    assert batch["done"] + batch["cancelled"] == 2000 and batch["cancelled"] > 0
    assert (await rt.backend.alarm_rows.counts())["dead"] == batch["cancelled"]
    with pytest.raises(InvalidArgument, match="has ended"):
        await rt.bulk.cancel(bid)


class Busy(DurableObject):
    """Its alarm attempt holds the object's turn until the test lets go (`env` holds the
    gate and the clock), as a handler stuck on a slow downstream does."""

    async def arm(self, at_ms: int) -> None:
        await self.ctx.storage.set_alarm(at_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        await self.env["clock"].idle_wait(self.env["gate"].wait())


async def test_a_cancel_answers_while_an_item_waits_on_a_busy_object(
        make_runtime: RuntimeFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The item in flight waits for the object's turn: the cancel answers "cancelling"
    by its bound (an operator's command must not run past its deadline), says so in an
    event, and the batch ends cancelled once the item has, with the reason audited."""
    from alarmtop.core.ops.bulk import service
    monkeypatch.setattr(service, "CANCEL_ANSWER_S", 0.2)
    gate = asyncio.Event()
    env: dict[str, Any] = {"gate": gate}
    rt = await make_runtime(Busy, env=env)
    clock = env["clock"] = rt.clock
    assert isinstance(clock, VirtualClock)
    await rt.get(Busy, "b1").arm(START_MS + 1000)
    await clock.advance(1)
    status = await rt.alarm(Busy, "b1")
    assert status is not None and status.state == "running"
    sub = rt.events.subscribe("bulk.progress")
    bid = await rt.bulk.start("rearm", keys=["Busy/b1"], kind="alarms", at_ms=FAR)
    for _ in range(2000):  # until the item waits for the object's turn
        if (await rt.bulk.get(bid))["in_flight"] == 1:
            break
        await asyncio.sleep(0.001)
    answer = await rt.bulk.cancel(bid, reason="wrong selection")
    assert answer["status"] == "cancelling"
    assert "cancelling" in [ev.data.get("status") for ev in sub.drain()]
    gate.set()
    batch = await rt.bulk.wait(bid)
    assert batch["status"] == "cancelled"
    entry = [r for r in await audit_rows(rt) if r["action"] == "bulk_rearm"]
    assert len(entry) == 1 and entry[0]["detail"]["cancel_reason"] == "wrong selection"


@pytest.mark.parametrize("args, match", [
    ({"action": "explode", "selection": {"kind": "alarms"}}, "unknown bulk action"),
    ({"action": "rearm", "selection": {"kind": "alarms", "colour": "red"}},
     "unknown selection field"),
    ({"action": "rearm", "selection": {"kind": "alarms", "state": "sleepy"}},
     "selection state is one of"),
    ({"action": "rearm", "selection": {"kind": "alarms", "due_from_ms": 9, "due_to_ms": 1}},
     "swap them"),
    ({"action": "rearm", "selection": {"kind": "alarms"}, "keys": ["Job/a"]}, "not both"),
    ({"action": "rearm", "keys": ["no-slash"]}, "Class/name"),
    ({"action": "rearm", "keys": ["Job/a"], "max_in_flight": 0}, "throttle"),
    ({"action": "resolve", "keys": ["e1"]}, "needs a note"),
    ({"action": "rearm", "selection": {"kind": "alarms", "class": "Nobody"}},
     "matches nothing"),
])
async def test_bad_requests_are_refused_and_change_nothing(make_runtime: RuntimeFactory,
                                                           args: dict[str, Any],
                                                           match: str) -> None:
    rt = await make_runtime(Job, env=[])
    await dead_letters(rt, 3)
    with pytest.raises(InvalidArgument, match=match):
        await rt.bulk.start(**args)
    assert await rt.bulk.list() == []
    assert (await rt.backend.alarm_rows.counts())["dead"] == 3
    (row,) = await audit_rows(rt)  # the refusal, audited
    assert not row["ok"] and row["action"].startswith("bulk_")


async def test_pause_and_resume_in_bulk(make_runtime: RuntimeFactory,
                                        clock: VirtualClock) -> None:
    fired: list[str] = []
    rt = await make_runtime(Job, env=fired)
    for i in range(5):
        await rt.get(Job, f"p{i}").arm(START_MS + 1000)
    bid = await rt.bulk.start("pause", {"kind": "alarms", "name": "p"}, reason="deploy")
    assert (await rt.bulk.wait(bid))["done"] == 5
    await clock.advance(5)
    assert fired == []
    assert (await rt.bulk.preview({"kind": "alarms", "state": "paused"}))["count"] == 5
    bid = await rt.bulk.start("resume", {"kind": "alarms", "state": "paused"})
    assert (await rt.bulk.wait(bid))["done"] == 5
    await clock.advance(0.1)
    assert sorted(fired) == [f"p{i}" for i in range(5)]


@durable_execution(name="board_flow")
async def board_flow(event: Any, ctx: DurableContext) -> Any:
    await ctx.wait(Duration(30), name="cool_off")
    cb = await ctx.create_callback("approval", CallbackConfig(timeout=Duration(600)))
    return await cb.result()


async def test_the_board_lists_alarms_waits_and_callback_deadlines_together(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    rt = await make_runtime(Job, env=[])
    rt.register_execution(board_flow)
    await rt.get(Job, "soon").arm(START_MS + 10_000)
    await rt.get(Job, "held").arm(START_MS + 20_000)
    await rt.pause_alarm(Job, "held")
    await rt.get(Job, "late").arm(START_MS + 900_000)
    await rt.executions.start("board_flow", None, execution_id="w1")
    await rt.executions.start("board_flow", None, execution_id="w2")
    await clock.advance(0.01)
    await rt.executions.move_timer("w2", await _wait_op(rt, "w2"), "wait", by_ms=60_000)
    board = await rt.timers()
    got = [(r["kind"], r["target"], r["due_ms"] - START_MS, r["paused"]) for r in board["rows"]]
    assert got == [("alarm", "Job/soon", 10_000, False), ("alarm", "Job/held", 20_000, True),
                   ("wait", "w1", 30_000, False), ("wait", "w2", 90_000, False),
                   ("alarm", "Job/late", 900_000, False)]
    assert board["next"] is None
    first = await rt.timers(limit=2)
    rest = await rt.timers(limit=2, after=first["next"])
    assert [r["target"] for r in first["rows"] + rest["rows"]] == \
        ["Job/soon", "Job/held", "w1", "w2"]
    await clock.advance(31)  # w1's wait is over, it waits on its callback; soon fired
    board = await rt.timers()
    rows = {(r["kind"], r["target"]): r for r in board["rows"]}
    assert ("alarm", "Job/soon") not in rows
    assert rows[("callback_timeout", "w1")]["due_ms"] == START_MS + 30_000 + 600_000
    assert rows[("alarm", "Job/held")]["state"] == "overdue"  # due 11 s ago, not fired
    assert rows[("wait", "w2")]["state"] == "pending"


async def _wait_op(rt: Runtime, execution_id: str) -> str:
    (row,) = [r for r in await rt.executions.timers(execution_id=execution_id)
              if r["kind"] == "wait"]
    return str(row["op_id"])


async def test_firing_an_execution_wait_now(make_runtime: RuntimeFactory,
                                            clock: VirtualClock) -> None:
    rt = await make_runtime()
    rt.register_execution(board_flow)
    await rt.executions.start("board_flow", None, execution_id="f1")
    await clock.advance(0.01)
    out = await rt.executions.move_timer("f1", await _wait_op(rt, "f1"), "wait")
    assert out["due_ms"] == clock.now_ms()
    await clock.advance(0.01)
    kinds = [r["kind"] for r in await rt.executions.timers(execution_id="f1")]
    assert kinds == ["callback_timeout"]  # the wait fired at once: on to the callback
    with pytest.raises(InvalidArgument, match="no pending wait"):
        await rt.executions.move_timer("f1", "nope", "wait", by_ms=5)
    (row,) = [r for r in await audit_rows(rt) if r["action"] == "move_timer" and not r["ok"]]
    assert row["target"] == "f1"


async def test_a_runner_goes_on_when_storage_is_still_away_as_it_reads_its_row_again(
        make_runtime: RuntimeFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut short by storage, the runner reads its batch again before going on; when that
    read fails too (the outage lasts), it waits and tries again instead of stopping."""
    from alarmtop.core.model.errors import StorageError
    from alarmtop.core.ops.bulk import runner
    monkeypatch.setattr(runner, "RETRY_FIRST_S", 0.01)
    rt = await make_runtime(Job, env=[])
    await dead_letters(rt, 50)
    store = rt.bulk.store
    real_open, real_get = store.open_items, store.get_batch
    outage = [2]  # the first read of items fails, then the runner's read of its row

    async def open_items(*args: Any) -> Any:
        if outage[0] == 2:
            outage[0] = 1
            raise StorageError("the database is away (simulated)")
        return await real_open(*args)

    async def get_batch(batch_id: str) -> Any:
        if outage[0] == 1 and batch_id in rt.bulk.runs.runners:
            outage[0] = 0
            raise StorageError("the database is still away (simulated)")
        return await real_get(batch_id)
    monkeypatch.setattr(store, "open_items", open_items)
    monkeypatch.setattr(store, "get_batch", get_batch)
    bid = await rt.bulk.start("rearm", keys=[f"Job/j{i:05d}" for i in range(50)],
                              kind="alarms", at_ms=FAR)
    batch = await rt.bulk.wait(bid)
    assert outage == [0] and (batch["status"], batch["done"]) == ("done", 50)


async def test_a_runner_stopped_by_an_error_of_its_own_goes_on_and_says_why(
        make_runtime: RuntimeFactory, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """An error that is neither storage nor the fleet (a fault of alarmtop's own) does
    not leave the batch open with no runner, looking running until a restart: the
    runner says it in full and goes on after its pause, as a restart would."""
    from alarmtop.core.ops.bulk import runner
    monkeypatch.setattr(runner, "RETRY_FIRST_S", 0.01)
    rt = await make_runtime(Job, env=[])
    await dead_letters(rt, 50)
    store = rt.bulk.store
    real_open = store.open_items
    faults = [1]

    async def open_items(*args: Any) -> Any:
        if faults[0]:
            faults[0] = 0
            raise RuntimeError("a fault of the runner (simulated)")
        return await real_open(*args)
    monkeypatch.setattr(store, "open_items", open_items)
    bid = await rt.bulk.start("rearm", keys=[f"Job/j{i:05d}" for i in range(50)],
                              kind="alarms", at_ms=FAR)
    batch = await rt.bulk.wait(bid)
    assert faults == [0] and (batch["status"], batch["done"]) == ("done", 50)
    (said,) = [r for r in caplog.records if "stopped on an error" in r.getMessage()]
    assert said.exc_info is not None and "simulated" in str(said.exc_info[1])


def after_first_chunk(rt: Runtime, monkeypatch: pytest.MonkeyPatch,
                      then: Callable[[str], Awaitable[Any]]) -> None:
    """A selection's keys recorded 100 at a time, and `then(batch_id)` run right after
    the first chunk, while `start` is still recording the rest."""
    store = rt.bulk.store
    real = store.prepare_step
    chunks: list[str | None] = []

    async def step(batch_id: str, sel: Any, after: str | None, limit: int = 100) -> Any:
        chunks.append(after)
        out = await real(batch_id, sel, after, min(limit, 100))
        if len(chunks) == 1:
            await then(batch_id)
        return out
    monkeypatch.setattr(store, "prepare_step", step)


async def test_a_look_for_open_batches_leaves_one_still_being_started(
        make_runtime: RuntimeFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """While `start` records a selection's keys the batch is open with no runner yet: a
    look for open batches (at a node's start, or when a fleet node goes) must not start
    a second runner on it. Each item once, one batch row."""
    rt = await make_runtime(Job, env=[])
    await dead_letters(rt, 300)
    after_first_chunk(rt, monkeypatch, lambda _: rt.bulk.resume_open())
    bid = await rt.bulk.start("rearm", {"kind": "alarms", "state": "dead"}, at_ms=FAR)
    batch = await rt.bulk.wait(bid)
    assert (batch["status"], batch["total"], batch["done"]) == ("done", 300, 300)
    rows = await audit_rows(rt)
    assert len([r for r in rows if r["action"] == "rearm"]) == 300
    assert len([r for r in rows if r["action"] == "bulk_rearm"]) == 1


async def test_a_batch_cancelled_while_its_keys_are_recorded_runs_nothing(
        make_runtime: RuntimeFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    rt = await make_runtime(Job, env=[])
    await dead_letters(rt, 300)
    after_first_chunk(rt, monkeypatch,
                      lambda batch_id: rt.bulk.cancel(batch_id, reason="wrong selection"))
    bid = await rt.bulk.start("rearm", {"kind": "alarms", "state": "dead"}, at_ms=FAR)
    batch = await rt.bulk.wait(bid)
    assert (batch["status"], batch["done"], batch["left"]) == ("cancelled", 0, 0), batch
    assert len(await rt.dead_letters()) == 300  # none re-armed
    assert [r for r in await audit_rows(rt) if r["action"] == "rearm"] == []


async def test_an_item_whose_owner_is_not_reached_stays_open_and_is_done_on_the_retry(
        make_runtime: RuntimeFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not reaching an item's owner (a fleet node going away) is not the item's failure:
    nothing ran, so it stays open and the runner goes on after a pause."""
    from alarmtop.core.model.errors import NodeUnreachable
    from alarmtop.core.ops.bulk import runner
    monkeypatch.setattr(runner, "RETRY_FIRST_S", 0.01)
    rt = await make_runtime(Job, env=[])
    keys = [f"Job/p{i}" for i in range(5)]
    for key in keys:
        await rt.get(Job, key.split("/")[1]).arm(FAR)
    real = rt.ops.alarms.routed
    missed: list[str] = []

    async def routed(cls: str, name: str, *args: Any, **kw: Any) -> Any:
        if not missed:
            missed.append(name)
            raise NodeUnreachable(f"node n2 ({name}'s owner) cannot be reached (simulated)")
        return await real(cls, name, *args, **kw)
    monkeypatch.setattr(rt.ops.alarms, "routed", routed)
    bid = await rt.bulk.start("pause_alarm", keys=keys, kind="alarms", reason="maintenance")
    batch = await rt.bulk.wait(bid)
    assert (batch["status"], batch["done"], batch["failed"]) == ("done", 5, 0), batch
    for key in keys:
        status = await rt.alarm(Job, key.split("/")[1])
        assert status is not None and status.paused
