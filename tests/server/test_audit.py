"""The audit log over a real server: every command, done, failed or refused (wrong role,
bad input, unknown op, no id, over the rate limit, text that is not valid Unicode), is
exactly one row with role, client, time, command, target, reason and outcome, and an
`operator.*` event; queries are not audited; odd text never skips a row nor ends in a
traceback."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from alarmtop.core import Runtime, VirtualClock
from alarmtop.server.wire import OPS
from tests.conftest import RuntimeFactory
from tests.server.conftest import (
    OPERATOR,
    VIEWER,
    Client,
    ClientFactory,
    Quiet,
    ServerFactory,
    close_code,
)

ROW_KEYS = {"seq", "at_ms", "actor", "role", "action", "target", "reason", "ok", "detail",
            "node"}


def address(c: Client) -> str:
    host, port = c.ws.local_address[:2]
    return f"{host}:{port}"


async def rows(rt: Runtime) -> list[dict[str, Any]]:
    """Audit rows, oldest first."""
    return list(reversed(await rt.audit.list(1000)))


async def quiet(make_runtime: RuntimeFactory) -> Runtime:
    rt = await make_runtime(Quiet)
    await rt.get(Quiet, "q1").arm(60_000)
    return rt


def raw(op: str, cid: int | None, **fields: str) -> str:
    """A frame whose string values are written as given: JSON escapes stay escapes."""
    parts = [f'"op": "{op}"'] + ([f'"id": {cid}'] if cid is not None else [])
    parts += [f'"{k}": "{v}"' for k, v in fields.items()]
    return "{" + ", ".join(parts) + "}"


async def test_a_done_and_a_failed_command_are_one_row_each(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory) -> None:
    """A re-arm that works and one on an object with no alarm: one row each, with the
    operator's role and address, the runtime's time, command, target, reason, outcome."""
    rt = await quiet(make_runtime)
    server = await serve(rt)
    op = await client(server.url, OPERATOR)
    await op.ok("rearm", object="Quiet/q1", reason="by hand")
    res = await op.request("rearm", object="Quiet/none", reason="typo")
    assert res["ok"] is False
    done, failed = await rows(rt)
    for row in (done, failed):
        assert set(row) == ROW_KEYS
        assert row["role"] == "operator" and row["actor"] == address(op)
        assert row["at_ms"] == clock.now_ms() and row["action"] == "rearm"
        assert row["node"] == getattr(rt.backend, "node_id", None)  # which node ran it
    assert (done["target"], done["reason"], done["ok"]) == ("Quiet/q1", "by hand", True)
    assert done["detail"]["outcome"] == "ok"
    assert (failed["target"], failed["reason"], failed["ok"]) == ("Quiet/none", "typo", False)
    assert failed["detail"]["outcome"] == "failed" and failed["detail"]["error"]


async def test_queries_are_not_audited(make_runtime: RuntimeFactory, serve: ServerFactory,
                                       client: ClientFactory) -> None:
    """The console's own reads (pages, details) leave the audit log alone, even when bad."""
    rt = await quiet(make_runtime)
    server = await serve(rt)
    op = await client(server.url, OPERATOR)
    for query in ("alarms", "objects", "executions", "audit", "faults", "snapshot"):
        await op.ok(query)
    await op.request("alarms", limit=10_000)
    await op.request("alarm", object=5)
    assert await rows(rt) == []


async def test_every_refusal_is_one_row(make_runtime: RuntimeFactory, serve: ServerFactory,
                                        client: ClientFactory) -> None:
    """Wrong role, missing field, wrong type, unknown field, no id, unknown op: each one row,
    outcome refused, with the error the client was given; and each an operator event."""
    rt = await quiet(make_runtime)
    server = await serve(rt)
    sub = rt.events.subscribe("operator.")
    viewer = await client(server.url, VIEWER)
    op = await client(server.url, OPERATOR)
    answers = [await viewer.request("fire_now", object="Quiet/q1", reason="viewer tries"),
               await op.request("rearm", reason="no object"),
               await op.request("rearm", object=["Quiet", "q1"]),
               await op.request("abort", execution_id="e1", reson="typo"),
               await op.request("resolve_everything", reason="no such op")]
    await op.send({"op": "clear_fault", "fault_id": "f1", "reason": "no id"})
    assert (await op.wait_for(lambda f: f["type"] == "error"))["error"]
    assert all(a["ok"] is False for a in answers)
    got = await rows(rt)
    assert [r["action"] for r in got] == ["fire_now", "rearm", "rearm", "abort", "unknown_op",
                                          "clear_fault"]
    assert [r["role"] for r in got] == ["viewer"] + ["operator"] * 5
    assert [r["actor"] for r in got] == [address(viewer)] + [address(op)] * 5
    assert [r["target"] for r in got] == ["Quiet/q1", None, "['Quiet', 'q1']", "e1", None,
                                          "f1"]
    assert [r["reason"] for r in got] == ["viewer tries", "no object", None, None,
                                          "no such op", "no id"]
    assert all(not r["ok"] and r["detail"]["outcome"] == "refused" for r in got)
    for row, answer in zip(got, answers):
        assert row["detail"]["error"] == answer["error"]
    assert got[4]["detail"]["op"] == "resolve_everything"
    assert [e.type for e in sub.drain()] == [f"operator.{r['action']}" for r in got]
    status = await rt.alarm(Quiet, "q1")
    assert status is not None and status.state == "pending"  # nothing was done


@pytest.mark.parametrize("op", sorted(op for op, (operator, _) in OPS.items() if operator))
async def test_a_lone_surrogate_in_any_string_field_is_refused_and_audited(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory,
        op: str) -> None:
    """For each command and each of its string fields, "\\ud800" there: refused with a
    clear error, nothing done (no fault injected), and one refused row whose text is
    valid Unicode."""
    rt = await quiet(make_runtime)
    server = await serve(rt)
    c = await client(server.url, OPERATOR)
    _, spec = OPS[op]
    strings = [name for name, f in spec.items() if f.type is str]
    base = {name: "Quiet/q1" if name in ("object", "target") else "x"
            for name, f in spec.items() if f.required}
    for i, name in enumerate(strings):
        fields = {**base, name: "a\\ud800b"}
        await c.send(raw(op, 100 + i, **fields))
        res = await c.wait_for(lambda f, i=i: f.get("id") == 100 + i)
        assert res["ok"] is False and "lone surrogate" in res["error"], (name, res)
    assert rt.faults.list() == []
    got = await rows(rt)
    assert len(got) == len(strings)
    for row, name in zip(got, strings):
        assert row["action"] == op and row["detail"]["outcome"] == "refused"
        text = row["reason"] if name == "reason" else row["target"]
        if name in ("reason", "object", "target", "fault_id", "callback_id", "execution_id"):
            assert text is not None and "\ud800" not in text and text.encode()


async def test_inject_fault_with_a_surrogate_reason_neither_acts_nor_skips_its_row(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory) -> None:
    """The reported case: the fault was injected and its audit row and event were lost.
    Now it is refused, not injected, and audited (with its reason made storable)."""
    rt = await quiet(make_runtime)
    server = await serve(rt)
    sub = rt.events.subscribe("operator.")
    c = await client(server.url, OPERATOR)
    await c.send(raw("inject_fault", 7, target="Quiet/q1", kind="alarm_raise",
                     reason="because \\ud800"))
    res = await c.wait_for(lambda f: f.get("id") == 7)
    assert res["ok"] is False and "lone surrogate" in res["error"]
    assert rt.faults.list() == []
    (row,) = await rows(rt)
    assert row["action"] == "inject_fault" and row["reason"] == "because ?"
    assert row["target"] == "Quiet/q1"
    assert [e.type for e in sub.drain()] == ["operator.inject_fault"]


async def test_rate_limited_commands_are_audited_as_refused(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory) -> None:
    """A command over the budget is refused and still one row."""
    rt = await quiet(make_runtime)
    server = await serve(rt, rate_per_s=0.001)
    c = await client(server.url, OPERATOR)
    seen = 0
    for i in range(101):  # the burst is 100
        res = await c.request("clear_fault", fault_id=f"f{i}", reason="flood")
        seen += "rate limited" in res["error"]
    assert seen == 1
    got = await rows(rt)
    assert len(got) == 101
    assert got[-1]["detail"] == {"outcome": "refused", "error": res["error"]}


async def test_an_unknown_op_name_is_kept_short_in_the_detail(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory) -> None:
    """Whatever a client sends as an op, the action is "unknown_op" (no client names event
    types) and the op as sent is cut."""
    rt = await quiet(make_runtime)
    server = await serve(rt)
    sub = rt.events.subscribe("operator.")
    c = await client(server.url, OPERATOR)
    res = await c.request("x" * 10_000)
    assert res["ok"] is False
    (row,) = await rows(rt)
    assert row["action"] == "unknown_op" and len(row["detail"]["op"]) <= 500
    assert [e.type for e in sub.drain()] == ["operator.unknown_op"]


@pytest.mark.parametrize("token", ["\\ud800", "ok\\udfffok", "\\ud83d"])
async def test_a_hello_token_with_a_lone_surrogate_gets_an_error_not_a_traceback(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory,
        caplog: pytest.LogCaptureFixture, token: str) -> None:
    """An error frame, a 1008 close, one warning line, no exception in the log; the
    server keeps serving."""
    caplog.set_level(logging.INFO)
    rt = await quiet(make_runtime)
    server = await serve(rt)
    c = await client(server.url)
    await c.send('{"op": "hello", "token": "' + token + '"}')
    err = await c.recv()
    assert err["type"] == "error" and "lone surrogate" in err["error"]
    assert close_code(await c.closed()) == 1008
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    warnings = [r for r in caplog.records
                if r.name == "alarmtop.server" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "lone surrogate" in warnings[0].getMessage()
    await client(server.url, VIEWER)  # still serving


async def test_the_audit_query_counts_the_rows_held_after_a_prune(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory) -> None:
    """The retention deletes the oldest rows: the total is how many are held, not the
    newest row's number."""
    rt = await make_runtime(Quiet, audit_max_rows=3)
    await rt.get(Quiet, "q1").arm(60_000)
    server = await serve(rt)
    op = await client(server.url, OPERATOR)
    for i in range(6):
        await op.request("rearm", object="Quiet/none", reason=f"try {i}")
    assert await rt.audit.prune() == 3
    page = await op.ok("audit")
    assert page["total"] == 3 and len(page["rows"]) == 3
    assert [r["reason"] for r in page["rows"]] == ["try 5", "try 4", "try 3"]
