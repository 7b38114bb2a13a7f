"""The operator-tool ops over a real WebSocket: alarm pause and snooze, the timers
board with fire now / snooze, and bulk actions."""

from __future__ import annotations

import json

import pytest

from alarmtop.core import VirtualClock
from alarmtop.server import wire
from alarmtop.server.operator_ops import OPERATOR_COMMANDS, OPERATOR_QUERIES, operator_ops
from tests.conftest import START_MS, RuntimeFactory
from tests.core.test_bulk import FAR, Job, dead_letters
from tests.server.conftest import OPERATOR, VIEWER, ClientFactory, ServerFactory


def test_the_ops_are_in_the_wire_table() -> None:
    spec = operator_ops(wire.Field)
    assert OPERATOR_COMMANDS == {op for op, (operator, _) in spec.items() if operator}
    assert OPERATOR_QUERIES == {op for op, (operator, _) in spec.items() if not operator}
    assert all(wire.OPS[op] == spec[op] for op in spec)
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


async def test_fire_and_snooze_an_execution_timer_from_the_board(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    from alarmtop.server.operator_ops import OperatorTools
    from tests.core.test_bulk import board_flow
    rt = await make_runtime()
    rt.register_execution(board_flow)
    await rt.executions.start("board_flow", None, execution_id="w1")
    await clock.advance(0.01)
    tools = OperatorTools(rt)
    who = ("10.0.0.9:4000", "operator")
    (row,) = (await tools.run("timers", {}, *who))["rows"]
    assert (row["kind"], row["target"]) == ("wait", "w1")
    moved = await tools.run("snooze_timer", {"key": row["key"], "by_ms": 60_000}, *who)
    assert moved["due_ms"] == row["due_ms"] + 60_000
    (row,) = (await tools.run("timers", {}, *who))["rows"]
    await tools.run("fire_timer", {"key": row["key"]}, *who)
    await clock.advance(0.01)
    (row,) = (await tools.run("timers", {}, *who))["rows"]
    assert row["kind"] == "callback_timeout"  # the wait fired: on to the callback
    with pytest.raises(Exception, match="board row's `key`"):
        await tools.run("fire_timer", {"key": ["nope"]}, *who)
    rows = [(r["action"], r["ok"], r["target"]) for r in await rt.audit.list(limit=50)]
    assert ("snooze_timer", True, "w1") in rows and ("fire_timer", True, "w1") in rows
    assert ("fire_timer", False, None) in rows


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
