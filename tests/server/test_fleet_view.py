"""The `nodes` query and the header's node summary on SQLite (one node, always up), over a
real server; the cache that keeps the backend's `nodes()` to one read a second.
(Two nodes on PostgreSQL: tests/fleet/test_fleet_view.py.)"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from alarmtop.core import Runtime
from alarmtop.server.fleet_view import FleetView, node_row
from tests.conftest import RuntimeFactory
from tests.server.conftest import VIEWER, ClientFactory, ServerFactory


def node_id(rt: Runtime) -> str:
    return str(getattr(rt.backend, "node_id"))  # noqa: B009 (not every backend has one)


async def test_on_sqlite_nodes_lists_this_one_node_up(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory) -> None:
    """A viewer may ask; the one row is this runtime, up, marked as the node answering."""
    rt = await make_runtime()
    v = await client((await serve(rt)).url, VIEWER)
    before = int(time.time() * 1000)
    data = await v.ok("nodes")
    assert data["node_id"] == node_id(rt) and data["total"] == 1
    assert before <= data["now_ms"] <= int(time.time() * 1000)  # wall time, not the runtime's
    (row,) = data["rows"]
    assert (row["node_id"], row["up"], row["this"], row["state"]) == (node_id(rt), True, True,
                                                                      "up")
    assert row["renewed_ago_ms"] is None  # nothing to renew on SQLite


async def test_the_snapshot_and_deltas_carry_the_node_summary(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory) -> None:
    rt = await make_runtime()
    v = await client((await serve(rt)).url)
    _, snapshot = await v.hello(VIEWER)
    summary = {"total": 1, "down": 0, "node_id": node_id(rt), "fleet": False}
    assert snapshot["counts"]["nodes"] == summary
    await rt.audit.record("someone", "rearm", "C/a")  # an event: a delta follows
    delta = await v.wait_for(lambda f: f.get("type") == "delta")
    assert delta["counts"]["nodes"] == summary


async def test_nodes_refuses_bad_input_with_a_clear_error(
        make_runtime: RuntimeFactory, serve: ServerFactory, client: ClientFactory) -> None:
    rt = await make_runtime()
    v = await client((await serve(rt)).url, VIEWER)
    bad = await v.request("nodes", sort="uptime")
    assert bad["ok"] is False and "nodes: sort is one of state, node" in bad["error"]
    bad = await v.request("nodes", shard=3)
    assert bad["ok"] is False and "unknown field(s) shard" in bad["error"]
    assert await rt.audit.list() == []  # a query: never audited


class Counting:
    """A stand-in runtime whose `nodes()` counts its calls and can be held or fail."""

    def __init__(self) -> None:
        self.calls = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail: Exception | None = None
        self.backend = object()
        self.node = None  # no fleet node: one runtime
        self.rows: list[dict[str, Any]] = [{"node_id": "n1", "up": True}]

    async def nodes(self) -> list[dict[str, Any]]:
        self.calls += 1
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return self.rows


def view(rt: Counting, now: list[float]) -> FleetView:
    return FleetView(rt, max_age_s=1.0, monotonic=lambda: now[0])  # type: ignore[arg-type]


async def test_the_backend_is_read_at_most_once_a_second_whoever_asks() -> None:
    rt, now = Counting(), [100.0]
    fleet = view(rt, now)
    for _ in range(20):
        await fleet.summary()
        await fleet.query({})
    assert rt.calls == 1
    now[0] += 0.99
    await fleet.rows()
    assert rt.calls == 1
    now[0] += 0.02
    await fleet.rows()
    assert rt.calls == 2


async def test_askers_during_a_read_share_it() -> None:
    rt, now = Counting(), [0.0]
    fleet = view(rt, now)
    rt.gate.clear()
    waiting = [asyncio.ensure_future(fleet.summary()) for _ in range(5)]
    await asyncio.sleep(0.01)
    rt.gate.set()
    summaries = await asyncio.gather(*waiting)
    assert rt.calls == 1 and all(s["total"] == 1 for s in summaries)


async def test_a_failed_read_keeps_the_last_rows_and_says_why() -> None:
    rt, now = Counting(), [0.0]
    fleet = view(rt, now)
    assert (await fleet.summary())["down"] == 0
    rt.fail = ConnectionRefusedError("PostgreSQL is away")
    now[0] += 2
    summary = await fleet.summary()
    assert summary["total"] == 1 and "PostgreSQL is away" in summary["error"]
    page = await fleet.query({})
    assert [r["node_id"] for r in page["rows"]] == ["n1"]
    assert "as last read" in page["note"]
    await fleet.summary()
    assert rt.calls == 2  # not again within the second


async def test_moved_says_when_the_summary_changed_since_it_was_sent() -> None:
    rt, now = Counting(), [0.0]
    fleet = view(rt, now)
    await fleet.summary()
    assert not await fleet.moved()
    rt.rows = [{"node_id": "n1", "up": True}, {"node_id": "n2", "up": False}]
    assert not await fleet.moved()  # cached: the news comes within the second
    now[0] += 1
    assert await fleet.moved()
    assert (await fleet.summary())["down"] == 1
    assert not await fleet.moved()


def test_a_row_says_up_down_or_stopped_and_its_renewal_age() -> None:
    base = {"node_id": "a", "renewed_ms": 9_000, "stopped_ms": None}
    assert node_row({**base, "up": True}, 10_200, "a") | {} == {
        **base, "up": True, "renewed_ago_ms": 1_200, "this": True, "state": "up"}
    assert node_row({**base, "up": False}, 40_000, "b")["state"] == "down"
    stopped = node_row({**base, "up": False, "stopped_ms": 9_500}, 40_000, "b")
    assert (stopped["state"], stopped["this"]) == ("stopped", False)
