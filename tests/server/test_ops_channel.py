"""The ops channel over a real socket: hello and roles, snapshot then deltas, audited
operator commands, paging queries, and every kind of bad input answered without
changing anything or taking the server down."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

import pytest

from alarmtop.core import RetryPolicy, Runtime, VirtualClock
from alarmtop.examples.festival import FestivalServices, build_festival
from alarmtop.server import ops_channel
from alarmtop.server.app import OpsServer
from alarmtop.server.ops_channel import MAX_REJECTED, RATE_BURST
from alarmtop.server.wire import MAX_FRAME_BYTES
from tests.conftest import RuntimeFactory
from tests.server.conftest import (
    OPERATOR,
    VIEWER,
    Always,
    Client,
    ClientFactory,
    Frame,
    Quiet,
    ServerFactory,
    close_code,
    until,
)

FAST = RetryPolicy(max_retries=1, initial_delay_s=1)
EID = "hsf-day2"


async def runtime_with_dead_letter(make_runtime: RuntimeFactory, clock: VirtualClock,
                                   name: str = "a1") -> Runtime:
    """A runtime whose `Always/<name>` alarm has exhausted its retries."""
    rt = await make_runtime(Always, Quiet, policies={"Always": FAST})
    await rt.get(Always, name).arm(0)
    await clock.advance(0)
    await clock.advance(1)
    assert [d.object for d in await rt.dead_letters()] == [f"Always/{name}"]
    return rt


def address(c: Client) -> str:
    host, port = c.ws.local_address[:2]
    return f"{host}:{port}"


def is_delta_with(event_type: str, **data: Any) -> Any:
    def pred(f: Frame) -> bool:
        return f["type"] == "delta" and any(
            e["type"] == event_type and all(e["data"].get(k) == v for k, v in data.items())
            for e in f["events"])
    return pred


def answer_to(cid: int) -> Callable[[Frame], bool]:
    return lambda f: f.get("type") == "result" and f.get("id") == cid


# -- hello, roles, snapshot -----------------------------------------------------------------


@pytest.mark.parametrize(("token", "role"), [(OPERATOR, "operator"), (VIEWER, "viewer")])
async def test_welcome_then_snapshot(make_runtime: RuntimeFactory, clock: VirtualClock,
                                     serve: ServerFactory, client: ClientFactory,
                                     token: str, role: str) -> None:
    """Hello with a token is answered by a welcome naming the role and protocol 1, then a
    snapshot with counts and the most urgent rows (the dead letter first)."""
    rt = await runtime_with_dead_letter(make_runtime, clock)
    await rt.get(Quiet, "later").arm(60_000)
    server = await serve(rt)
    assert server.url.startswith("ws://127.0.0.1:") and server.port != 0
    c = await client(server.url)
    welcome, snap = await c.hello(token)
    assert welcome == {"type": "welcome", "role": role, "protocol": 1}
    assert snap["type"] == "snapshot"
    assert snap["counts"]["alarms"] == {"pending": 1, "running": 0, "retrying": 0, "dead": 1}
    assert [a["object"] for a in snap["alarms"]] == ["Always/a1", "Quiet/later"]
    assert snap["alarms"][0]["state"] == "dead"
    assert snap["at_ms"] == clock.now_ms()


@pytest.mark.parametrize("token", ["wrong", OPERATOR + "x", VIEWER.upper()])
async def test_wrong_token_gets_an_error_then_1008(make_runtime: RuntimeFactory,
                                                   serve: ServerFactory, client: ClientFactory,
                                                   token: str) -> None:
    """A wrong token is answered (an error frame saying so) and the connection is closed
    with 1008 (policy violation); no snapshot is ever sent."""
    rt = await make_runtime(Quiet)
    server = await serve(rt)
    c = await client(server.url)
    await c.send({"op": "hello", "token": token})
    err = await c.recv()
    assert err == {"type": "error", "error": "invalid token"}
    exc = await c.closed()
    assert close_code(exc) == 1008
    assert not any(f.get("type") == "snapshot" for f in c.seen)
    assert server.viewers == 0


@pytest.mark.parametrize("first", [
    {"op": "alarms", "id": 1}, {"op": "rearm", "id": 1, "object": "Always/a1"},
    {"op": "hello"}, "not json", ["hello"]])
async def test_anything_but_hello_first_is_refused(make_runtime: RuntimeFactory,
                                                   clock: VirtualClock, serve: ServerFactory,
                                                   client: ClientFactory, first: Any) -> None:
    """A command (or garbage) before hello gets an error frame and a 1008 close, and does
    nothing (the dead letter is still dead, nothing audited)."""
    rt = await runtime_with_dead_letter(make_runtime, clock)
    server = await serve(rt)
    c = await client(server.url)
    await c.send(first if isinstance(first, str) else json.dumps(first))
    err = await c.recv()
    assert err["type"] == "error" and err["error"]
    exc = await c.closed()
    assert close_code(exc) == 1008
    assert len(await rt.dead_letters()) == 1
    assert await rt.audit.list() == []


async def test_silent_client_is_closed_after_the_hello_timeout(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that never says hello is closed with 1008 (after HELLO_TIMEOUT_S, here
    shortened), so idle half-open connections cannot pile up."""
    monkeypatch.setattr(ops_channel, "HELLO_TIMEOUT_S", 0.2)
    server = await serve(await make_runtime(Quiet))
    c = await client(server.url)
    exc = await c.closed()
    assert close_code(exc) == 1008


async def test_client_leaving_during_hello_is_not_a_server_error(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory,
        caplog: pytest.LogCaptureFixture) -> None:
    """A client (health check, port scan, impatient console) that disconnects before or
    right after its hello is normal: nothing is logged as an error."""
    server = await serve(await make_runtime(Quiet))
    early = await client(server.url)
    await early.ws.close()
    late = await client(server.url)
    await late.send({"op": "hello", "token": VIEWER})
    await late.ws.close()
    assert server._server is not None
    await until(lambda: not server._server.all_connections)  # type: ignore[union-attr]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


async def test_second_hello_is_an_error_not_a_role_change(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory) -> None:
    """A viewer cannot upgrade itself by saying hello again with the operator token."""
    rt = await runtime_with_dead_letter(make_runtime, clock)
    server = await serve(rt)
    v = await client(server.url, VIEWER)
    await v.send({"op": "hello", "token": OPERATOR})
    err = await v.wait_for(lambda f: f["type"] == "error")
    assert "hello" in err["error"]
    res = await v.request("rearm", object="Always/a1")
    assert res["ok"] is False and "operator" in res["error"]


# -- roles ----------------------------------------------------------------------------------

OPERATOR_COMMANDS: list[tuple[str, dict[str, Any]]] = [
    ("rearm", {"object": "Always/a1", "reason": "try"}),
    ("fire_now", {"object": "Always/a1"}),
    ("clear_dead_letter", {"object": "Always/a1"}),
    ("inject_fault", {"target": "Quiet/q", "kind": "alarm_raise", "times": 1}),
    ("clear_fault", {"fault_id": "f1"}),
    ("send_callback", {"callback_id": "cb", "payload": "go"}),
    ("retry_compensation", {"execution_id": EID}),
    ("resolve", {"execution_id": EID, "note": "done by hand"}),
    ("abort", {"execution_id": EID, "reason": "no"}),
    ("hand_to_human", {"execution_id": EID}),
]


async def test_viewer_cannot_run_operator_commands(make_runtime: RuntimeFactory,
                                                   clock: VirtualClock, serve: ServerFactory,
                                                   client: ClientFactory) -> None:
    """Every operator command from a viewer fails, saying it needs the operator role;
    nothing changes (dead letter still dead, no fault) but each refusal is one audit row
    (role viewer, outcome refused), and the viewer stays connected and can still query."""
    rt = await runtime_with_dead_letter(make_runtime, clock)
    server = await serve(rt)
    v = await client(server.url, VIEWER)
    for op, args in OPERATOR_COMMANDS:
        res = await v.request(op, **args)
        assert res["ok"] is False, res
        assert "operator role" in res["error"] and op in res["error"]
    await clock.advance(5)
    assert [d.object for d in await rt.dead_letters()] == ["Always/a1"]
    assert rt.faults.list() == []
    rows = await rt.audit.list()
    assert sorted(r["action"] for r in rows) == sorted(op for op, _ in OPERATOR_COMMANDS)
    assert all(r["role"] == "viewer" and r["ok"] is False
               and r["detail"]["outcome"] == "refused" for r in rows)
    page = await v.ok("alarms")
    assert page["total"] == 1 and page["rows"][0]["state"] == "dead"


async def test_viewer_can_run_every_query(make_runtime: RuntimeFactory, clock: VirtualClock,
                                          serve: ServerFactory, client: ClientFactory) -> None:
    """The queries are open to viewers."""
    rt = await runtime_with_dead_letter(make_runtime, clock)
    server = await serve(rt)
    v = await client(server.url, VIEWER)
    assert (await v.ok("alarms"))["total"] == 1
    assert (await v.ok("alarm", object="Always/a1"))["state"] == "dead"
    await rt.get(Quiet, "stored").touch()
    # the dead letter's object (only an alarm, no storage) is an object too
    assert (await v.ok("objects"))["total"] == 2
    assert (await v.ok("executions"))["rows"] == []
    assert (await v.ok("audit"))["rows"] == []
    assert (await v.ok("faults"))["rows"] == []
    assert (await v.ok("snapshot"))["type"] == "snapshot"


# -- a command's effect in the next delta and in the audit log ------------------------------


async def test_rearm_shows_in_the_next_delta_and_in_the_audit_log(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory) -> None:
    """An operator re-arms a dead letter: the result carries the new row, every client's
    next delta has the row back to pending with fresh counts and the operator event, and
    the audit log records role, client address, action, target and reason."""
    rt = await runtime_with_dead_letter(make_runtime, clock)
    server = await serve(rt)
    op = await client(server.url, OPERATOR)
    watcher = await client(server.url, VIEWER)
    at = clock.now_ms() + 30_000  # in the future, so the row stays pending for the delta
    data = await op.ok("rearm", object="Always/a1", at_ms=at, reason="upstream fixed")
    assert (data["object"], data["state"], data["retry_count"]) == ("Always/a1", "pending", 0)
    assert data["next_attempt_ms"] == at

    for c in (op, watcher):
        # The row comes with the alarm.rearmed event; the operator.rearm event follows in
        # the same delta or the next one (a tick may fall between the two).
        delta = await c.find(is_delta_with("alarm.rearmed", object="Always/a1"))
        (row,) = [a for a in delta["alarms"] if a["object"] == "Always/a1"]
        assert (row["state"], row["retry_count"]) == ("pending", 0)
        assert row["next_attempt_ms"] == at
        assert delta["counts"]["alarms"]["dead"] == 0
        delta = await c.find(is_delta_with("operator.rearm", target="Always/a1"))
        ev = next(e for e in delta["events"] if e["type"] == "operator.rearm")
        assert ev["data"]["role"] == "operator" and ev["data"]["reason"] == "upstream fixed"
        assert ev["data"]["actor"] == address(op)

    (entry,) = (await watcher.ok("audit"))["rows"]
    assert entry["action"] == "rearm" and entry["target"] == "Always/a1"
    assert entry["role"] == "operator" and entry["actor"] == address(op)
    assert entry["reason"] == "upstream fixed" and entry["ok"] is True
    assert entry["at_ms"] == clock.now_ms()

    # The re-armed alarm really runs again: a fresh ladder, ending dead again.
    await clock.advance(30)
    await clock.advance(1)
    (dead,) = await rt.dead_letters()
    assert len(dead.attempts) == 2


async def test_rearm_at_a_time_and_fire_now(make_runtime: RuntimeFactory, clock: VirtualClock,
                                            serve: ServerFactory, client: ClientFactory) -> None:
    """rearm with at_ms schedules there; fire_now runs a far-off alarm at once."""
    rt = await runtime_with_dead_letter(make_runtime, clock)
    await rt.get(Quiet, "q").arm(3_600_000)
    server = await serve(rt)
    op = await client(server.url, OPERATOR)
    data = await op.ok("rearm", object="Always/a1")  # at_ms omitted: now
    assert data["next_attempt_ms"] == clock.now_ms() and data["retry_count"] == 0
    await clock.advance(0)
    await clock.advance(1)
    (dead,) = await rt.dead_letters()
    assert [a.start_ms for a in dead.attempts] == [clock.now_ms() - 1000, clock.now_ms()]

    await op.ok("fire_now", object="Quiet/q", reason="do not wait an hour")
    await clock.advance(0)
    assert await rt.get(Quiet, "q").fired() == 1
    await op.find(is_delta_with("alarm.fired", object="Quiet/q"))
    actions = [(a["action"], a["target"]) for a in (await op.ok("audit"))["rows"]]
    assert sorted(actions) == [("fire_now", "Quiet/q"), ("rearm", "Always/a1")]


async def test_fire_now_consumes_the_alarm(make_runtime: RuntimeFactory, clock: VirtualClock,
                                           serve: ServerFactory, client: ClientFactory) -> None:
    """Firing a pending alarm now runs it instead of later: after a successful run the
    alarm is done, and an hour later the handler has still run once."""
    rt = await make_runtime(Quiet)
    await rt.get(Quiet, "q").arm(3_600_000)
    server = await serve(rt)
    op = await client(server.url, OPERATOR)
    await op.ok("fire_now", object="Quiet/q")
    await clock.advance(0)
    assert await rt.get(Quiet, "q").fired() == 1
    await clock.advance(3600)
    assert await rt.get(Quiet, "q").fired() == 1
    assert await rt.alarm(Quiet, "q") is None


async def test_clear_dead_letter(make_runtime: RuntimeFactory, clock: VirtualClock,
                                 serve: ServerFactory, client: ClientFactory) -> None:
    """clear_dead_letter drops a dead letter; on a live alarm it is refused (and audited as
    failed) without touching it."""
    rt = await runtime_with_dead_letter(make_runtime, clock)
    await rt.get(Quiet, "q").arm(60_000)
    server = await serve(rt)
    op = await client(server.url, OPERATOR)
    res = await op.request("clear_dead_letter", object="Quiet/q")
    assert res["ok"] is False and "not a dead letter" in res["error"]
    assert (await rt.alarm(Quiet, "q")) is not None
    await op.ok("clear_dead_letter", object="Always/a1", reason="obsolete")
    assert await rt.dead_letters() == []
    rows = (await op.ok("audit"))["rows"]
    assert sorted((r["target"], r["ok"]) for r in rows) == [("Always/a1", True),
                                                            ("Quiet/q", False)]


@pytest.mark.parametrize(("args", "words"), [
    ({"object": "Nope/a1"}, "Nope"),
    ({"object": "Quiet/none"}, "Quiet/none"),
    ({"object": "no-slash"}, "Class/name"),
])
async def test_rearm_of_something_that_is_not_there(make_runtime: RuntimeFactory,
                                                    clock: VirtualClock, serve: ServerFactory,
                                                    client: ClientFactory,
                                                    args: dict[str, Any], words: str) -> None:
    """An unknown class, an object without an alarm, or a malformed reference: a clear
    error result, nothing changed, and the connection stays usable."""
    rt = await runtime_with_dead_letter(make_runtime, clock)
    server = await serve(rt)
    op = await client(server.url, OPERATOR)
    res = await op.request("rearm", **args)
    assert res["ok"] is False and words in res["error"]
    assert not res["error"].startswith("internal error")
    assert len(await rt.dead_letters()) == 1
    assert (await op.ok("alarms"))["total"] == 1


# -- bad input ------------------------------------------------------------------------------


async def test_bad_frames_get_clear_errors_and_the_connection_stays_usable(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory) -> None:
    """Malformed JSON, an unknown op, a missing field, a wrong type, an unknown field,
    invalid UTF-8: each answered with a clear error (matched by id when it had one), none
    changes anything, and a normal request afterwards works. Each frame that named a
    command is one audit row, refused; frames with no readable op are not."""
    rt = await runtime_with_dead_letter(make_runtime, clock)
    server = await serve(rt)
    op = await client(server.url, OPERATOR)

    await op.send('{"op": "rearm", "id": 1, "object": ')
    err = await op.wait_for(lambda f: f["type"] in ("error", "result"))
    assert err["type"] == "error" and err["error"].startswith("not JSON")

    await op.send({"op": "rearm_everything", "id": 2})
    res = await op.wait_for(lambda f: f.get("id") == 2)
    assert res["ok"] is False and "unknown op" in res["error"]

    await op.send({"op": "rearm", "id": 3})
    res = await op.wait_for(lambda f: f.get("id") == 3)
    assert res["ok"] is False and "'object'" in res["error"]

    await op.send({"op": "rearm", "id": 4, "object": "Always/a1", "at_ms": "soon"})
    res = await op.wait_for(lambda f: f.get("id") == 4)
    assert res["ok"] is False and "'at_ms'" in res["error"] and "integer" in res["error"]

    await op.send({"op": "rearm", "id": 5, "object": "Always/a1", "why": "typo"})
    res = await op.wait_for(lambda f: f.get("id") == 5)
    assert res["ok"] is False and "why" in res["error"]

    await op.send(b'{"op": "rearm", "id": 6, "object": "\xff"}')
    err = await op.wait_for(lambda f: f["type"] in ("error", "result"))
    assert err["type"] == "error" and "UTF-8" in err["error"]

    await op.send({"op": "rearm", "object": "Always/a1"})
    err = await op.wait_for(lambda f: f["type"] in ("error", "result"))
    assert err["type"] == "error" and '"id"' in err["error"]

    await op.send("[]")
    err = await op.wait_for(lambda f: f["type"] in ("error", "result"))
    assert err["type"] == "error" and "JSON object" in err["error"]

    assert len(await rt.dead_letters()) == 1
    rows = (await rt.audit.list())[::-1]
    assert [r["action"] for r in rows] == ["unknown_op", "rearm", "rearm", "rearm", "rearm"]
    assert rows[0]["detail"]["op"] == "rearm_everything"
    assert all(not r["ok"] and r["detail"]["outcome"] == "refused" and r["role"] == "operator"
               for r in rows)
    assert (await op.ok("alarms"))["total"] == 1


async def test_non_finite_numbers_are_refused_on_the_wire(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory) -> None:
    """NaN where a number is expected is refused by id; no fault is injected."""
    rt = await make_runtime(Quiet)
    server = await serve(rt)
    op = await client(server.url, OPERATOR)
    await op.send('{"op": "inject_fault", "id": 8, "target": "Quiet/q", '
                  '"kind": "alarm_delay", "seconds": NaN}')
    res = await op.wait_for(lambda f: f.get("id") == 8)
    assert res["ok"] is False and "'seconds'" in res["error"]
    assert rt.faults.list() == []


async def test_pathologically_nested_frame_gets_an_error_not_a_dropped_connection(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory) -> None:
    """100,000 nested brackets (100 KB) are a bad frame like any other: an error frame,
    and the connection stays usable."""
    server = await serve(await make_runtime(Quiet))
    op = await client(server.url, OPERATOR)
    await op.send("[" * 100_000)
    err = await op.wait_for(lambda f: f["type"] in ("error", "result"))
    assert err["type"] == "error"
    assert (await op.ok("faults"))["rows"] == []


async def test_pathologically_nested_frame_does_not_take_the_server_down(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory) -> None:
    """Whatever happens to the sender, other clients and new connections are served."""
    server = await serve(await make_runtime(Quiet))
    other = await client(server.url, VIEWER)
    op = await client(server.url, OPERATOR)
    await op.send("[" * 100_000)
    with pytest.raises(Exception):  # noqa: B017 - an error frame or a close: either
        await op.wait_for(lambda f: False, within=0.5)
    assert (await other.ok("faults"))["rows"] == []
    fresh = await client(server.url, VIEWER)
    assert (await fresh.ok("alarms"))["total"] == 0


async def test_oversize_frame_closes_1009_and_others_are_served(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory) -> None:
    """A frame over 1 MiB closes that connection with 1009 (message too big); the server
    keeps serving other clients and accepts new ones, and nothing changed."""
    rt = await runtime_with_dead_letter(make_runtime, clock)
    server = await serve(rt)
    other = await client(server.url, VIEWER)
    big = await client(server.url, OPERATOR, max_size=None)
    payload = "x" * MAX_FRAME_BYTES
    text = json.dumps({"op": "rearm", "id": 1, "object": "Always/a1", "reason": payload})
    assert len(text.encode()) > MAX_FRAME_BYTES
    try:
        await big.send(text)
    except Exception:  # the server may close before the send completes
        pass
    exc = await big.closed()
    assert close_code(exc) == 1009
    assert len(await rt.dead_letters()) == 1
    assert (await other.ok("alarms"))["total"] == 1
    fresh = await client(server.url, OPERATOR)
    assert (await fresh.ok("alarms"))["total"] == 1


async def test_a_frame_just_under_the_limit_is_accepted(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory) -> None:
    """The limit is the frame size, not less: a ~1 MiB frame is read and answered (here
    refused for its unknown field, but answered)."""
    server = await serve(await make_runtime(Quiet))
    op = await client(server.url, OPERATOR)
    head = '{"op": "faults", "id": 77, "pad": "'
    text = head + "x" * (MAX_FRAME_BYTES - len(head) - 2) + '"}'
    assert len(text.encode()) == MAX_FRAME_BYTES
    await op.send(text)
    res = await op.wait_for(lambda f: f.get("id") == 77)
    assert res["ok"] is False and "pad" in res["error"]


async def test_flood_is_rate_limited_then_closed_1008(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory) -> None:
    """A client past its burst of commands gets "rate limited" results (by id); after
    MAX_REJECTED in a row it is closed with 1008. Another client on the same server is
    unaffected."""
    rt = await runtime_with_dead_letter(make_runtime, clock)
    server = await serve(rt, rate_per_s=1.0)
    other = await client(server.url, VIEWER)
    flood = await client(server.url, OPERATOR)
    allowed = limited = 0
    closed: Any = None
    for i in range(int(RATE_BURST) + 4 * MAX_REJECTED):  # room for a token refilled meanwhile
        try:
            await flood.send({"op": "clear_fault", "id": i, "fault_id": "no-such-fault"})
            res = await flood.wait_for(answer_to(i))
        except Exception as err:  # closed by the server
            closed = err
            break
        assert res["ok"] is False
        if "rate limited" in res["error"]:
            limited += 1
        else:
            allowed += 1
    assert allowed >= RATE_BURST - 1
    assert limited >= MAX_REJECTED - 2
    assert closed is not None, "the flooding client was never closed"
    exc = await flood.closed()
    assert close_code(exc) == 1008
    # The other client is unaffected, now and after.
    assert (await other.ok("alarms"))["total"] == 1
    assert other.ws.close_code is None


async def test_burst_flood_gets_rate_limited_answers_and_a_prompt_close(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory) -> None:
    """300 commands written back to back: the client must see "rate limited" results and
    a 1008 close."""
    server = await serve(await make_runtime(Quiet), rate_per_s=1.0)
    flood = await client(server.url, VIEWER)
    for i in range(300):
        await flood.send({"op": "clear_fault", "id": i, "fault_id": "f"})
    exc: Any = None
    try:
        with contextlib.suppress(TimeoutError):
            exc = await flood.closed()
    finally:
        # Cleanup only: drop the TCP connection at both ends, so teardown does not wait
        # for the server's 10 s close timeout.
        flood.ws.transport.abort()
        assert server._server is not None
        for conn in list(server._server.all_connections):
            conn.transport.abort()
    limited = [f for f in flood.seen if f.get("ok") is False and "rate" in f.get("error", "")]
    assert limited, f"no rate-limited answer among {len(flood.seen)} frames"
    assert exc is not None and close_code(exc) == 1008


# -- paging ---------------------------------------------------------------------------------


async def test_alarm_paging_filters_and_totals(make_runtime: RuntimeFactory,
                                               clock: VirtualClock, serve: ServerFactory,
                                               client: ClientFactory) -> None:
    """alarms pages with offset/limit (disjoint pages covering everything, most urgent
    first), filters by state and by a substring of Class/name, and reports the total
    matching the filter."""
    rt = await runtime_with_dead_letter(make_runtime, clock, "d0")
    for i in range(12):
        await rt.get(Quiet, f"q{i:02d}").arm(60_000 + i * 1000)
    server = await serve(rt)
    v = await client(server.url, VIEWER)

    seen: list[str] = []
    for offset in range(0, 13, 5):
        page = await v.ok("alarms", offset=offset, limit=5)
        assert page["total"] == 13 and page["offset"] == offset
        assert len(page["rows"]) == min(5, 13 - offset)
        seen += [r["object"] for r in page["rows"]]
    assert seen == ["Always/d0"] + [f"Quiet/q{i:02d}" for i in range(12)]

    dead = await v.ok("alarms", state="dead")
    assert dead["total"] == 1 and [r["object"] for r in dead["rows"]] == ["Always/d0"]
    pending = await v.ok("alarms", state="pending", limit=3)
    assert pending["total"] == 12 and len(pending["rows"]) == 3
    assert all(r["state"] == "pending" for r in pending["rows"])

    q1 = await v.ok("alarms", filter="Quiet/q1")
    assert q1["total"] == 2 and [r["object"] for r in q1["rows"]] == ["Quiet/q10", "Quiet/q11"]
    both = await v.ok("alarms", filter="q0", state="pending", offset=8)
    assert both["total"] == 10 and [r["object"] for r in both["rows"]] == [
        "Quiet/q08", "Quiet/q09"]
    none = await v.ok("alarms", filter="%")
    assert none == {"rows": [], "offset": 0, "total": 0, "cursors": []}
    past = await v.ok("alarms", offset=100)
    assert past["rows"] == [] and past["total"] == 13


async def test_objects_and_alarm_queries(make_runtime: RuntimeFactory, clock: VirtualClock,
                                         serve: ServerFactory, client: ClientFactory) -> None:
    """objects pages with a filter and says which are resident and their alarm; alarm
    looks one up (null when there is none)."""
    rt = await make_runtime(Quiet, hibernate_after=1)
    for i in range(4):
        await rt.get(Quiet, f"o{i}").arm(60_000)
        await rt.get(Quiet, f"o{i}").touch()
    await clock.advance(2)  # all hibernate
    await rt.get(Quiet, "o3").fired()  # o3 is resident again
    server = await serve(rt)
    v = await client(server.url, VIEWER)
    page = await v.ok("objects", limit=2, offset=0)
    assert page["total"] == 4 and len(page["rows"]) == 2
    everything = await v.ok("objects", filter="o3")
    (row,) = everything["rows"]
    assert row["object"] == "Quiet/o3" and row["resident"] is True
    assert row["alarm_state"] == "pending" and row["alarm_ms"] == clock.now_ms() - 2000 + 60_000
    assert (await v.ok("objects", filter="o1"))["rows"][0]["resident"] is False
    one = await v.ok("alarm", object="Quiet/o2")
    assert one["object"] == "Quiet/o2" and one["state"] == "pending"
    assert await v.ok("alarm", object="Quiet/never") is None


async def test_audit_paging(make_runtime: RuntimeFactory, clock: VirtualClock,
                            serve: ServerFactory, client: ClientFactory) -> None:
    """The audit log pages too: limit and offset cut the list without overlap."""
    rt = await runtime_with_dead_letter(make_runtime, clock)
    server = await serve(rt)
    op = await client(server.url, OPERATOR)
    for i in range(5):
        await op.ok("inject_fault", target=f"Quiet/q{i}", kind="alarm_raise", reason=f"r{i}")
    first = (await op.ok("audit", limit=2))["rows"]
    rest = (await op.ok("audit", offset=2, limit=10))["rows"]
    assert len(first) == 2 and len(rest) == 3
    reasons = [r["reason"] for r in first + rest]
    assert sorted(reasons) == ["r0", "r1", "r2", "r3", "r4"]


# -- faults ---------------------------------------------------------------------------------


async def test_inject_list_and_clear_faults(make_runtime: RuntimeFactory, clock: VirtualClock,
                                            serve: ServerFactory, client: ClientFactory) -> None:
    """inject_fault returns an id, the fault is listed (query and deltas) and takes effect;
    clear_fault removes it; both are audited; a bad kind is refused and audited as failed
    without adding a fault."""
    rt = await make_runtime(Quiet)
    server = await serve(rt)
    op = await client(server.url, OPERATOR)
    fid = (await op.ok("inject_fault", target="Quiet/q", kind="alarm_raise", times=5,
                       reason="chaos drill"))["fault_id"]
    (listed,) = (await op.ok("faults"))["rows"]
    assert listed["id"] == fid and listed["target"] == "Quiet/q"
    assert listed["kind"] == "alarm_raise"
    delta = await op.find(lambda f: f["type"] == "delta" and f["faults"])
    assert [f["id"] for f in delta["faults"]] == [fid]

    await rt.get(Quiet, "q").arm(0)
    await clock.advance(0)
    status = await rt.alarm(Quiet, "q")
    assert status is not None and status.state == "retrying"  # the injected failure
    assert await rt.get(Quiet, "q").fired() == 0

    assert (await op.ok("faults"))["rows"][0]["id"] == fid  # 4 more to go
    mark = op.mark()
    await op.ok("clear_fault", fault_id=fid, reason="drill over")
    assert (await op.ok("faults"))["rows"] == []
    await op.find(lambda f: f["type"] == "delta" and f["faults"] == [], since=mark)
    await clock.advance(2)  # the retry now succeeds
    assert await rt.get(Quiet, "q").fired() == 1

    res = await op.request("inject_fault", target="Quiet/q", kind="meteor_strike")
    assert res["ok"] is False and "meteor_strike" in res["error"]
    assert rt.faults.list() == []
    res = await op.request("clear_fault", fault_id="no-such-fault")
    assert res["ok"] is False and not res["error"].startswith("internal error")

    rows = (await op.ok("audit", limit=10))["rows"]
    assert sorted((r["action"], r["ok"]) for r in rows) == [
        ("clear_fault", False), ("clear_fault", True), ("inject_fault", False),
        ("inject_fault", True)]
    assert all(r["role"] == "operator" and r["actor"] == address(op) for r in rows)


async def test_inject_fault_always(make_runtime: RuntimeFactory, clock: VirtualClock,
                                   serve: ServerFactory, client: ClientFactory) -> None:
    """always: true injects a fault with no count: it stays after firing."""
    rt = await make_runtime(Quiet, policies={"Quiet": FAST})
    server = await serve(rt)
    op = await client(server.url, OPERATOR)
    await op.ok("inject_fault", target="Quiet/q", kind="alarm_raise", always=True)
    await rt.get(Quiet, "q").arm(0)
    await clock.advance(0)
    await clock.advance(1)
    assert [d.object for d in await rt.dead_letters()] == ["Quiet/q"]
    assert len((await op.ok("faults"))["rows"]) == 1


# -- executions -----------------------------------------------------------------------------


async def festival_runtime(make_runtime: RuntimeFactory, clock: VirtualClock,
                           *ids: str) -> tuple[Runtime, FestivalServices]:
    rt = await make_runtime()
    services = FestivalServices(rt.ledger)
    rt.register_execution(build_festival(services))
    for eid in ids:
        await rt.executions.start("festival-stream", {"eventId": eid, "startsInSeconds": 600},
                                  execution_id=eid)
    await clock.advance(0)
    return rt, services


async def verdict_id(c: Client, eid: str) -> str:
    d = await c.ok("execution", execution_id=eid)
    (cb,) = [cb for cb in d["callbacks"] if cb["name"] == "verdict"]
    return str(cb["callback_id"])


async def test_send_callback_completes_the_saga(make_runtime: RuntimeFactory,
                                                clock: VirtualClock, serve: ServerFactory,
                                                client: ClientFactory) -> None:
    """An operator answers the verdict callback over the channel: the saga goes on to
    stream, the next delta carries the execution's new status, the audit names it."""
    rt, services = await festival_runtime(make_runtime, clock, EID)
    server = await serve(rt)
    op = await client(server.url, OPERATOR)
    listing = await op.ok("executions")
    assert [(r["execution_id"], r["status"]) for r in listing["rows"]] == [(EID, "suspended")]
    assert listing["counts"].get("suspended") == 1
    cb = await verdict_id(op, EID)
    data = await op.ok("send_callback", callback_id=cb, payload="go", reason="organiser said go")
    assert data == {"callback_id": cb, "outcome": "success"}
    await clock.advance(0)
    d = await op.ok("execution", execution_id=EID)
    assert d["status"] == "succeeded" and d["result"]["status"] == "streaming"
    assert ("start_streaming", EID) in services.calls
    delta = await op.find(lambda f: f["type"] == "delta" and any(
        r["execution_id"] == EID and r["status"] == "succeeded" for r in f["executions"]))
    assert delta["counts"]["executions"].get("succeeded") == 1
    (entry,) = (await op.ok("audit"))["rows"]
    assert (entry["action"], entry["target"], entry["reason"]) == (
        "send_callback", cb, "organiser said go")


async def test_send_callback_failure_heartbeat_and_bad_outcome(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory) -> None:
    """A heartbeat keeps the execution waiting; outcome "failure" fails the callback (the
    festival then cancels and compensates); an unknown outcome or callback id is a clear
    error and changes nothing."""
    rt, services = await festival_runtime(make_runtime, clock, EID)
    server = await serve(rt)
    op = await client(server.url, OPERATOR)
    cb = await verdict_id(op, EID)
    res = await op.request("send_callback", callback_id=cb, outcome="maybe")
    assert res["ok"] is False and "maybe" in res["error"]
    res = await op.request("send_callback", callback_id="not-a-callback", payload="go")
    assert res["ok"] is False and not res["error"].startswith("internal error")
    assert await op.ok("send_callback", callback_id=cb, outcome="heartbeat")
    await clock.advance(0)
    assert (await op.ok("execution", execution_id=EID))["status"] == "suspended"
    await op.ok("send_callback", callback_id=cb, outcome="failure", error_type="Organiser",
                message="unreachable")
    await clock.advance(0)
    d = await op.ok("execution", execution_id=EID)
    assert d["status"] in ("failed", "succeeded"), d["status"]
    assert "start_streaming" not in [c[0] for c in services.calls]


async def test_nan_in_a_callback_payload_is_refused(make_runtime: RuntimeFactory,
                                                     clock: VirtualClock, serve: ServerFactory,
                                                     client: ClientFactory) -> None:
    """A payload holding NaN (free-form JSON, so the decoder lets it through) is refused
    when delivered, with a clear error; the execution still waits for its verdict."""
    rt, _ = await festival_runtime(make_runtime, clock, EID)
    server = await serve(rt)
    op = await client(server.url, OPERATOR)
    cb = await verdict_id(op, EID)
    await op.send(f'{{"op": "send_callback", "id": 5, "callback_id": "{cb}", '
                  '"payload": {"go": NaN}}')
    res = await op.wait_for(answer_to(5))
    assert res["ok"] is False and "JSON" in res["error"]
    await clock.advance(0)
    assert (await op.ok("execution", execution_id=EID))["status"] == "suspended"


async def needs_human(make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
                      client: ClientFactory, times: int | None) -> tuple[Runtime, Client,
                                                                        FestivalServices]:
    """A festival whose compensation of the viewing page failed: needs_human. The fault
    and the verdict go through the ops channel."""
    rt, services = await festival_runtime(make_runtime, clock, EID)
    server = await serve(rt)
    op = await client(server.url, OPERATOR)
    fault: dict[str, Any] = {"always": True} if times is None else {"times": times}
    await op.ok("inject_fault", target=EID, kind="compensation_fail",
                step="compensate_open_viewing_page", **fault)
    await op.ok("send_callback", callback_id=await verdict_id(op, EID), payload="cancel")
    await clock.advance(10)
    d = await op.ok("execution", execution_id=EID)
    assert d["status"] == "needs_human"
    assert "compensate_open_viewing_page" in d["blocked_on"]
    return rt, op, services


async def test_retry_compensation_over_the_channel(make_runtime: RuntimeFactory,
                                                   clock: VirtualClock, serve: ServerFactory,
                                                   client: ClientFactory) -> None:
    """needs_human shows in the counts; retry_compensation finishes the rollback, the
    delta carries the succeeded execution, and the audit records the operator."""
    _rt, op, services = await needs_human(make_runtime, clock, serve, client, times=3)
    snap = await op.ok("snapshot")
    assert snap["counts"]["needs_human"] == 1
    await op.ok("retry_compensation", execution_id=EID)
    await clock.advance(0)
    d = await op.ok("execution", execution_id=EID)
    assert d["status"] == "succeeded"
    assert [s["state"] for s in d["saga"]] == ["compensated"] * 3
    assert [c[0] for c in services.calls].count("release_streaming") == 1
    await op.find(lambda f: f["type"] == "delta" and f["counts"]["needs_human"] == 0 and any(
        r["execution_id"] == EID and r["status"] == "succeeded" for r in f["executions"]))
    rows = (await op.ok("audit"))["rows"]
    (entry,) = [r for r in rows if r["action"] == "retry_compensation"]
    assert (entry["target"], entry["role"], entry["actor"], entry["ok"]) == (
        EID, "operator", address(op), True)


async def test_retry_compensation_reason_is_audited(make_runtime: RuntimeFactory,
                                                    clock: VirtualClock, serve: ServerFactory,
                                                    client: ClientFactory) -> None:
    """Every operator action records why: the reason given with retry_compensation is in
    its audit entry."""
    _rt, op, _ = await needs_human(make_runtime, clock, serve, client, times=3)
    await op.ok("retry_compensation", execution_id=EID, reason="page service is back")
    rows = (await op.ok("audit"))["rows"]
    (entry,) = [r for r in rows if r["action"] == "retry_compensation"]
    assert entry["reason"] == "page service is back"


async def test_resolve_by_hand_over_the_channel(make_runtime: RuntimeFactory,
                                                clock: VirtualClock, serve: ServerFactory,
                                                client: ClientFactory) -> None:
    """resolve needs a note; with one, the failed compensation is recorded as done by
    hand and the rollback carries on to success."""
    _rt, op, _services = await needs_human(make_runtime, clock, serve, client, times=None)
    res = await op.request("resolve", execution_id=EID, note="")
    assert res["ok"] is False and "note" in res["error"]
    assert (await op.ok("execution", execution_id=EID))["status"] == "needs_human"
    await op.ok("resolve", execution_id=EID, note="closed the page by hand")
    await clock.advance(0)
    d = await op.ok("execution", execution_id=EID)
    assert d["status"] == "succeeded"
    entry = next(s for s in d["saga"] if s["name"] == "open_viewing_page")
    assert (entry["state"], entry["note"]) == ("resolved", "closed the page by hand")
    rows = (await op.ok("audit"))["rows"]
    (entry,) = [r for r in rows if r["action"] == "resolve" and r["ok"]]
    assert (entry["target"], entry["role"], entry["actor"]) == (EID, "operator", address(op))
    assert entry["reason"] == "closed the page by hand"  # the note is what was done


async def test_abort_over_the_channel(make_runtime: RuntimeFactory, clock: VirtualClock,
                                      serve: ServerFactory, client: ClientFactory) -> None:
    """abort ends a stuck execution as aborted with the operator's reason, running nothing
    more."""
    _rt, op, services = await needs_human(make_runtime, clock, serve, client, times=None)
    before = len(services.calls)
    await op.ok("abort", execution_id=EID, reason="venue gone")
    await clock.advance(60)
    d = await op.ok("execution", execution_id=EID)
    assert d["status"] == "aborted" and d["error"]["ErrorMessage"] == "venue gone"
    assert len(services.calls) == before
    (entry,) = [r for r in (await op.ok("audit"))["rows"] if r["action"] == "abort"]
    assert (entry["reason"], entry["role"], entry["actor"]) == ("venue gone", "operator",
                                                                address(op))


async def test_hand_to_human_then_resolve(make_runtime: RuntimeFactory, clock: VirtualClock,
                                          serve: ServerFactory, client: ClientFactory) -> None:
    """hand_to_human holds a waiting execution (needs_human, counted, nothing runs on the
    verdict), and resolve lets it carry on."""
    rt, services = await festival_runtime(make_runtime, clock, EID)
    server = await serve(rt)
    op = await client(server.url, OPERATOR)
    await op.ok("hand_to_human", execution_id=EID, reason="looks odd")
    await clock.advance(0)
    d = await op.ok("execution", execution_id=EID)
    assert d["status"] == "needs_human" and d["human_hold"]
    assert (await op.ok("snapshot"))["counts"]["needs_human"] == 1
    await op.ok("send_callback", callback_id=await verdict_id(op, EID), payload="go")
    await clock.advance(0)
    assert "start_streaming" not in [c[0] for c in services.calls]
    await op.ok("resolve", execution_id=EID, note="checked, fine")
    await clock.advance(0)
    d = await op.ok("execution", execution_id=EID)
    assert d["status"] == "succeeded"
    assert ("start_streaming", EID) in services.calls
    (entry,) = [r for r in (await op.ok("audit"))["rows"] if r["action"] == "hand_to_human"]
    assert (entry["reason"], entry["role"]) == ("looks odd", "operator")


async def test_execution_commands_on_an_unknown_execution(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory) -> None:
    """Each execution command on an id that does not exist: a clear error (not an internal
    one) and an audit entry marked failed."""
    rt, _ = await festival_runtime(make_runtime, clock)
    server = await serve(rt)
    op = await client(server.url, OPERATOR)
    for cmd, args in [("retry_compensation", {}), ("resolve", {"note": "n"}),
                      ("abort", {}), ("hand_to_human", {})]:
        res = await op.request(cmd, execution_id="ghost", **args)
        assert res["ok"] is False and "ghost" in res["error"], res
        assert not res["error"].startswith("internal error")
    res = await op.request("execution", execution_id="ghost")
    assert res["ok"] is False and "ghost" in res["error"]
    rows = (await op.ok("audit", limit=10))["rows"]
    assert len(rows) == 4 and not any(r["ok"] for r in rows)


# -- the connection count -------------------------------------------------------------------


async def test_viewers_counted_while_connected(make_runtime: RuntimeFactory,
                                               serve: ServerFactory,
                                               client: ClientFactory) -> None:
    """The server counts connected ops clients and forgets those that leave."""
    server: OpsServer = await serve(await make_runtime(Quiet))
    a = await client(server.url, VIEWER)
    b = await client(server.url, OPERATOR)
    assert server.viewers == 2 and len(server.feed.clients) == 2
    await a.ws.close()
    await b.ws.close()
    await until(lambda: server.viewers == 0)
    assert not server.feed.clients
