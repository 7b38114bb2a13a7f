"""The fleet as the console shows it: the Nodes view's columns and cells, and the
header's node count. Pure, no Textual.

A node is `up`, `DOWN` (it stopped renewing its leases without saying goodbye, as
a crash leaves it) or `STOPPED` (it stopped cleanly and handed its shards over).
The header counts both of the last as down: either way its shards are elsewhere.
On SQLite (one node, no fleet) the header shows no node count at all.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from alarmtop.tui.columns import Column, Listing
from alarmtop.tui.formatting import count, duration, first_line

Row = dict[str, Any]
NODE_LABEL = {"up": "up", "down": "DOWN", "stopped": "STOPPED"}
NODE_STYLE = {"up": "green", "DOWN": "bold white on red", "STOPPED": "bold yellow"}
THIS_NODE = " (this node)"


def node_label(row: Row) -> str:
    """up, DOWN or STOPPED; from `up` alone when the server did not say which."""
    state = row.get("state") or ("up" if row.get("up") else "down")
    return NODE_LABEL.get(str(state), str(state).upper())


def styled_node_state(label: str) -> Text:
    return Text(f" {label} ", style=NODE_STYLE.get(label, ""))


def renewal_text(row: Row) -> str:
    """The last renewal's age when the server answered ("1.2s ago"), '-' when none."""
    ago = row.get("renewed_ago_ms")
    return "-" if ago is None else f"{duration(ago)} ago"


def node_cells(row: Row, width: int = 40) -> tuple[str, str, str, str, str]:
    """state, node (this one marked; cut to `width`), address, shards owned, last renewal."""
    name = str(row.get("node_id", "?")) + (THIS_NODE if row.get("this") else "")
    shards = row.get("shards")
    return (node_label(row), first_line(name, width), str(row.get("address") or "-"),
            "-" if shards is None else str(shards), renewal_text(row))


NODES = Listing(
    "nodes", "node",
    (Column("state", 9, "state"), Column("node", 0, "node", 18),
     Column("address", 22, "address", 15), Column("shards", 6, "shards"),
     Column("last renewal", 12, "renewed", 10)),
    key=lambda r: str(r["node_id"]),
    cells=lambda r, now, w: node_cells(r, w), default_sort="state")


def nodes_header(counts: dict[str, Any]) -> Text:
    """The header's node count: "nodes 3", or "NODES 3 (1 DOWN)" on red when one is down;
    nothing when the runtime is not a fleet."""
    summary = counts.get("nodes") or {}
    if not summary.get("fleet"):
        return Text()
    total, down = int(summary.get("total", 0)), int(summary.get("down", 0))
    if down:
        return Text(f" NODES {count(total)} ({count(down)} DOWN) ", style="bold white on red")
    return Text(f"nodes {count(total)}")
