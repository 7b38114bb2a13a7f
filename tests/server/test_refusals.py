"""Refused commands are counted whole but coalesced in the audit log: the reported case
was a viewer filling the disk (a ~1.6 KB row per refused frame, 757 rows a second from
20 connections). The ledger's decisions are tested pure; then over a real server with
real clients, on the runtime's virtual clock: a flood of refusals from one address is
its first rows and one summary row per window, saying how many of which kinds, while
every frame is still answered; another role's refusals keep their own rows; and the
counts of a window that has not ended are written when the server stops."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest

from alarmtop.core import Runtime, VirtualClock
from alarmtop.server.refusals import FULL_ROWS, WINDOW_MS, RefusalLedger, host_of
from tests.conftest import RuntimeFactory
from tests.server.conftest import (
    OPERATOR,
    TICK_S,
    VIEWER,
    WAIT_S,
    Client,
    ClientFactory,
    Quiet,
    ServerFactory,
)

# -- the ledger, pure ---------------------------------------------------------------------


def test_the_first_rows_of_a_window_are_written_the_rest_counted() -> None:
    ledger = RefusalLedger(window_ms=1000, full_rows=2)
    key = ("10.0.0.9", "viewer")
    assert [ledger.note(key, "fire_now", t, "10.0.0.9:1", "no") for t in (0, 1, 2)] \
        == [True, True, False]
    ledger.note(key, "rearm", 3, "10.0.0.9:2", "still no")
    assert ledger.take(999) == []  # the window has not ended
    (summary,) = ledger.take(1000)
    assert (summary.count, dict(summary.ops)) == (2, {"fire_now": 1, "rearm": 1})
    assert summary.clients == ["10.0.0.9:1", "10.0.0.9:2"]
    assert (summary.start_ms, summary.end_ms, summary.last_error) == (0, 1000, "still no")
    assert summary.text(2) == ("2 refused commands of kinds fire_now x1, rearm x1 from "
                               "10.0.0.9 in 1 s (past the first 2, counted in this one row)")
    assert ledger.take(5000) == []  # given once
    assert ledger.note(key, "fire_now", 5000, "10.0.0.9:1", "no")  # a new window


def test_keys_have_windows_of_their_own_and_stop_takes_every_count() -> None:
    ledger = RefusalLedger(window_ms=1000, full_rows=0)
    ledger.note(("a", "viewer"), "rearm", 0, "a:1", "x")
    ledger.note(("a", "operator"), "rearm", 500, "a:2", "x")
    assert [s.role for s in ledger.take(1200)] == ["viewer"]
    assert [s.role for s in ledger.take_all()] == ["operator"]
    assert ledger.take_all() == []


def test_a_window_without_overflow_writes_no_summary() -> None:
    ledger = RefusalLedger(window_ms=1000, full_rows=5)
    for t in range(5):
        assert ledger.note(("a", "viewer"), "rearm", t, "a:1", "x")
    assert ledger.take(10_000) == [] and ledger.take_all() == []


@pytest.mark.parametrize(("address", "host"), [("127.0.0.1:50312", "127.0.0.1"),
                                               ("[::1]:5", "::1"), ("::1:5", "::1"),
                                               ("unix-socket", "unix-socket")])
def test_the_host_of_an_address(address: str, host: str) -> None:
    assert host_of(address) == host


def test_a_ledger_needs_a_window() -> None:
    with pytest.raises(ValueError, match="refusal window"):
        RefusalLedger(window_ms=0)


# -- over a real server -------------------------------------------------------------------

CONNECTIONS = 20
EACH = 50  # within a connection's burst of commands: refused for the role, not the pace


async def rows(rt: Runtime) -> list[dict[str, Any]]:
    return list(reversed(await rt.audit.list(5000)))


async def refused_flood(clients: list[Client]) -> list[dict[str, Any]]:
    """EACH operator commands from each viewer, sent back to back; every answer."""
    answers = []
    for c in clients:
        for i in range(EACH):
            op = "fire_now" if i % 5 else "rearm"
            await c.send({"op": op, "id": i, "object": "Quiet/q1"})
    for c in clients:
        seen = 0
        while seen < EACH:
            frame = await c.recv()
            if frame.get("type") == "result":
                answers.append(frame)
                seen += 1
    return answers


async def test_a_flood_of_refusals_is_its_first_rows_and_one_summary(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory) -> None:
    """1,000 refused commands from 20 viewer connections: every one answered with its
    refusal, FULL_ROWS rows of their own, and when the window ends one row counting the
    other 990 by kind (it used to be 1,000 rows). The next window starts afresh."""
    rt = await make_runtime(Quiet)
    await rt.get(Quiet, "q1").arm(600_000)
    server = await serve(rt)
    viewers = [await client(server.url, VIEWER) for _ in range(CONNECTIONS)]
    answers = await refused_flood(viewers)
    assert len(answers) == CONNECTIONS * EACH
    assert all(not a["ok"] and "needs the operator role" in a["error"] for a in answers)
    assert len(await rows(rt)) == FULL_ROWS

    await clock.advance(WINDOW_MS / 1000)
    await until_rows(rt, FULL_ROWS + 1)
    got = await rows(rt)
    summary = got[-1]
    by_kind = Counter(r["action"] for r in got[:FULL_ROWS]) + Counter(summary["detail"]["ops"])
    assert by_kind == {"rearm": CONNECTIONS * EACH // 5, "fire_now": CONNECTIONS * EACH * 4 // 5}
    total = CONNECTIONS * EACH - FULL_ROWS
    assert summary["action"] == "refused_commands" and summary["ok"] is False
    assert (summary["actor"], summary["role"], summary["target"]) == ("127.0.0.1", "viewer",
                                                                     None)
    detail = summary["detail"]
    assert detail["count"] == total and sum(detail["ops"].values()) == total
    assert set(detail["ops"]) == {"rearm", "fire_now"}
    assert detail["to_ms"] - detail["from_ms"] == WINDOW_MS
    assert len(detail["clients"]) == 5 and "needs the operator role" in detail["error"]
    assert summary["reason"].startswith(f"{total} refused commands of kinds fire_now x")
    assert len(json.dumps(got)) < 20 * 1024  # 11 rows, not 1,000

    await viewers[0].request("fire_now", object="Quiet/q1")  # a new window: its own row
    assert [r["action"] for r in (await rows(rt))[FULL_ROWS + 1:]] == ["fire_now"]


async def until_rows(rt: Runtime, n: int) -> None:
    """Until the audit log holds `n` rows: the summary is written by the server's own
    task at its next tick after the window ended (bounded wall time)."""
    async with asyncio.timeout(WAIT_S):
        while True:
            if len(await rt.audit.list(5000)) >= n:
                return
            await asyncio.sleep(TICK_S)  # the server's tick: look again after it


async def test_an_operators_refusal_keeps_its_own_row_during_a_viewers_flood(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory) -> None:
    """Windows are per address and role: an operator's mistake on the flooding host is
    written in full."""
    rt = await make_runtime(Quiet)
    server = await serve(rt)
    await refused_flood([await client(server.url, VIEWER) for _ in range(2)])
    op = await client(server.url, OPERATOR)
    res = await op.request("rearm", reason="no object")
    assert res["ok"] is False
    last = (await rows(rt))[-1]
    assert (last["role"], last["action"], last["reason"]) == ("operator", "rearm",
                                                              "no object")


async def test_the_counts_of_an_open_window_are_written_at_stop(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory) -> None:
    rt = await make_runtime(Quiet)
    server = await serve(rt)
    await refused_flood([await client(server.url, VIEWER)])
    assert len(await rows(rt)) == FULL_ROWS
    await server.stop()
    got = await rows(rt)
    assert len(got) == FULL_ROWS + 1 and got[-1]["detail"]["count"] == EACH - FULL_ROWS
