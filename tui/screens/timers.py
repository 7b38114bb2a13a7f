"""The timers board (9): every pending alarm, execution wait, callback deadline and
retry, soonest first, with live countdowns; an overdue one says so ("due 40s ago,
not fired"). `n` fires the selected timer now, `z` snoozes it; space marks it (an
execution's timer marks the execution, an object's alarm the alarm) for a bulk
action.

The board is the server's `timers` query, paged by key. A server without it (an
older one) still has `execution_timers`: the board then lists executions' timers
only and says so in its title.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable

from alarmtop.tui.client import CommandError, Disconnected
from alarmtop.tui.formatting import duration, relative
from alarmtop.tui.marks import MARK
from alarmtop.tui.paging import RefreshGate
from alarmtop.tui.screens.dialogs import ConfirmDialog
from alarmtop.tui.screens.listed import marked
from alarmtop.tui.screens.loader import Loader
from alarmtop.tui.screens.marking import MarkingMixin
from alarmtop.tui.screens.tool_dialogs import SnoozeDialog
from alarmtop.tui.state import ConsoleState
from alarmtop.tui.timers import (
    KIND_LABEL,
    Cursors,
    countdown_style,
    mark_key,
    mark_kind,
    narrow_cells,
    overdue,
    timer_cells,
    timer_key,
)
from alarmtop.tui.widgets.table import ConsoleTable

Row = dict[str, Any]
PAGE = 100
TITLE = "Timers: every pending alarm, wait, callback deadline and retry, soonest first"
COLUMNS = (("due", 26), ("kind", 18), ("target", 30), ("what", 34), ("state", 11),
           ("paused", 7), ("retry", 5))
# Under 120 columns (down to 80): the countdown and the target first, a paused timer
# said in its countdown; the widths and their padding fit 78 cells.
NARROW = (("due", 15), ("kind", 10), ("target", 18), ("what", 8), ("state", 9),
          ("retry", 5))
SHORT_TITLE = "Timers, soonest first"
OLD_SERVER = "execution timers only: this server has no timers board (alarms not listed)"


def board_span(first: int, shown: int, more: bool) -> str:
    """Where the page is on the board, and the board's size as far as it is known: the
    server pages the board by key and does not count it, so past the last page the
    total is what was shown, and before it "more than"."""
    if not shown:
        return "none" if not first else f"none past {first:,}"
    last = first + shown
    if more:
        return f"{first + 1:,}-{last:,} of more than {last:,}  pgdn: next"
    return f"{first + 1:,}-{last:,} of {last:,}"


def due_cell(text: str) -> Text:
    marked_row = text.startswith(MARK)
    body = text.removeprefix(MARK)
    out = Text(MARK.strip() + " ", style="bold cyan") if marked_row else Text()
    out.append(body, style=countdown_style(body))
    return out


class TimersScreen(MarkingMixin):
    BINDINGS = [
        Binding("n", "fire_timer", "Fire now", tooltip="Fire the selected timer now",
                id="fire-timer"),
        Binding("z", "snooze_timer", "Snooze", tooltip="Move the selected timer later",
                id="snooze-timer"),
        Binding("pagedown", "page(1)", "Next page", id="timers-next", priority=True,
                show=False),
        Binding("pageup", "page(-1)", "Prev page", id="timers-prev", priority=True,
                show=False),
        *MarkingMixin.MARK_BINDINGS,
    ]

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[Row] = []
        self.by_key: dict[str, Row] = {}
        self.first = 0
        self.more = False
        self.server_now_ms: int | None = None
        self.note = ""
        self.loaded = False
        self.cursors = Cursors()
        self.table = ConsoleTable(id="timer-board", stylers={0: due_cell}, names=(2,))
        self.table.border_title = TITLE
        self.loader = Loader(self, self._load, RefreshGate(), "timers")
        self._versions: tuple[int, int] = (-1, -1)
        self.rows_first = 0  # the position the rows are for
        self._drawn_first = 0  # and the one the table shows (another: a page move)

    def body(self) -> ComposeResult:
        yield self.table

    # -- data -------------------------------------------------------------------------------

    def reload(self) -> None:
        self.loader.ask(urgent=True)

    def state_changed(self, state: ConsoleState) -> None:
        now = (state.versions.get("alarms", 0), state.versions.get("executions", 0))
        if now != self._versions:
            self._versions = now
            self.loader.ask()

    def on_screen_suspend(self) -> None:
        self.loader.stop()

    async def _load(self) -> None:
        start, after = self.cursors.nearest(self.first)
        limit = min(500, self.first - start + PAGE)
        answer = await self._ask(limit, after)
        if answer is None:
            return
        rows = list(answer.get("rows") or [])
        self.cursors.learn(start, rows)
        skip = self.first - start
        self.rows, self.rows_first = rows[skip:skip + PAGE], self.first
        self.more = len(rows) > skip + PAGE - 1 and answer.get("next") is not None
        self.server_now_ms = answer.get("now_ms")
        self.loaded = True
        self.redraw()

    async def _ask(self, limit: int, after: Any) -> dict[str, Any] | None:
        args: dict[str, Any] = {"limit": limit}
        if after is not None:
            args["after"] = after
        op = "execution_timers" if self.note else "timers"
        try:
            return dict(await self.console.client.request(op, **args) or {})
        except CommandError as exc:
            if op == "timers" and str(exc).startswith("unknown op"):
                self.note = OLD_SERVER
                return await self._ask(limit, after)
            self.say(f"the timers board: {exc}", "error")
        except (Disconnected, TimeoutError) as exc:
            self.say(f"the timers board: {exc}", "warning")
        return None

    # -- drawing ----------------------------------------------------------------------------

    def draw(self, state: ConsoleState) -> None:
        super().draw(state)
        now = state.now_ms
        table, marks = self.table, self.console.marks
        narrow = (table.scrollable_content_region.width or 150) < 120
        table.set_columns(NARROW if narrow else COLUMNS)
        before = self.by_key
        self.by_key = {timer_key(r): r for r in self.rows}
        cells = narrow_cells if narrow else timer_cells
        table.show([(key, marked(cells(r, now, 8 if narrow else 34),
                                 (mark_kind(r), mark_key(r)) in marks))
                    for key, r in self.by_key.items()],
                   keep="row" if self.rows_first == self._drawn_first else "line",
                   now=self.console.clock())
        self._drawn_first = self.rows_first
        held = table.held
        if held is not None and held not in self.by_key and held in before:
            self.by_key[held] = before[held]  # the actions still see it
        late = sum(1 for r in self.rows if overdue(r, now))
        extra = [p for p in (f"{late:,} overdue" if late else "", self.note,
                             marks.summary()) if p]
        title = SHORT_TITLE if narrow else TITLE
        table.border_title = title + (f"  [{'  '.join(extra)}]" if extra else "")
        sub = board_span(self.first, len(self.rows), self.more)
        table.border_subtitle = sub if self.loaded else "loading…"
        self.refresh_actions()

    def badge(self) -> str:
        return self.marks_badge()

    # -- selection and keys -----------------------------------------------------------------

    def selected_timer(self) -> Row | None:
        key = self.table.selected
        return None if key is None else self.by_key.get(key)

    def mark_kind(self) -> str | None:
        timer = self.selected_timer()
        return "alarms" if timer is None else mark_kind(timer)

    def mark_target(self) -> tuple[str, str] | None:
        timer = self.selected_timer()
        return None if timer is None else (mark_kind(timer), mark_key(timer))

    def after_mark(self) -> None:
        if self.table.cursor_row < self.table.row_count - 1:
            self.table.action_cursor_down()
        else:
            self.table.pin()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("fire_timer", "snooze_timer"):
            timer = self.selected_timer()
            if self.console.read_only or timer is None:
                return False
            return action == "snooze_timer" or not timer.get("paused")
        return super().check_action(action, parameters)

    def why_not(self, action: str) -> str:
        if action in ("fire_timer", "snooze_timer"):
            timer = self.selected_timer()
            if timer is None:
                return "no timer is selected"
            if action == "fire_timer" and timer.get("paused"):
                return f"{self.label(timer)} is paused: resume it first"
        return super().why_not(action)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.refresh_actions()

    @on(ConsoleTable.SelectionLeft)
    def _selection_left(self, event: ConsoleTable.SelectionLeft) -> None:
        where = f"; the cursor is on {event.now.split('|')[1]}" if event.now else ""
        kind, target = event.left.split("|")[:2]
        self.say(f"the {KIND_LABEL.get(kind, kind)} of {target} left the board (it fired, "
                 f"or was moved or removed){where}", "warning")

    @on(DataTable.RowSelected, "#timer-board")
    def _drill(self, event: DataTable.RowSelected) -> None:
        timer = self.selected_timer()
        if timer is None:
            return
        if timer.get("execution_id"):
            self.console.drill("execution", str(timer["execution_id"]))
        else:
            self.console.drill("alarm", mark_key(timer))

    def action_page(self, step: int) -> None:
        if (step > 0 and not self.more) or (step < 0 and self.first == 0):
            return
        self.first = max(0, self.first + step * PAGE)
        self.loader.ask(urgent=True)

    def label(self, timer: Row) -> str:
        """"the wait of trip/lisbon (operation 3)", "the alarm of Flaky/a"."""
        kind = timer_cells(timer, 0)[1]
        what = f"the {kind} of {timer.get('target') or mark_key(timer)}"
        return what + (f" (operation {timer['op_id']})" if timer.get("op_id") else "")

    # The timer acted on is read when the key is pressed (see `ActionsMixin`).

    def action_fire_timer(self) -> None:
        self.table.pin()
        timer = self.selected_timer()
        if timer is not None:
            self._fire_timer(timer)

    @work(group="actions")
    async def _fire_timer(self, timer: Row) -> None:
        label = self.label(timer)
        due = relative(timer.get("due_ms"), self.console.state.now_ms)
        if self.console.confirm_actions and not await self.app.push_screen_wait(
                ConfirmDialog(f"Fire {label} now? It is due {due}.", "Fire now")):
            return
        await self.console.perform("fire_timer", label, {"key": timer["key"]},
                                   said=lambda _: f"fired {label} now")

    def action_snooze_timer(self) -> None:
        self.table.pin()
        timer = self.selected_timer()
        if timer is not None:
            self._snooze_timer(timer)

    @work(group="actions")
    async def _snooze_timer(self, timer: Row) -> None:
        label = self.label(timer)
        due = relative(timer.get("due_ms"), self.console.state.now_ms)
        by = await self.app.push_screen_wait(SnoozeDialog(label, f"due {due}"))
        if by:
            await self.console.perform(
                "snooze_timer", label, {"key": timer["key"], "by_ms": int(by)},
                said=lambda _: f"snoozed {label} by {duration(int(by))}")
