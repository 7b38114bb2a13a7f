"""Any node's /ops shows the whole fleet: the `nodes` query and the header's node summary
from two in-process nodes on a real PostgreSQL, over real servers and clients; a node
that stops (cleanly, or as a crash leaves it) shows as not up; each audit row names
the node that ran the command."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from websockets.asyncio.client import connect

from alarmtop.core import Runtime
from alarmtop.server.app import OpsServer
from alarmtop.server.auth import Tokens
from tests.fleet.conftest import SHARDS, NodeFactory, backend_of, balance
from tests.server.conftest import OPERATOR, VIEWER, Client

TICK_S = 0.02
Serve = Callable[[Runtime], Awaitable[tuple[OpsServer, Client]]]


# Two nodes, two ops servers and their clients per test, set up and torn down: on a
# loaded machine (a CPU hog beside three test processes) one teardown took over 60 s.
pytestmark = pytest.mark.timeout(180)

@pytest.fixture
async def served() -> AsyncIterator[Serve]:
    """An ops server on 127.0.0.1:0 for a node, and an operator client on it; servers
    stop before the nodes do (the `node` fixture is set up first, torn down last)."""
    servers: list[OpsServer] = []
    clients: list[Client] = []

    async def start(rt: Runtime) -> tuple[OpsServer, Client]:
        server = OpsServer(rt, Tokens(operator=OPERATOR, viewer=VIEWER), "127.0.0.1", 0,
                           tick_s=TICK_S)
        await server.start()
        servers.append(server)
        c = Client(await connect(server.url, open_timeout=5))
        await c.hello(OPERATOR)
        clients.append(c)
        return server, c

    yield start
    for c in clients:
        await c.ws.close()
    for server in reversed(servers):
        await server.stop()


def by_id(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["node_id"]: r for r in data["rows"]}


async def test_each_node_lists_the_whole_fleet_and_names_itself(
        node: NodeFactory, served: Serve) -> None:
    a = await node("a")
    b = await node("b")
    await balance(a, b)
    _, on_a = await served(a)
    _, on_b = await served(b)
    from_a, from_b = await on_a.ok("nodes"), await on_b.ok("nodes")
    assert (from_a["node_id"], from_b["node_id"]) == ("a", "b")
    for data, me in ((from_a, "a"), (from_b, "b")):
        rows = by_id(data)
        assert set(rows) == {"a", "b"} and data["total"] == 2
        assert all(r["up"] and r["state"] == "up" for r in rows.values())
        assert sum(r["shards"] for r in rows.values()) == SHARDS
        assert {n for n, r in rows.items() if r["this"]} == {me}
        assert rows["a"]["address"] and rows["a"]["address"] != rows["b"]["address"]
        assert all(0 <= r["renewed_ago_ms"] < 30_000 for r in rows.values())
    assert (await on_a.ok("nodes", filter="b"))["total"] == 1
    assert [r["node_id"] for r in (await on_a.ok("nodes", sort="node", desc=True))["rows"]] \
        == ["b", "a"]


async def test_a_clean_stop_shows_the_node_down_in_the_header_and_the_view(
        node: NodeFactory, served: Serve) -> None:
    """No event on a's bus says b stopped: the feed's delta comes from the summary's
    change alone (read at most once a second), within a few seconds."""
    a = await node("a")
    b = await node("b")
    await balance(a, b)
    _, on_a = await served(a)
    snapshot = next(f for f in on_a.seen if f.get("type") == "snapshot")
    assert snapshot["counts"]["nodes"] == {"total": 2, "down": 0, "node_id": "a",
                                           "fleet": True}
    mark = on_a.mark()
    await b.stop()
    delta = await on_a.find(lambda f: f.get("type") == "delta"
                            and f["counts"]["nodes"]["down"] == 1, since=mark, within=8)
    assert delta["counts"]["nodes"] == {"total": 2, "down": 1, "node_id": "a", "fleet": True}
    await backend_of(a).keep_leases_once()
    # The server's cache may hold rows from before a's claim for up to a second.
    rows = by_id(await wait_nodes(on_a, lambda rows: rows["a"]["shards"] == SHARDS))
    assert (rows["b"]["up"], rows["b"]["state"], rows["b"]["shards"]) == (False, "stopped", 0)
    assert rows["b"]["stopped_ms"] is not None
    # Down ones first in the view's own order.
    assert [r["node_id"] for r in (await on_a.ok("nodes"))["rows"]] == ["b", "a"]


async def test_a_node_that_stopped_renewing_shows_down(node: NodeFactory,
                                                       served: Serve) -> None:
    """A node gone without a goodbye (its row aged as a crash leaves it) is down, not
    stopped."""
    a = await node("a")
    b = await node("b")
    await balance(a, b)
    _, on_a = await served(a)
    await b.stop()
    async with backend_of(a)._require_pool().acquire() as conn:
        await conn.execute("UPDATE alarmtop.nodes SET stopped_ms = NULL, renewed_ms = 0 "
                           "WHERE node_id = 'b'")
    rows = by_id(await wait_nodes(on_a, lambda rows: rows["b"]["state"] == "down"))
    assert rows["b"]["up"] is False and rows["b"]["renewed_ago_ms"] > 10**9


async def test_each_audit_row_names_the_node_that_ran_the_command(
        node: NodeFactory, served: Serve) -> None:
    a = await node("a")
    b = await node("b")
    await balance(a, b)
    _, on_a = await served(a)
    _, on_b = await served(b)
    await on_a.ok("inject_fault", target="Counter/x", kind="alarm_raise", reason="from a")
    await on_b.ok("inject_fault", target="Counter/y", kind="alarm_raise", reason="from b")
    rows = (await on_a.ok("audit"))["rows"]  # fleet-wide: b's row is seen from a
    assert {(r["reason"], r["node"]) for r in rows} == {("from a", "a"), ("from b", "b")}
    assert [r["reason"] for r in (await on_a.ok("audit", filter="b"))["rows"]] == ["from b"]


async def wait_nodes(c: Client, cond: Callable[[dict[str, dict[str, Any]]], bool],
                     within: float = 8.0) -> dict[str, Any]:
    """Ask `nodes` until its rows satisfy `cond` (the server caches them for a second)."""
    deadline = time.monotonic() + within
    while True:
        data = await c.ok("nodes")
        if cond(by_id(data)):
            return dict(data)
        if time.monotonic() > deadline:
            raise AssertionError(f"nodes never got there: {data}")
        await asyncio.sleep(0.1)
