"""Views that list rows of a server listing, live: paged, filtered, sorted, followed.

A `ListPane` is one table of a view and the `Pager` of its listing. What the table
shows is what the server answered for the window it shows, re-queried when a
frame touches the listing's kind (or every `RefreshGate.max_age_s` while shown),
at most one query in flight per pane. The cursor follows its row's key as rows
move; when that row leaves, the status line says where the cursor went.

Each view has its own filter and sort (`/`, `s`, `S`, cleared with escape), shown
in its table's title and the footer while on.
"""

from __future__ import annotations

import contextlib
from functools import partial
from typing import Any, ClassVar

from textual import on, work
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.widgets import DataTable

from alarmtop.tui.columns import Listing, badge, fit_widths, flex_width
from alarmtop.tui.formatting import count
from alarmtop.tui.marks import MARK, Marks
from alarmtop.tui.paging import ListQuery, Pager
from alarmtop.tui.screens.base import ConsoleScreen, styled_state
from alarmtop.tui.screens.dialogs import TextDialog
from alarmtop.tui.screens.loader import Loader
from alarmtop.tui.screens.marking import MarkingMixin
from alarmtop.tui.state import ConsoleState
from alarmtop.tui.widgets.table import ConsoleTable, Styler, arrow_label

Row = dict[str, Any]
# What a mark on a row of a listing marks: an object's row marks its alarm.
MARK_KINDS = {"alarms": "alarms", "objects": "alarms", "executions": "executions"}


class ListPane:
    """One table of a view, paged from one server listing."""

    def __init__(self, table_id: str, listing: Listing, title: str, *, kinds: tuple[str, ...],
                 fixed: tuple[tuple[str, Any], ...] = (), size: int = 100,
                 stylers: dict[int, Styler] | None = None) -> None:
        self.id, self.listing, self.title, self.kinds = table_id, listing, title, kinds
        self.table = ConsoleTable(id=table_id, stylers={0: styled_state} if stylers is None
                                  else stylers, names=listing.names())
        self.table.border_title = title
        self.pager = Pager(ListQuery(listing.name, fixed=fixed), size)
        self.versions: dict[str, int] = {}
        self.generation_of = -1  # the app's snapshot count the pager's generation is for
        self.wide = True  # the next fetch is of the window around the page (after a move)
        # What the operator last did to the pane and the table does not show yet: after
        # a page move the cursor keeps its line; after a new filter or sort it follows
        # its row if the answer has it, else goes to the first row.
        self.moved: str | None = None  # "page", "query"
        self.loader: Loader  # given by the screen: it runs the fetches
        self.drawn: dict[str, Row] = {}  # the rows the table shows, by key
        self.drawn_generation = 0  # the pager generation of those rows

    @property
    def query(self) -> ListQuery:
        return self.pager.query

    def rows(self) -> list[Row]:
        return self.pager.shown.rows

    def row(self, key: str | None) -> Row | None:
        """The row of `key` as the table shows it (not the page the pager moved to and
        the table does not show yet: the actions would flicker off and on)."""
        return None if key is None else self.drawn.get(key)

    def stale(self, state: ConsoleState, snapshots: int) -> bool:
        """Whether frames touched this pane's kinds since it last looked (then it asks
        its pager for a refresh); after a reconnect every cached page is forgotten."""
        if snapshots != self.generation_of:
            self.generation_of = snapshots
            self.pager.new_generation()
        now = {k: state.versions.get(k, 0) for k in self.kinds}
        touched = now != self.versions
        self.versions = now
        if touched:
            self.pager.gate.ask()  # the screen kicks the loader
        return touched

    @property
    def mark_kind(self) -> str | None:
        return MARK_KINDS.get(self.listing.name)

    def draw(self, now_ms: int, marks: Marks | None = None, clock: float | None = None) -> None:
        """Draw the page shown; `clock` (seconds, any monotonic clock) lets the table
        hold the cursor's row in sight while a refresh leaves it out."""
        listing, table = self.listing, self.table
        widths = fit_widths(listing.columns, table.scrollable_content_region.width or 150)
        arrow = listing.arrow(self.query)
        table.set_columns([(arrow_label(c.label, arrow[1] if arrow and arrow[0] == i
                                        else None), w)
                           for i, (c, w) in enumerate(zip(listing.columns, widths))])
        flex = flex_width(listing.columns, widths)
        before = self.drawn
        self.drawn = {listing.key(r): r for r in self.rows()}
        kind = self.mark_kind if marks else None
        table.show([(key, marked(listing.cells(r, now_ms, flex), (kind, key) in marks)
                     if kind and marks else listing.cells(r, now_ms, flex))
                    for key, r in self.drawn.items()],
                   keep={"page": "line", "query": "query"}.get(self.moved or "", "row"),
                   # rows of a new generation (after a reconnect) are the truth at once:
                   # a row missing from them went while the console was away
                   now=clock if self.pager.shown_generation == self.drawn_generation
                   else None)
        self.drawn_generation = self.pager.shown_generation
        held = table.held
        if held is not None and held not in self.drawn and held in before:
            self.drawn[held] = before[held]  # the actions and the detail still see it
        if self.pager.current:
            self.moved = None
        on = badge(self.query, listing)
        if kind and marks:
            mine = len(marks.keys(kind))
            on = "  ".join(b for b in (on, f"{mine:,} marked" if mine else "") if b)
        table.border_title = f"{self.title}  [{on}]" if on else self.title
        table.border_subtitle = self.subtitle()

    def subtitle(self) -> str:
        first, last, total = self.pager.span()
        about = "about " if self.pager.shown.approximate else ""
        text = f"{about}{first:,}-{last:,} of {count(total)}" if last else "none"
        if last < total:
            text += "  pgdn: next"
        if not self.pager.loaded and not self.pager.error:
            text = "loading…"
        if self.pager.shown.note:
            text += f"  ({self.pager.shown.note})"
        if self.pager.error:
            text += "  refused: " + self.pager.error
        return text


def marked(cells: tuple[Any, ...], on: bool) -> tuple[Any, ...]:
    """A row's cells with the mark on its first one."""
    if not on or not cells:
        return cells
    return (MARK + str(cells[0]), *cells[1:])


class ListScreen(MarkingMixin, ConsoleScreen):
    """A view made of `ListPane`s; the keys act on the focused one."""

    LIST_BINDINGS: ClassVar[list[BindingType]] = [
        # priority: the table would otherwise take these keys to scroll itself
        # Not in the footer (its room is for the actions): the table's subtitle says
        # "pgdn" while there is a next page.
        Binding("pagedown", "page(1)", "Next page", tooltip="The next page of rows",
                id="next-page", priority=True, show=False),
        Binding("pageup", "page(-1)", "Prev page", tooltip="The previous page of rows",
                id="prev-page", priority=True, show=False),
        Binding("slash", "filter", "Filter", tooltip="Show only the rows of this view that "
                "contain a text", id="filter"),
        Binding("s", "sort", "Sort", tooltip="Sort this view by its next column", id="sort"),
        Binding("S", "reverse", "Reverse", tooltip="Reverse this view's sort", id="reverse",
                show=False),
        Binding("escape", "clear", "Clear", tooltip="Clear this view's filter and sort",
                id="clear"),
        *MarkingMixin.MARK_BINDINGS,
    ]
    BINDINGS: ClassVar[list[BindingType]] = [*LIST_BINDINGS]

    def __init__(self) -> None:
        super().__init__()
        self.panes: list[ListPane] = self.make_panes()
        for pane in self.panes:
            pane.loader = Loader(self, partial(self._fetch, pane), pane.pager.gate,
                                 f"fetch-{pane.id}")

    def make_panes(self) -> list[ListPane]:
        raise NotImplementedError

    def pane(self) -> ListPane:
        """The pane the keys act on: the focused one, else the first."""
        focused = self.focused
        return next((p for p in self.panes if p.table is focused), self.panes[0])

    def pane_of(self, table_id: str) -> ListPane:
        return next(p for p in self.panes if p.id == table_id)

    def badge(self) -> str:
        parts = (badge(self.pane().query, self.pane().listing), self.marks_badge())
        return "  ".join(p for p in parts if p)

    # -- marks ------------------------------------------------------------------------------

    def mark_kind(self) -> str | None:
        return self.pane().mark_kind

    def mark_target(self) -> tuple[str, str] | None:
        pane = self.pane()
        key = pane.table.selected
        if pane.mark_kind is None or key is None:
            return None
        return pane.mark_kind, key

    def after_mark(self) -> None:
        table = self.pane().table
        if table.cursor_row < table.row_count - 1:
            table.action_cursor_down()
        else:
            table.pin()

    # -- drawing and refreshing ------------------------------------------------------------

    def draw(self, state: ConsoleState) -> None:
        super().draw(state)
        for pane in self.panes:
            pane.draw(state.now_ms, self.console.marks, self.console.clock())
        self.draw_detail()
        self.refresh_actions()

    def draw_detail(self) -> None:
        """Views with a detail pane draw the selected row's here."""

    def state_changed(self, state: ConsoleState) -> None:
        for pane in self.panes:
            if pane.stale(state, self.console.snapshots):
                self.kick(pane)

    def reload(self) -> None:
        for pane in self.panes:
            pane.stale(self.console.state, self.console.snapshots)
            pane.loader.ask(urgent=True)

    def on_screen_suspend(self) -> None:
        for pane in self.panes:
            pane.loader.stop()

    def kick(self, pane: ListPane) -> None:
        pane.loader.kick()

    async def _fetch(self, pane: ListPane) -> None:
        """One fetch of a pane's page (`Loader` runs it when the pane's gate says)."""
        pager, listings = pane.pager, self.console.listings
        asked = pager.request(pane.wide)
        query, _, offset, limit = asked
        pane.wide = False
        answer = await listings.fetch(query, offset, limit)
        error = listings.refused.get(pane.listing.name) if answer is None else None
        if pager.land(asked, answer, self.console.clock(), error):
            # drawn on the console's next paced redraw, as a frame is: a key pressed
            # before it is shown first (repainting a changed page takes 40-140 ms on a
            # loaded machine, and the key is often one that leaves this view)
            self.console.redraw_soon()
        elif error is not None:
            self.say(f"{pane.title}: the server refused this listing: {error}", "error")
            self.redraw()

    # -- keys --------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "clear":
            return self.pane().query.narrowed
        return super().check_action(action, parameters)

    def action_page(self, step: int) -> None:
        pane = self.pane()
        if pane.pager.move(step, self.console.clock()):
            pane.wide, pane.moved = True, "page"
            self.redraw()  # from the pages fetched ahead, when they are here
            self.call_after_refresh(self.kick, pane)  # once shown: no competing repaint

    @work(group="dialogs")
    async def action_filter(self) -> None:
        pane = self.pane()
        text = await self.app.push_screen_wait(TextDialog(
            f"Filter {pane.title.lower()} by text (empty: show all; escape clears too)",
            "e.g. LeaseLedger/tenant", pane.query.filter, required=False))
        if text is not None:
            self.requery(pane, pane.query.with_filter(text))

    def action_sort(self) -> None:
        pane = self.pane()
        self.requery(pane, pane.listing.next_sort(pane.query))

    def action_reverse(self) -> None:
        pane = self.pane()
        self.requery(pane, pane.listing.reversed(pane.query))

    def action_clear(self) -> None:
        for pane in self.panes:
            if pane.query.narrowed:
                self.requery(pane, pane.query.with_filter("").with_sort(None))
        self.say("filter and sort cleared: the view's own order, every row")

    def requery(self, pane: ListPane, query: ListQuery) -> None:
        pane.pager.set_query(query)
        pane.wide, pane.moved = True, "query"
        self.redraw()
        self.kick(pane)

    # -- the cursor --------------------------------------------------------------------------

    @on(ConsoleTable.SelectionLeft)
    def _selection_left(self, event: ConsoleTable.SelectionLeft) -> None:
        pane = self.pane_of(event.table.id or "")
        where = f"; the cursor is on {event.now}" if event.now else ""
        if event.filtered:
            self.say(f"{event.left} is not on this page with this filter and sort{where}")
        else:
            self.say(f"{event.left} left this view (the {pane.listing.noun} changed or "
                     f"went){where}", "warning")

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.draw_detail()
        self.refresh_actions()

    def selected(self, table_id: str) -> str | None:
        with contextlib.suppress(NoMatches):
            return self.query_one(f"#{table_id}", ConsoleTable).selected
        return None
