"""The operator tools over a real WebSocket: alarm pause and snooze, the timers board
with fire now / snooze, and bulk actions; each audited once, by the ops service (or
the bulk service, for a batch)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from alarmtop.core import VirtualClock
from alarmtop.server import alarm_commands, bulk_commands, timer_commands, wire
from alarmtop.server.commands import COMMANDS
from alarmtop.server.ops import OpsService, Session
from alarmtop.server.protocol import Audit, Role
from tests.conftest import START_MS, RuntimeFactory
from tests.ops.test_bulk import FAR, Job, dead_letters
from tests.server.conftest import OPERATOR, VIEWER, ClientFactory, ServerFactory


def test_the_ops_are_in_the_wire_table() -> None:
    specs = {spec.op: spec for spec in
             [*alarm_commands.SPECS, *timer_commands.SPECS, *bulk_commands.SPECS]}
    assert all(COMMANDS[op] is spec for op, spec in specs.items())
    tools = {"pause_alarm", "resume_alarm", "snooze_alarm", "fire_timer", "snooze_timer",
             "bulk_preview", "bulk_cancel"}
    assert {op for op in tools if specs[op].audit is Audit.SERVER} == tools
    assert specs["bulk_start"].audit is Audit.RUNTIME  # the bulk service audits a batch
    assert {op for op, spec in specs.items() if spec.role is Role.VIEWER} == {
        "timers", "bulk", "bulks"}
    with pytest.raises(wire.ProtocolError, match="by_ms"):
        wire.decode(json.dumps({"op": "snooze_alarm", "id": 1, "object": "Job/a",
                                "by_ms": "soon"}))


async def test_a_bulk_action_finishes_when_its_client_disconnects_halfway(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory) -> None:
    rt = await make_runtime(Job, env=[])
    await dead_letters(rt, 2000)
    server = await serve(rt)
    operator = await client(server.url, OPERATOR)
    preview = await operator.ok("bulk_preview", selection={"kind": "alarms", "state": "dead"})
    assert preview["count"] == 2000
    started = await operator.ok("bulk_start", action="rearm", max_in_flight=5, at_ms=FAR,
                                selection={"kind": "alarms", "state": "dead"},
                                reason="bug fixed")
    # Answered at once: the selection's keys are recorded by the batch, in the background.
    assert started["status"] in ("preparing", "running") and started["done"] < 2000
    await operator.ws.close()  # the console goes away mid-batch
    batch = await rt.bulk.wait(started["id"])
    assert (batch["status"], batch["total"], batch["done"], batch["failed"]) == \
        ("done", 2000, 2000, 0)
    assert (await rt.backend.alarm_rows.counts())["dead"] == 0
    viewer = await client(server.url, VIEWER)
    seen = await viewer.ok("bulk", batch_id=started["id"])
    assert seen["done"] == 2000 and seen["actor"].startswith("127.0.0.1")
    assert [b["id"] for b in (await viewer.ok("bulks"))["rows"]] == [started["id"]]
    rows = await rt.audit.list(limit=10_000)
    assert len([r for r in rows if r["action"] == "rearm"]) == 2000
    assert len([r for r in rows if r["action"] == "bulk_rearm"]) == 1


@pytest.mark.parametrize("fields, match", [
    ({"action": "explode", "selection": {"kind": "alarms"}}, "unknown bulk action"),
    ({"action": "rearm", "selection": {"kind": "alarms", "when": "now"}},
     "unknown selection field"),
    ({"action": "rearm", "selection": {"kind": "widgets"}}, "'alarms' or 'executions'"),
    ({"action": "rearm"}, "either keys"),
])
async def test_bad_bulk_input_is_a_clear_error_and_changes_nothing(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory,
        fields: dict[str, object], match: str) -> None:
    rt = await make_runtime(Job, env=[])
    await dead_letters(rt, 3)
    server = await serve(rt)
    operator = await client(server.url, OPERATOR)
    answer = await operator.request("bulk_start", **fields)
    assert answer["ok"] is False and match in answer["error"]
    assert await rt.bulk.list() == []
    assert (await rt.backend.alarm_rows.counts())["dead"] == 3
    (row,) = await rt.audit.list()
    assert not row["ok"] and row["role"] == "operator"


async def test_pause_snooze_and_the_board_over_the_wire(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory) -> None:
    fired: list[str] = []
    rt = await make_runtime(Job, env=fired)
    await rt.get(Job, "a").arm(START_MS + 1000)
    await rt.get(Job, "b").arm(START_MS + 2000)
    server = await serve(rt)
    viewer = await client(server.url, VIEWER)
    operator = await client(server.url, OPERATOR)
    refused = await viewer.request("pause_alarm", object="Job/a")
    assert refused["ok"] is False and "operator role" in refused["error"]
    assert (await operator.ok("pause_alarm", object="Job/a", reason="hold"))["paused"]
    snoozed = await operator.ok("snooze_alarm", object="Job/b", by_ms=10_000)
    assert snoozed["next_attempt_ms"] == START_MS + 12_000
    board = await viewer.ok("timers")
    assert [(r["target"], r["paused"]) for r in board["rows"]] == [
        ("Job/a", True), ("Job/b", False)]
    assert board["now_ms"] == START_MS
    b_key = board["rows"][1]["key"]
    await operator.ok("fire_timer", key=b_key)
    await clock.advance(5)
    assert fired == ["b"]  # a is paused: fire now waits for its resume
    bad = await operator.request("fire_timer", key=board["rows"][0]["key"])
    assert bad["ok"] is False and "resume it first" in bad["error"]
    await operator.ok("resume_alarm", object="Job/a")
    await clock.advance(0.1)
    assert fired == ["b", "a"]
    actions = [(r["action"], r["ok"]) for r in await rt.audit.list(limit=50)]
    assert ("pause_alarm", True) in actions and ("fire_timer", False) in actions
    assert ("snooze_alarm", True) in actions
    # The snooze's row says by how much, and where it moved the alarm to.
    (row,) = [r for r in await rt.audit.list(limit=50) if r["action"] == "snooze_alarm"]
    assert row["detail"] == {"outcome": "ok", "by_ms": 10_000,
                             "until_ms": START_MS + 12_000}
    listed = await viewer.ok("audit", filter="snooze")
    assert listed["rows"][0]["detail"]["by_ms"] == 10_000


async def test_a_paused_alarm_says_since_when_who_and_why(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory) -> None:
    """The `alarm` detail of a paused alarm names who paused it and why (from the audit
    row of the pause), besides since when; one paused by the runtime's API, with no
    audit row, says it does not know."""
    rt = await make_runtime(Job, env=[])
    await rt.get(Job, "a").arm(START_MS + 60_000)
    await rt.get(Job, "b").arm(START_MS + 60_000)
    server = await serve(rt)
    operator = await client(server.url, OPERATOR)
    viewer = await client(server.url, VIEWER)
    await clock.advance(3)
    await operator.ok("pause_alarm", object="Job/a", reason="vendor maintenance")
    await operator.ok("snooze_alarm", object="Job/b", by_ms=1000)  # another row after it
    a = await viewer.ok("alarm", object="Job/a")
    assert a["paused"] and a["paused_ms"] == START_MS + 3000
    assert a["paused_reason"] == "vendor maintenance"
    assert a["paused_by"] and a["paused_by"].startswith("127.0.0.1:")
    await rt.pause_alarm(Job, "b")
    b = await viewer.ok("alarm", object="Job/b")
    assert b["paused"] and (b["paused_by"], b["paused_reason"]) == (None, None)
    running = await viewer.ok("alarm", object="Job/a")
    assert "paused_reason" in running
    await operator.ok("resume_alarm", object="Job/a")
    assert "paused_reason" not in await viewer.ok("alarm", object="Job/a")


async def test_fire_and_snooze_an_execution_timer_from_the_board(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    from tests.ops.test_bulk import board_flow
    rt = await make_runtime()
    rt.register_execution(board_flow)
    await rt.executions.start("board_flow", None, execution_id="w1")
    await clock.advance(0.01)
    ops = OpsService(rt)
    who = Session("operator", "10.0.0.9:4000")

    async def run(op: str, **fields: Any) -> Any:
        return await ops.run(wire.command(op, 1, **fields), who)

    (row,) = (await run("timers"))["rows"]
    assert (row["kind"], row["target"]) == ("wait", "w1")
    moved = await run("snooze_timer", key=row["key"], by_ms=60_000)
    assert moved["due_ms"] == row["due_ms"] + 60_000
    (audited,) = await rt.audit.list(limit=1)
    assert audited["detail"] == {"outcome": "ok", "by_ms": 60_000,
                                 "until_ms": row["due_ms"] + 60_000}
    (row,) = (await run("timers"))["rows"]
    await run("fire_timer", key=row["key"])
    await clock.advance(0.01)
    (row,) = (await run("timers"))["rows"]
    assert row["kind"] == "callback_timeout"  # the wait fired: on to the callback
    with pytest.raises(Exception, match="board row's `key`"):
        await run("fire_timer", key=["nope"])
    rows = [(r["action"], r["ok"], r["target"]) for r in await rt.audit.list(limit=50)]
    assert rows == [("fire_timer", False, None), ("fire_timer", True, "w1"),
                    ("snooze_timer", True, "w1")]  # one row each
    await ops.close()


async def test_a_bulk_start_sent_again_with_its_token_starts_no_second_batch(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory) -> None:
    """A console that lost the answer (its connection dropped, say) sends the command
    again with the same token: it is told of the same batch, and each item runs once."""
    rt = await make_runtime(Job, env=[])
    await dead_letters(rt, 300)
    server = await serve(rt)
    first = await client(server.url, OPERATOR)
    fields = {"action": "rearm", "selection": {"kind": "alarms", "state": "dead"},
              "at_ms": FAR, "token": "console-7:42"}
    started = await first.ok("bulk_start", **fields)
    await first.ws.close()
    again = await (await client(server.url, OPERATOR)).ok("bulk_start", **fields)
    assert again["id"] == started["id"]
    batch = await rt.bulk.wait(started["id"])
    assert (batch["status"], batch["done"]) == ("done", 300)
    assert len(await rt.bulk.list()) == 1
    rows = await rt.audit.list(limit=10_000)
    assert len([r for r in rows if r["action"] == "rearm"]) == 300
