"""The Nodes view against a real server over a real runtime on SQLite: one node, this
one, always up; the header says nothing of nodes; key 0, the palette and the help
reach it."""

from __future__ import annotations

from typing import Any

from textual.widgets import Markdown

from alarmtop.tui.commands import console_commands
from alarmtop.tui.screens.lists import HelpScreen
from alarmtop.tui.screens.nodes import NodesScreen
from tests.tui.conftest import SIZE, Harness, cell_text, status_text, table_keys, until

Pilot = Any


async def test_on_sqlite_the_nodes_view_is_this_one_node_up(harness: Harness) -> None:
    app = harness.console()
    me = harness.rt.backend.node_id  # type: ignore[attr-defined]
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.state.connected and app.state.counts, "the snapshot")
        await pilot.press("0")
        await until(pilot, lambda: isinstance(app.screen, NodesScreen)
                    and table_keys(pilot, "#node-table") == [me], "the one node")
        assert cell_text(pilot, "#node-table", me) == [" up ", f"{me} (this node)", "-", "-",
                                                       "-"]
        assert app.state.counts["nodes"]["fleet"] is False
        assert "nodes" not in status_text(pilot).lower()  # nothing alarming, nothing at all
        titles = [c.title for c in console_commands(app, app.screen)]
        assert "Go to Nodes (0)" in titles
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help")
        help_text = app.screen.query_one(Markdown).source
        assert "`0` nodes" in help_text
