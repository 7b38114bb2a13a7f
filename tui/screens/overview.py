"""The overview, like `top`: the most urgent alarms, then executions needing attention."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.widgets import DataTable

from alarmtop.tui.formatting import alarm_cells, execution_cells
from alarmtop.tui.screens.actions import ActionsMixin
from alarmtop.tui.screens.base import selected_key, styled_state
from alarmtop.tui.state import ConsoleState
from alarmtop.tui.widgets.table import ConsoleTable, Row

ALARM_COLUMNS = (("state", 11), ("object", 34), ("due in", 10), ("retry", 6),
                 ("next try", 10), ("last error", 60))
EXECUTION_COLUMNS = (("status", 13), ("execution", 34), ("waiting on / saga", 84),
                     ("updated", 10))


def add_columns(table: DataTable[Any], columns: tuple[tuple[str, int], ...]) -> None:
    for label, width in columns:
        table.add_column(label, width=width)


def state_table(table_id: str) -> ConsoleTable:
    """A table whose first column is an alarm state or execution status, coloured."""
    return ConsoleTable(id=table_id, stylers={0: styled_state})


def alarm_rows(rows: list[dict[str, Any]], now_ms: int) -> list[Row]:
    return [(row["object"], alarm_cells(row, now_ms)) for row in rows]


def execution_rows(rows: list[dict[str, Any]], now_ms: int) -> list[Row]:
    return [(row["execution_id"], execution_cells(row, now_ms)) for row in rows]


class OverviewScreen(ActionsMixin):
    BINDINGS = [*ActionsMixin.ALARM_BINDINGS, *ActionsMixin.EXECUTION_BINDINGS]

    def body(self) -> ComposeResult:
        alarms = state_table("overview-alarms")
        alarms.border_title = "Alarms (most urgent first)"
        add_columns(alarms, ALARM_COLUMNS)
        yield alarms
        executions = state_table("overview-executions")
        executions.border_title = "Executions"
        add_columns(executions, EXECUTION_COLUMNS)
        yield executions

    def refresh_from(self, state: ConsoleState) -> None:
        super().refresh_from(state)
        flt = self.console.filter_text
        self.query_one("#overview-alarms", ConsoleTable).show(
            alarm_rows(state.urgent_alarms(50, flt), state.now_ms))
        self.query_one("#overview-executions", ConsoleTable).show(
            execution_rows(state.urgent_executions(30), state.now_ms))
        self.refresh_actions()

    def _focused(self) -> str | None:
        return self.focused.id if self.focused is not None else "overview-alarms"

    def selected_object(self) -> str | None:
        if self._focused() != "overview-alarms":
            return None
        return selected_key(self.query_one("#overview-alarms", DataTable))

    def selected_execution(self) -> str | None:
        if self._focused() != "overview-executions":
            return None
        return selected_key(self.query_one("#overview-executions", DataTable))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.refresh_actions()
