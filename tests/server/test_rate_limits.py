"""The per-connection rate limits over a real server: commands have their own budget, and
the console's queries (pages, the pages around them, the detail under the cursor) have a
far larger one, so a console paging fast is never cut off and never uses up the budget
of the operator's commands; a client flooding queries is still limited and closed."""

from __future__ import annotations

import json
from typing import Any

from alarmtop.core import Runtime
from alarmtop.server.ops_channel import MAX_REJECTED, QUERY_BURST, RATE_BURST
from tests.conftest import RuntimeFactory
from tests.server.conftest import (
    OPERATOR,
    Client,
    ClientFactory,
    Quiet,
    ServerFactory,
    close_code,
)


async def runtime_with_alarms(make_runtime: RuntimeFactory, n: int = 300) -> Runtime:
    rt = await make_runtime(Quiet)
    for i in range(n):
        await rt.get(Quiet, f"q{i:04d}").arm(60_000 + i)
    return rt


async def pipelined(c: Client, frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Send every frame without waiting, then read one answer per frame, by id."""
    for f in frames:
        await c.ws.send(json.dumps(f))
    want = {f["id"] for f in frames}
    got: dict[int, dict[str, Any]] = {}
    while want - set(got):
        frame = await c.recv(within=30)
        if frame.get("type") == "result" and frame["id"] in want:
            got[frame["id"]] = frame
    return [got[f["id"]] for f in frames]


def console_paging(n_keys: int, first_id: int = 1) -> list[dict[str, Any]]:
    """What the alarms view sends for `n_keys` page keys: the window of pages around the
    one shown (4 pages of 100) and the detail of the row under the cursor."""
    frames: list[dict[str, Any]] = []
    for k in range(n_keys):
        offset = max(0, (k % 3) * 100 - 100)
        frames.append({"op": "alarms", "id": first_id + 2 * k, "offset": offset, "limit": 400,
                       "state": "pending"})
        frames.append({"op": "alarm", "id": first_id + 2 * k + 1,
                       "object": f"Quiet/q{k % 300:04d}"})
    return frames


async def test_a_console_paging_flat_out_is_never_cut_off(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory) -> None:
    """500 page keys' worth of queries (1,000 frames, more than a console sends in half a
    minute of a held key) written back to back, on the default limits: every one is
    answered ok, the connection stays open, and commands still have their whole burst."""
    rt = await runtime_with_alarms(make_runtime)
    server = await serve(rt)
    c = await client(server.url, OPERATOR)
    frames = console_paging(500)
    assert len(frames) <= QUERY_BURST
    answers = await pipelined(c, frames)
    assert all(a["ok"] for a in answers), [a for a in answers if not a["ok"]][:3]
    assert answers[0]["data"]["total"] == 300
    commands = [{"op": "clear_fault", "id": 10_000 + i, "fault_id": f"f{i}"}
                for i in range(int(RATE_BURST) - 5)]
    replies = await pipelined(c, commands)
    assert not [r for r in replies if "rate limited" in r["error"]]
    assert c.ws.close_code is None


async def test_queries_do_not_spend_the_command_budget(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory) -> None:
    """With commands limited to about nothing past their burst, a client that has spent
    that burst is refused commands but still gets every query it asks."""
    rt = await runtime_with_alarms(make_runtime, 10)
    server = await serve(rt, rate_per_s=0.001)
    c = await client(server.url, OPERATOR)
    spent = await pipelined(c, [{"op": "clear_fault", "id": i, "fault_id": "f"}
                                for i in range(int(RATE_BURST) + 1)])
    assert "rate limited: at most 0.001 commands" in spent[-1]["error"]
    answers = await pipelined(c, console_paging(100, first_id=1000))
    assert all(a["ok"] for a in answers)
    res = await c.request("clear_fault", fault_id="f")
    assert "rate limited" in res["error"]


async def test_a_query_flood_is_still_limited_and_closed(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory) -> None:
    """Queries have a ceiling too: past the burst at a low rate, "rate limited: at most N
    queries per second", then a 1008 close after MAX_REJECTED in a row."""
    rt = await runtime_with_alarms(make_runtime, 1)
    server = await serve(rt, query_rate_per_s=1.0)
    c = await client(server.url, OPERATOR)
    n = int(QUERY_BURST) + MAX_REJECTED + 5
    for i in range(n):
        await c.ws.send(json.dumps({"op": "faults", "id": i}))
    exc = await c.closed(within=30)
    assert close_code(exc) == 1008
    results = [f for f in c.seen if f.get("type") == "result"]
    limited = [f for f in results if not f["ok"]]
    assert len(results) - len(limited) >= QUERY_BURST - 1
    assert len(limited) >= MAX_REJECTED - 1
    assert "rate limited: at most 1 queries per second" in limited[0]["error"]
