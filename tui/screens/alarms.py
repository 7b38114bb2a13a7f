"""Alarms paged from the server, with every attempt of the selected one; dead letters."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import DataTable, Static
from textual.worker import Worker

from alarmtop.tui.formatting import duration, first_line, relative
from alarmtop.tui.paging import PageCache
from alarmtop.tui.screens.actions import ActionsMixin
from alarmtop.tui.screens.base import Sorting, selected_key
from alarmtop.tui.screens.overview import ALARM_COLUMNS, add_columns, alarm_rows, state_table
from alarmtop.tui.state import ConsoleState
from alarmtop.tui.widgets.table import ConsoleTable

PAGE = 100


def attempts_text(row: dict[str, Any] | None, now_ms: int) -> Text:
    if row is None:
        return Text("select an alarm to see its attempts", style="dim")
    out = Text(f"{row['object']}\n", style="bold")
    out.append(f"state {row['state']}  retry {row['retry_count']}/{row['max_retries']}  "
               f"scheduled {relative(row.get('scheduled_ms'), now_ms)}\n\n")
    for i, a in enumerate(row.get("attempts") or [], start=1):
        took = "died (no end)" if a.get("end_ms") is None else duration(
            a["end_ms"] - a["start_ms"])
        out.append(f"#{i}  {relative(a['start_ms'], now_ms):>12}  {took:>13}  ")
        out.append(first_line(a.get("error"), 70) + "\n", style="red")
    if not row.get("attempts"):
        out.append("no failed attempt", style="dim")
    return out


class AlarmsScreen(ActionsMixin):
    STATE: str | None = None
    TITLE_TEXT = "Alarms"
    BINDINGS = [*ActionsMixin.ALARM_BINDINGS,
                # priority: the table would otherwise take these keys to scroll itself
                Binding("pagedown", "page(1)", "Next page", tooltip="The next 100 alarms",
                        id="next-page", priority=True),
                Binding("pageup", "page(-1)", "Prev page", tooltip="The previous 100 alarms",
                        id="prev-page", priority=True)]

    def __init__(self) -> None:
        super().__init__()
        self.page_offset = 0
        self.total = 0
        self.rows: dict[str, dict[str, Any]] = {}
        self.detail: dict[str, Any] | None = None  # the selected alarm, all attempts
        self.sorting = Sorting()
        self.pages = PageCache(size=PAGE)
        self._direction = 1  # of the last page move: the window fetched leans that way
        self._refreshing = False  # a refresh of the pages after a page key is under way
        self._refresh_again = False  # and another key came meanwhile: refresh once more
        self._attempts_shown: Text | None = None

    def body(self) -> ComposeResult:
        table = state_table("alarm-page")
        table.border_title = self.TITLE_TEXT
        add_columns(table, ALARM_COLUMNS)
        with Horizontal():
            yield table
            yield Static(id="attempts", classes="detail")

    def _query(self) -> tuple[str | None, str | None, int]:
        return self.STATE, self.console.filter_text or None, self.console.snapshots

    async def reload(self) -> None:
        """Fetch the page shown and the pages around it (see `PageCache`); the page is
        drawn on the console's next paced redraw, as a frame is: a key pressed before
        it is shown first (repainting a changed page takes 40-140 ms on a loaded
        machine, and the key is often one that leaves this view)."""
        if await self._fetch():
            self.console.redraw_soon()

    async def _fetch(self) -> bool:
        """Fetch the window around the page shown; True when the answer is now the page
        shown (False when the fetch failed, or the view paged or filtered meanwhile)."""
        query = self._query()
        start, limit = self.pages.window(self.page_offset, self._direction)
        data = await self.console.fetch("alarms", offset=start, limit=limit, state=query[0],
                                        filter=query[1])
        if data is None:
            return False
        now = self.console.clock()
        self.pages.store(query, start, limit, data["rows"], data["total"], now)
        page = self.pages.get(self._query(), self.page_offset, now)
        if page is None:  # its own fetch follows
            return False
        self.total = page.total
        self.rows = {r["object"]: r for r in page.rows}  # replaces the page: no stale rows
        return True

    def refresh_from(self, state: ConsoleState) -> None:
        super().refresh_from(state)
        for ref in list(self.rows):
            if ref in state.alarms:  # deltas keep the page live between reloads
                self.rows[ref] = state.alarms[ref]
        table = self.query_one("#alarm-page", ConsoleTable)
        table.show(self.sorting.apply(alarm_rows(list(self.rows.values()), state.now_ms)))
        end = min(self.page_offset + PAGE, self.total)
        table.border_subtitle = (f"{self.page_offset + 1 if self.total else 0}-{end} of "
                                 f"{self.total:,}  (/ filter)")
        self._show_attempts()

    def selected_object(self) -> str | None:
        return selected_key(self.query_one("#alarm-page", DataTable))

    def selected_row(self, kind: str) -> dict[str, Any] | None:
        ref = self.selected_object()
        return self.rows.get(ref) if ref and kind == "alarm" else None

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        self.sorting.choose(event.column_index)
        self.redraw()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_attempts()
        self.refresh_actions()

    def _show_attempts(self) -> None:
        """The selected alarm with every attempt: deltas carry only the latest ones, so
        the full record is fetched when the row shown is missing some."""
        ref = self.selected_object()
        row = self.rows.get(ref) if ref else None
        if row is not None:
            total = row.get("attempts_total", len(row.get("attempts") or []))
            full = self.detail if self.detail and self.detail.get("object") == ref else None
            if full is not None and len(full.get("attempts") or []) >= total:
                row = {**row, "attempts": full["attempts"]}
            elif len(row.get("attempts") or []) < total:
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

    async def action_page(self, step: int) -> None:
        start = max(0, self.page_offset + step * PAGE)
        if start >= max(self.total, 1):
            return
        self.page_offset, self._direction = start, step
        page = self.pages.get(self._query(), start, self.console.clock())
        if page is None:  # the key waits for the server
            if await self._fetch():
                self.redraw()
            return
        # Shown at once from the window fetched around the last page. The fetch that
        # refreshes it (it may be a few seconds old) and the pages around it starts
        # once it is shown: its answer does not compete with this repaint.
        self.total = page.total
        self.rows = {r["object"]: r for r in page.rows}
        self.redraw()
        self.call_after_refresh(self._reload_later)

    def _reload_later(self) -> None:
        """Refresh the pages around the one shown, one fetch at a time. A new page key
        does not cancel a fetch under way: keys faster than the server's answers would
        cancel every one, and the pages ahead would run out."""
        if self._refreshing:
            self._refresh_again = True
            return
        self._refreshing = True
        worker: Worker[None] = self.run_worker(self._refresh_pages, group="page-refresh")
        del worker

    async def _refresh_pages(self) -> None:
        try:
            while True:
                self._refresh_again = False
                await self.reload()
                if not self._refresh_again:
                    return
        finally:
            self._refreshing = False


class DeadLettersScreen(AlarmsScreen):
    STATE = "dead"
    TITLE_TEXT = "Dead letters (retries exhausted: re-arm or clear)"
