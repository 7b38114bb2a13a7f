"""The fleet's formatting (`tui/fleet.py`) and the header's node count, at 160 and at 80
columns: nothing on SQLite, "nodes 3" on a healthy fleet, a red warning when one is
down that is never cut off."""

from __future__ import annotations

from typing import Any

from alarmtop.tui.fleet import NODES, node_cells, node_label, nodes_header, renewal_text
from alarmtop.tui.state import ConsoleState
from alarmtop.tui.widgets.status_bar import status_text
from tests.tui.test_status_bar import COUNTS

FLEET = {"total": 3, "down": 0, "node_id": "node-a", "fleet": True}


def header(nodes: dict[str, Any] | None, width: int) -> list[str]:
    counts = dict(COUNTS) if nodes is None else {**COUNTS, "nodes": nodes}
    s = ConsoleState(connected=True, counts=counts, faults=[{"id": "f1"}])
    return status_text(s, "demo@127.0.0.1:8765", "operator", width).plain.split("\n")


def test_a_node_is_up_down_or_stopped() -> None:
    assert node_label({"state": "up", "up": True}) == "up"
    assert node_label({"state": "down", "up": False}) == "DOWN"
    assert node_label({"state": "stopped", "up": False}) == "STOPPED"
    assert node_label({"up": False}) == "DOWN"  # a server that does not say which


def test_node_cells_mark_this_node_and_say_the_renewals_age() -> None:
    row = {"node_id": "node-a", "address": "10.0.0.11:7071", "shards": 32,
           "renewed_ago_ms": 1_200, "this": True, "state": "up"}
    assert node_cells(row) == ("up", "node-a (this node)", "10.0.0.11:7071", "32", "1.2s ago")
    sqlite = {"node_id": "box-4242", "address": None, "shards": None, "renewed_ago_ms": None,
              "this": False, "state": "up"}
    assert node_cells(sqlite) == ("up", "box-4242", "-", "-", "-")
    assert renewal_text({"renewed_ago_ms": 47_000}) == "47s ago"
    assert NODES.key(row) == "node-a" and NODES.sort_keys() == [
        "state", "node", "address", "shards", "renewed"]


def test_the_header_shows_no_nodes_on_sqlite() -> None:
    one = {"total": 1, "down": 0, "node_id": "box-4242", "fleet": False}
    assert nodes_header({"nodes": one}).plain == "" and nodes_header({}).plain == ""
    for width in (160, 80):
        assert header(one, width) == header(None, width)


def test_a_healthy_fleet_is_counted_quietly() -> None:
    assert nodes_header({"nodes": FLEET}).plain == "nodes 3"
    assert "nodes 3  faults 1" in header(FLEET, 160)[1]
    assert header(FLEET, 80)[1].startswith(" nodes 3  faults 1")


def test_a_down_node_is_a_red_warning_on_the_second_line_at_any_width() -> None:
    down = {**FLEET, "down": 1}
    text = nodes_header({"nodes": down})
    assert text.plain == " NODES 3 (1 DOWN) " and "red" in str(text.style)
    _, wide_second = header(down, 160)
    assert "NODES 3 (1 DOWN)" in wide_second and wide_second.startswith(" DEAD 2")
    first, second = header(down, 80)
    assert len(first) <= 80 and len(second) <= 80
    assert "DEAD 2" in first and "operator" in first  # the first line as it was
    assert second.startswith("  NODES 3 (1 DOWN) ")
