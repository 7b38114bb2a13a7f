"""Executions with their step timeline, saga stack and callbacks."""

from __future__ import annotations

import contextlib
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.css.query import NoMatches
from textual.widgets import DataTable, Static

from alarmtop.tui.formatting import EXEC_STYLE, SAGA_MARK, first_line, relative
from alarmtop.tui.screens.actions import ActionsMixin
from alarmtop.tui.screens.base import Sorting, selected_key
from alarmtop.tui.screens.overview import (
    EXECUTION_COLUMNS,
    add_columns,
    execution_rows,
    state_table,
)
from alarmtop.tui.state import ConsoleState
from alarmtop.tui.widgets.table import ConsoleTable

TIMELINE = 40
EVENT_STYLE = {"Failed": "red", "TimedOut": "red", "Succeeded": "green", "Started": "cyan",
               "Completed": "dim", "Stopped": "red"}


def event_line(ev: dict[str, Any], now_ms: int) -> Text:
    kind = ev["EventType"]
    style = next((s for suffix, s in EVENT_STYLE.items() if kind.endswith(suffix)), "")
    line = Text(f"{ev['EventId']:>4} ", style="dim")
    line.append(f"{kind:<22}", style=style)
    line.append(f" {ev.get('Name') or ev.get('Id') or ''}")
    details = ev.get(f"{kind}Details") or {}
    err = (details.get("Error") or {}).get("Payload") or {}
    if err:
        line.append(f"  {first_line(err.get('ErrorType', ''), 30)}: "
                    f"{first_line(err.get('ErrorMessage', ''), 50)}", style="red")
    retry = details.get("RetryDetails") or {}
    if "NextAttemptDelaySeconds" in retry:
        line.append(f"  retry in {retry['NextAttemptDelaySeconds']}s", style="yellow")
    return line


def detail_text(d: dict[str, Any] | None, now_ms: int) -> Text:
    if d is None:
        return Text("select an execution to see its timeline and saga", style="dim")
    out = Text(f"{d['name']}/{d['execution_id']}  ", style="bold")
    out.append(f" {d['status'].upper()} ", style=EXEC_STYLE.get(d["status"], ""))
    out.append(f"  v{d['version']}  invocations {d['invocations']}  "
               f"updated {relative(d['updated_ms'], now_ms)}\n")
    if d.get("blocked_on"):
        out.append(f"waiting on: {d['blocked_on']}\n", style="yellow")
    if d.get("human_hold"):
        out.append(f"held for a human: {d['human_hold']}\n", style="magenta")
    if d.get("error"):
        out.append(f"error: {d['error'].get('ErrorType')}: {d['error'].get('ErrorMessage')}\n",
                   style="red")
    if d.get("saga"):
        out.append("\nsaga stack (top first)\n", style="bold")
        for e in d["saga"]:
            mark = SAGA_MARK.get(e["state"], "?")
            style = {"failed": "bold red", "compensated": "green", "resolved": "cyan"}.get(
                e["state"], "")
            out.append(f"  {mark} {e['name']:<24} {e['state']}", style=style)
            if e.get("note"):
                out.append(f"  note: {e['note']}", style="cyan")
            if e.get("error"):
                out.append(f"  {first_line(e['error'], 50)}", style="red")
            out.append("\n")
    if d.get("callbacks"):
        out.append("\ncallbacks\n", style="bold")
        for c in d["callbacks"]:
            out.append(f"  {c.get('name') or '-':<28} {c['status']:<10} {c['kind']}\n")
    out.append("\ntimeline\n", style="bold")
    for ev in d["history"][-TIMELINE:]:
        out.append_text(event_line(ev, now_ms))
        out.append("\n")
    return out


class ExecutionsScreen(ActionsMixin):
    BINDINGS = [*ActionsMixin.EXECUTION_BINDINGS, ActionsMixin.ALARM_BINDINGS[2]]

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, dict[str, Any]] = {}
        self.detail: dict[str, Any] | None = None
        self.sorting = Sorting()

    def body(self) -> ComposeResult:
        table = state_table("execution-page")
        table.border_title = "Executions"
        add_columns(table, (*EXECUTION_COLUMNS[:2], ("waiting on", 40), ("updated", 10)))
        with Horizontal():
            yield table
            yield Static(id="execution-detail", classes="detail")

    async def reload(self) -> None:
        data = await self.console.fetch("executions", limit=200)
        if data is not None:
            self.rows = {r["execution_id"]: r for r in data["rows"]}
            self.redraw()
            self.load_detail()

    def refresh_from(self, state: ConsoleState) -> None:
        super().refresh_from(state)
        for eid, row in state.executions.items():
            self.rows[eid] = row
        rank = {"needs_human": 0, "failed": 1, "running": 2, "suspended": 3}
        rows = sorted(self.rows.values(), key=lambda r: (rank.get(r["status"], 4),
                                                         -(r.get("updated_ms") or 0)))
        self.query_one("#execution-page", ConsoleTable).show(
            self.sorting.apply(execution_rows(rows, state.now_ms)))
        if self.detail is not None and self.detail["execution_id"] in {
                r["execution_id"] for r in state.executions.values()}:
            self.load_detail()

    def selected_execution(self) -> str | None:
        return selected_key(self.query_one("#execution-page", DataTable))

    @work(exclusive=True, group="detail")
    async def load_detail(self) -> None:
        eid = self.selected_execution()
        self.detail = await self.console.fetch("execution", execution_id=eid) if eid else None
        with contextlib.suppress(NoMatches):  # the view may have closed meanwhile
            self.query_one("#execution-detail", Static).update(
                detail_text(self.detail, self.console.state.now_ms))

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        self.sorting.choose(event.column_index)
        self.redraw()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.load_detail()
        self.refresh_actions()
