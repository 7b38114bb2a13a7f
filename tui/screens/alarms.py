"""Alarms paged from the server, with every attempt of the selected one; dead letters."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import DataTable, Static

from alarmtop.tui.columns import ALARMS
from alarmtop.tui.formatting import duration, first_line, paused_text, relative
from alarmtop.tui.screens.listed import ListPane, ListScreen
from alarmtop.tui.screens.tools import ToolsMixin

PAGE = 100
ALARM_KINDS = ("alarms",)


def attempts_text(row: dict[str, Any] | None, now_ms: int, in_list: bool = True) -> Text:
    """The alarm and every attempt; `in_list`: in a list view's side pane (with the
    alarm's name, and how to see the rest)."""
    if row is None:
        return Text("select an alarm to see its attempts", style="dim")
    out = Text(f"{row['object']}\n", style="bold") if in_list else Text()
    out.append(f"state {row['state']}  retry {row['retry_count']}/{row['max_retries']}  "
               f"scheduled {relative(row.get('scheduled_ms'), now_ms)}\n")
    if row.get("paused"):
        out.append(paused_text(row, now_ms) + "\n", style="bold magenta")
    out.append("\n")
    for i, a in enumerate(row.get("attempts") or [], start=1):
        took = "died (no end)" if a.get("end_ms") is None else duration(
            a["end_ms"] - a["start_ms"])
        out.append(f"#{i}  {relative(a['start_ms'], now_ms):>12}  {took:>13}  ")
        out.append(first_line(a.get("error"), 70) + "\n", style="red")
    if not row.get("attempts"):
        out.append("no failed attempt", style="dim")
    if in_list:
        out.append("\n\nenter: events, faults and audit of this object", style="dim")
    return out


class AlarmsScreen(ToolsMixin, ListScreen):
    STATE: str | None = None
    TITLE_TEXT = "Alarms"
    BINDINGS = [*ToolsMixin.ALARM_BINDINGS, *ToolsMixin.ALARM_TOOL_BINDINGS,
                *ListScreen.LIST_BINDINGS]

    def __init__(self) -> None:
        super().__init__()
        self._attempts_shown: Text | None = None
        self.detail: dict[str, Any] | None = None  # the selected alarm, all attempts
        self._pause_asked: tuple[str, Any] | None = None  # the pause last asked about

    def make_panes(self) -> list[ListPane]:
        fixed = (("state", self.STATE),) if self.STATE else ()
        return [ListPane("alarm-page", ALARMS, self.TITLE_TEXT, kinds=ALARM_KINDS,
                         fixed=fixed, size=PAGE)]

    def body(self) -> ComposeResult:
        with Horizontal(classes="split"):
            yield self.panes[0].table
            yield Static(id="attempts", classes="detail")

    # the names the bench and tests read: the page shown and its total
    @property
    def page_offset(self) -> int:
        return self.panes[0].pager.offset

    @property
    def total(self) -> int:
        return self.panes[0].pager.shown.total

    @property
    def rows(self) -> dict[str, dict[str, Any]]:
        return {str(r["object"]): r for r in self.panes[0].rows()}

    def selected_alarm(self) -> dict[str, Any] | None:
        pane = self.panes[0]
        return pane.row(pane.table.selected)

    def draw_detail(self) -> None:
        """The selected alarm with every attempt: rows carry the latest ones only when
        they come from a delta, so the full record is fetched when some are missing (or
        when the alarm is paused: the record says who paused it and why)."""
        row = self.selected_alarm()
        if row is not None:
            ref = str(row["object"])
            total = row.get("attempts_total", len(row.get("attempts") or []))
            full = self.detail if self.detail and self.detail.get("object") == ref else None
            # A paused alarm's detail says who paused it and why; its row does not.
            pause_known = not row.get("paused") or (
                full is not None and full.get("paused_ms") == row.get("paused_ms")
                and "paused_reason" in full)
            if full is not None and pause_known:
                row = {**row, "paused_by": full.get("paused_by"),
                       "paused_reason": full.get("paused_reason")}
            if full is not None and len(full.get("attempts") or []) >= total:
                row = {**row, "attempts": full["attempts"]}
            elif len(row.get("attempts") or []) < total or (
                    not pause_known and self._pause_asked != (ref, row.get("paused_ms"))):
                self._pause_asked = (ref, row.get("paused_ms"))  # once per pause
                self.load_detail(ref)
        text = attempts_text(row, self.console.state.now_ms)
        if text != self._attempts_shown:  # most redraws leave it as it is
            self._attempts_shown = text
            self.query_one("#attempts", Static).update(text)

    @work(exclusive=True, group="attempts")
    async def load_detail(self, ref: str) -> None:
        self.detail = await self.console.fetch("alarm", object=ref)
        if self.detail is not None:
            self.redraw()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        ref = self.panes[0].table.selected
        if ref:
            self.console.drill("alarm", ref)


class DeadLettersScreen(AlarmsScreen):
    STATE = "dead"
    TITLE_TEXT = "Dead letters (retries exhausted: re-arm or clear)"
