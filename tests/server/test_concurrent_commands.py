"""Commands run side by side, each with a deadline, over a real server and real clients.

One object is stuck (an `alarm_delay` fault of 60 s holds its alarm handler, fired
now): a command that needs it fails at its deadline saying what holds it, while a
command on another object and queries on the same connection answer at once.
Clearing the fault ends the delay already running. The runtime is on a virtual
clock, so the 60 s delay is only ever ended by the clear; the deadlines are the
server's own, on the wall clock, kept short here (0.5 s).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from alarmtop.core import VirtualClock
from tests.conftest import RuntimeFactory
from tests.server.conftest import OPERATOR, VIEWER, Client, ClientFactory, Quiet, ServerFactory

DEADLINE_S = 0.5
BOUND_S = 4 * DEADLINE_S  # what a test allows: a generous multiple of the target


async def send(c: Client, cid: int, op: str, **fields: Any) -> float:
    await c.send({"op": op, "id": cid, **fields})
    return time.monotonic()


async def answer(c: Client, cid: int, since: int = 0) -> dict[str, Any]:
    return await c.find(lambda f: f.get("type") == "result" and f.get("id") == cid, since)


async def stuck_runtime(make_runtime: RuntimeFactory, clock: VirtualClock) -> Any:
    """`Quiet/stuck`'s alarm is running and held by a 60 s delay, 12 s into it;
    `Quiet/other` has an alarm an hour away."""
    rt = await make_runtime(Quiet)
    await rt.get(Quiet, "stuck").arm(3_600_000)
    await rt.get(Quiet, "other").arm(3_600_000)
    rt.faults.inject("Quiet/stuck", "alarm_delay", times=1, seconds=60)
    await rt.fire_now(Quiet, "stuck")
    await clock.advance(12)
    status = await rt.alarm(Quiet, "stuck")
    assert status is not None and status.state == "running"
    return rt


async def test_a_stuck_object_fails_only_its_own_commands_with_the_reason(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory) -> None:
    """Three frames on one connection: fire_now on the stuck object, then re-arm on
    another object and a query. The last two answer long before the deadline; the
    first fails at it, naming what holds the object, and is audited as failed with
    that reason. Answers come by id, in the order they end."""
    rt = await stuck_runtime(make_runtime, clock)
    server = await serve(rt, command_timeout_s=DEADLINE_S)
    c = await client(server.url, OPERATOR)
    mark = c.mark()
    sent = {1: await send(c, 1, "fire_now", object="Quiet/stuck", reason="kick it"),
            2: await send(c, 2, "rearm", object="Quiet/other", reason="sooner"),
            3: await send(c, 3, "alarms")}
    other, query = await answer(c, 2, mark), await answer(c, 3, mark)
    took = {cid: time.monotonic() - sent[cid] for cid in (2, 3)}
    assert other["ok"] is True and other["data"]["object"] == "Quiet/other", other
    assert query["ok"] is True and query["data"]["total"] == 2, query
    stuck = await answer(c, 1, mark)
    took[1] = time.monotonic() - sent[1]
    assert stuck["ok"] is False
    assert stuck["error"] == ("Quiet/stuck is busy running its alarm (started 12 s ago); "
                              f"nothing was done after waiting {DEADLINE_S:g} s for it")
    order = [f["id"] for f in c.seen[mark:] if f.get("type") == "result"]
    assert order.index(1) > max(order.index(2), order.index(3)), order
    assert took[2] < DEADLINE_S and took[3] < DEADLINE_S, took
    assert DEADLINE_S <= took[1] < BOUND_S, took
    print(f"\nanswers: other object {took[2] * 1000:.0f} ms, query {took[3] * 1000:.0f} ms, "
          f"stuck object {took[1] * 1000:.0f} ms (deadline {DEADLINE_S * 1000:.0f} ms)")

    rows = {r["action"]: r for r in await rt.audit.list()}
    assert rows["fire_now"]["ok"] is False and rows["fire_now"]["reason"] == "kick it"
    assert rows["fire_now"]["detail"]["error"] == stuck["error"]
    assert rows["rearm"]["ok"] is True
    # Nothing of the failed command was applied: the alarm is still the running attempt.
    status = await rt.alarm(Quiet, "stuck")
    assert status is not None and status.state == "running"
    # The connection stays usable.
    assert (await c.ok("alarm", object="Quiet/stuck"))["state"] == "running"


async def test_queries_keep_answering_while_commands_wait(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory) -> None:
    """Several commands on the stuck object queued on one connection do not hold up the
    queries sent after them: each query answers in well under the deadline."""
    rt = await stuck_runtime(make_runtime, clock)
    server = await serve(rt, command_timeout_s=DEADLINE_S)
    c = await client(server.url, OPERATOR)
    mark = c.mark()
    for cid in range(1, 6):
        await send(c, cid, "rearm", object="Quiet/stuck")
    for cid in range(10, 20):
        started = await send(c, cid, ("alarms", "objects", "faults", "audit", "snapshot")[
            cid % 5])
        res = await answer(c, cid, mark)
        assert res["ok"] is True, res
        assert time.monotonic() - started < DEADLINE_S
    for cid in range(1, 6):
        res = await answer(c, cid, mark)
        assert res["ok"] is False and "busy running its alarm" in res["error"]


async def test_clearing_the_delay_fault_ends_the_delay_that_is_running(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory) -> None:
    """The fault is listed while its delay runs (though used up); clearing it over the
    channel lets the handler go on at once: it runs, and no virtual time passed."""
    rt = await stuck_runtime(make_runtime, clock)
    server = await serve(rt, command_timeout_s=DEADLINE_S)
    c = await client(server.url, OPERATOR)
    (fault,) = (await c.ok("faults"))["rows"]
    assert (fault["kind"], fault["remaining"]) == ("alarm_delay", 0)
    before = clock.now_ms()
    await c.ok("clear_fault", fault_id=fault["id"], reason="enough")
    await clock.advance(0)
    assert clock.now_ms() == before
    assert await rt.alarm(Quiet, "stuck") is None  # it ran and succeeded: no alarm left
    assert await rt.get(Quiet, "stuck").fired() == 1
    assert (await c.ok("faults"))["rows"] == []
    assert (await c.ok("fire_now", object="Quiet/other"))["object"] == "Quiet/other"


async def test_a_viewer_is_refused_at_once_even_on_a_stuck_object(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory) -> None:
    rt = await stuck_runtime(make_runtime, clock)
    server = await serve(rt, command_timeout_s=DEADLINE_S)
    v = await client(server.url, VIEWER)
    started = time.monotonic()
    res = await v.request("fire_now", object="Quiet/stuck")
    assert res["ok"] is False and "operator role" in res["error"]
    assert time.monotonic() - started < DEADLINE_S


async def test_a_command_past_its_deadline_is_left_to_finish_and_says_so(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A command that got past every wait and is slow in its write (here a write held
    back on purpose) is answered at its deadline as failed, naming the deadline, and
    audited so; the write is not cut off: it lands when it can, and its late outcome
    is logged."""
    rt = await make_runtime(Quiet)
    await rt.get(Quiet, "slow").arm(3_600_000)
    server = await serve(rt, command_timeout_s=DEADLINE_S)
    c = await client(server.url, OPERATOR)
    release = asyncio.Event()
    real = rt.scheduler.commit

    async def held_commit(key: Any, tr: Any, **more: Any) -> Any:
        await release.wait()
        return await real(key, tr, **more)

    monkeypatch.setattr(rt.scheduler, "commit", held_commit)
    at = clock.now_ms() + 60_000
    started = time.monotonic()
    res = await c.request("rearm", object="Quiet/slow", at_ms=at, reason="slow disk")
    took = time.monotonic() - started
    assert res["ok"] is False
    assert res["error"].startswith(f"rearm Quiet/slow: no outcome within the {DEADLINE_S:g} s "
                                   "command deadline; it was left to finish"), res
    assert DEADLINE_S <= took < BOUND_S
    (row,) = await rt.audit.list()
    assert row["ok"] is False and row["detail"]["error"] == res["error"]
    with caplog.at_level(logging.WARNING, logger="alarmtop.server"):
        release.set()
        for _ in range(200):
            status = await rt.alarm(Quiet, "slow")
            if status is not None and status.next_attempt_ms == at:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
    assert status is not None and status.next_attempt_ms == at  # the write landed whole
    assert len(await rt.audit.list()) == 1  # one command, one row
    assert any("rearm Quiet/slow, answered as timed out" in r.getMessage() and
               r.getMessage().endswith(": done") for r in caplog.records), caplog.text


async def test_a_query_past_its_deadline_is_answered_as_failed(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    rt = await make_runtime(Quiet)
    server = await serve(rt, command_timeout_s=DEADLINE_S)
    c = await client(server.url, VIEWER)
    hang = asyncio.Event()

    async def stuck_page(*args: Any, **kwargs: Any) -> Any:
        await hang.wait()

    # (its counts are the counters, read without waiting: the page is what waits)
    monkeypatch.setattr(rt, "execution_page", stuck_page)
    res = await c.request("executions")
    assert res["ok"] is False
    assert res["error"] == (f"executions: no answer within the {DEADLINE_S:g} s deadline; "
                            "nothing was changed (a query changes nothing)")
    assert (await c.ok("alarms"))["total"] == 0


async def test_an_operator_tool_past_its_deadline_is_one_row_too(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A snooze held up in its write gets the same promise as a re-arm: answered at its
    deadline as failed, one audit row that says so (and by how much it was asked for),
    and no second row when it lands after all; its late outcome is logged."""
    rt = await make_runtime(Quiet)
    await rt.get(Quiet, "slow").arm(3_600_000)
    server = await serve(rt, command_timeout_s=DEADLINE_S)
    c = await client(server.url, OPERATOR)
    release = asyncio.Event()
    real = rt.scheduler.commit

    async def held_commit(key: Any, tr: Any, **more: Any) -> Any:
        await release.wait()
        return await real(key, tr, **more)

    monkeypatch.setattr(rt.scheduler, "commit", held_commit)
    res = await c.request("snooze_alarm", object="Quiet/slow", by_ms=60_000, reason="later")
    assert res["ok"] is False and "no outcome within" in res["error"], res
    (row,) = await rt.audit.list()
    assert (row["action"], row["ok"], row["target"]) == ("snooze_alarm", False, "Quiet/slow")
    assert row["detail"] == {"outcome": "failed", "error": res["error"], "by_ms": 60_000}
    with caplog.at_level(logging.WARNING, logger="alarmtop.server"):
        release.set()
        for _ in range(200):
            status = await rt.alarm(Quiet, "slow")
            if status is not None and status.next_attempt_ms == clock.now_ms() + 3_660_000:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
    assert status is not None and status.next_attempt_ms == clock.now_ms() + 3_660_000
    assert len(await rt.audit.list()) == 1  # one command, one row
    assert any("snooze_alarm Quiet/slow, answered as timed out" in r.getMessage() and
               r.getMessage().endswith(": done") for r in caplog.records), caplog.text
