"""The overview, like `top`: the most urgent alarms, then executions needing attention.

Both tables are live pages of the server's listings (its first 50 alarms and 30
executions, most urgent first), not the rows the feed happened to mention.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.widgets import DataTable

from alarmtop.tui.columns import ALARMS, EXECUTIONS
from alarmtop.tui.screens.listed import ListPane, ListScreen
from alarmtop.tui.screens.tools import ToolsMixin

ALARM_ROWS = 50
EXECUTION_ROWS = 30


class OverviewScreen(ToolsMixin, ListScreen):
    BINDINGS = [*ToolsMixin.ALARM_BINDINGS, *ToolsMixin.EXECUTION_BINDINGS,
                *ToolsMixin.ALARM_TOOL_BINDINGS, *ToolsMixin.EXECUTION_TOOL_BINDINGS,
                *ListScreen.LIST_BINDINGS]

    def make_panes(self) -> list[ListPane]:
        return [ListPane("overview-alarms", ALARMS, "Alarms (most urgent first)",
                         kinds=("alarms",), size=ALARM_ROWS),
                ListPane("overview-executions", EXECUTIONS, "Executions",
                         kinds=("executions",), size=EXECUTION_ROWS)]

    def body(self) -> ComposeResult:
        yield self.panes[0].table
        yield self.panes[1].table

    def selected_alarm(self) -> dict[str, Any] | None:
        pane = self.pane()
        return pane.row(pane.table.selected) if pane is self.panes[0] else None

    def selected_execution(self) -> dict[str, Any] | None:
        pane = self.pane()
        return pane.row(pane.table.selected) if pane is self.panes[1] else None

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        pane = self.pane()
        key = pane.table.selected
        if key:
            self.console.drill("alarm" if pane is self.panes[0] else "execution", key)
