"""The console on one node of a fleet of two on a real PostgreSQL: the Nodes view lists
both, this one marked; when the other stops, the header warns "NODES 2 (1 DOWN)" and
the view shows it STOPPED, first, without a key pressed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from alarmtop.core import Runtime
from alarmtop.server.app import OpsServer
from alarmtop.server.auth import Tokens
from alarmtop.tui.app import AlarmtopApp
from alarmtop.tui.client import WebSocketOpsClient
from alarmtop.tui.screens.nodes import NodesScreen
from tests.fleet.conftest import SHARDS, NodeFactory, backend_of, balance
from tests.tui.conftest import OPERATOR, SIZE, VIEWER, cell_text, status_text, table_keys, until

Pilot = Any


@pytest.fixture
async def console_on() -> AsyncIterator[Any]:
    """A server on a node and a console on it; both closed before the nodes stop."""
    made: list[tuple[OpsServer, AlarmtopApp]] = []

    async def start(rt: Runtime) -> AlarmtopApp:
        server = OpsServer(rt, Tokens(operator=OPERATOR, viewer=VIEWER), "127.0.0.1", 0,
                           tick_s=0.02)
        await server.start()
        app = AlarmtopApp(WebSocketOpsClient(server.url, VIEWER, timeout_s=8.0),
                          target=f"a@127.0.0.1:{server.port}")
        made.append((server, app))
        return app

    yield start
    for server, app in reversed(made):
        await app.client.close()
        await server.stop()


async def test_the_nodes_view_and_the_header_follow_a_node_going_down(
        node: NodeFactory, console_on: Any) -> None:
    a = await node("a")
    b = await node("b")
    await balance(a, b)
    app = await console_on(a)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("0")
        await until(pilot, lambda: isinstance(app.screen, NodesScreen)
                    and table_keys(pilot, "#node-table") == ["a", "b"], "both nodes")
        a_cells, b_cells = (cell_text(pilot, "#node-table", k) for k in ("a", "b"))
        assert (a_cells[0], a_cells[1]) == (" up ", "a (this node)")
        assert (b_cells[0], b_cells[1]) == (" up ", "b")
        assert int(a_cells[3]) + int(b_cells[3]) == SHARDS and a_cells[4].endswith(" ago")
        assert "nodes 2" in status_text(pilot) and "DOWN" not in status_text(pilot)
        await b.stop()
        await backend_of(a).keep_leases_once()
        await until(pilot, lambda: "NODES 2 (1 DOWN)" in status_text(pilot),
                    "the header's warning")
        await until(pilot, lambda: table_keys(pilot, "#node-table") == ["b", "a"]
                    and cell_text(pilot, "#node-table", "b")[0] == " STOPPED ",
                    "b stopped, first")
        assert cell_text(pilot, "#node-table", "b")[3] == "0"
