"""The Nodes view: the fleet's nodes as any node's server sees them.

One row per node the fleet has seen: up, DOWN or STOPPED (down ones first), its
id (this console's server marked "this node"), the address other nodes call it
on, how many shards it owns and how long ago it last renewed its leases. The
view is paged, filtered and sorted like every list (`ListScreen`), and asks again
every `REFRESH_S` while shown, because renewal ages move by the second; a change
in the header's node summary asks at once. On SQLite it is one row, always up.
"""

from __future__ import annotations

from textual.app import ComposeResult

from alarmtop.tui.fleet import NODES, styled_node_state
from alarmtop.tui.screens.listed import ListPane, ListScreen

PAGE = 100
# The server reads the fleet at most once a second (server/fleet_view.py): asking more
# often would show the same ages.
REFRESH_S = 1.0


class NodesScreen(ListScreen):
    def make_panes(self) -> list[ListPane]:
        pane = ListPane("node-table", NODES, "Nodes (the fleet)", kinds=("nodes",),
                        size=PAGE, stylers={0: styled_node_state})
        pane.pager.gate.max_age_s = REFRESH_S
        return [pane]

    def body(self) -> ComposeResult:
        yield self.panes[0].table
