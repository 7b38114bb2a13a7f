"""Executions, live, with the selected one's detail: scrollable, every history event."""

from __future__ import annotations

import contextlib
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.css.query import NoMatches
from textual.widgets import DataTable, Static

from alarmtop.tui.columns import EXECUTIONS
from alarmtop.tui.detail import detail_text
from alarmtop.tui.paging import RefreshGate
from alarmtop.tui.screens.listed import ListPane, ListScreen
from alarmtop.tui.screens.loader import Loader
from alarmtop.tui.screens.tools import ToolsMixin
from alarmtop.tui.state import ConsoleState

PAGE = 100


class ExecutionsScreen(ToolsMixin, ListScreen):
    BINDINGS = [*ToolsMixin.EXECUTION_BINDINGS, *ToolsMixin.EXECUTION_TOOL_BINDINGS,
                ToolsMixin.ALARM_BINDINGS[2], *ListScreen.LIST_BINDINGS]

    def __init__(self) -> None:
        super().__init__()
        self.detail: dict[str, Any] | None = None
        self._detail_for: str | None = None  # the execution the pane shows
        self._detail_asked: str | None = None  # and the one last asked for
        self._detail_version = -1
        self._detail_shown: Text | None = None
        self.details = Loader(self, self._load_detail, RefreshGate(), "detail", paced=False)

    def make_panes(self) -> list[ListPane]:
        return [ListPane("execution-page", EXECUTIONS, "Executions", kinds=("executions",),
                         size=PAGE)]

    def body(self) -> ComposeResult:
        with Horizontal(classes="split"):
            yield self.panes[0].table
            with VerticalScroll(id="execution-detail", classes="detail"):
                yield Static(id="execution-detail-text")

    def selected_execution(self) -> dict[str, Any] | None:
        pane = self.panes[0]
        return pane.row(pane.table.selected)

    def state_changed(self, state: ConsoleState) -> None:
        super().state_changed(state)
        if state.versions["executions"] != self._detail_version:
            self._detail_version = state.versions["executions"]
            self.details.ask()  # at most every half second under a busy feed

    def reload(self) -> None:
        super().reload()
        self.details.ask(urgent=True)

    def on_screen_suspend(self) -> None:
        super().on_screen_suspend()
        self.details.stop()

    def draw_detail(self) -> None:
        if self.selected_execution_id() != self._detail_asked:
            self._detail_asked = self.selected_execution_id()
            self.details.ask(urgent=True)
        elif self.detail is not None:
            self._show_detail(self.detail)  # its "updated 3s ago" moves on

    def _show_detail(self, detail: dict[str, Any] | None) -> None:
        # to the second: a redraw of an unchanged detail costs one comparison
        now = self.console.state.now_ms // 1000 * 1000
        text = detail_text(detail, now)
        if text != self._detail_shown:
            self._detail_shown = text
            self.query_one("#execution-detail-text", Static).update(text)

    async def _load_detail(self) -> None:
        """The selected execution in full (`details` runs it, one at a time)."""
        eid = self.selected_execution_id()
        detail = await self.console.fetch("execution", execution_id=eid) if eid else None
        if eid != self.selected_execution_id():
            return  # the selection moved meanwhile: its own load follows
        with contextlib.suppress(NoMatches):  # the view may have closed meanwhile
            pane = self.query_one("#execution-detail", VerticalScroll)
            self._show_detail(detail)
            if eid != self._detail_for:
                pane.scroll_home(animate=False)  # another execution: from its top
            self.detail, self._detail_for = detail, eid

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        eid = self.selected_execution_id()
        if eid:
            self.console.drill("execution", eid)
