"""Objects, faults, the audit log, the live event log, and help."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Markdown, RichLog

from alarmtop.tui.columns import AUDIT, FAULTS, OBJECTS
from alarmtop.tui.formatting import clock_text, first_line
from alarmtop.tui.screens.base import ConsoleScreen
from alarmtop.tui.screens.dialogs import ConfirmDialog, TextDialog
from alarmtop.tui.screens.listed import ListPane, ListScreen
from alarmtop.tui.state import ConsoleState

PAGE = 100


def ok_style(value: Any) -> Text:
    return Text(str(value), style="green" if value == "ok" else "red")


class ObjectsScreen(ListScreen):
    def make_panes(self) -> list[ListPane]:
        return [ListPane("object-page", OBJECTS, "Objects", kinds=("objects",), size=PAGE,
                         stylers={})]

    def body(self) -> ComposeResult:
        yield self.panes[0].table

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        ref = self.panes[0].table.selected
        if ref:
            self.console.drill("object", ref)


class FaultsScreen(ListScreen):
    BINDINGS = [Binding("x", "clear_fault", "Clear fault", tooltip="Remove the selected fault",
                        id="clear-fault"), *ListScreen.LIST_BINDINGS]

    def make_panes(self) -> list[ListPane]:
        return [ListPane("fault-table", FAULTS, "Active faults", kinds=("faults",), size=PAGE,
                         stylers={})]

    def body(self) -> ComposeResult:
        yield self.panes[0].table

    def selected_fault(self) -> dict[str, Any] | None:
        pane = self.panes[0]
        return pane.row(pane.table.selected)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "clear_fault":
            return not self.console.read_only and self.selected_fault() is not None
        return super().check_action(action, parameters)

    def why_not(self, action: str) -> str:
        if action == "clear_fault" and self.selected_fault() is None:
            return "no fault is selected"
        return super().why_not(action)

    def action_clear_fault(self) -> None:
        self.panes[0].table.pin()
        fault = self.selected_fault()  # read when the key is pressed
        if fault is not None:
            self._clear_fault(fault)

    @work(group="actions")
    async def _clear_fault(self, fault: dict[str, Any]) -> None:
        label = f"fault {fault['id']} ({fault['kind']} on {fault['target']})"
        if await self.app.push_screen_wait(ConfirmDialog(f"Remove {label}?", "Remove")):
            await self.console.command("clear_fault", label, fault_id=fault["id"])

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        fault = self.selected_fault()
        if fault:
            kind = "object" if "/" in str(fault["target"]) else "execution"
            self.console.drill(kind, str(fault["target"]))


class AuditScreen(ListScreen):
    def make_panes(self) -> list[ListPane]:
        return [ListPane("audit-table", AUDIT, "Audit log (who, when, what, why)",
                         kinds=("audit",), size=PAGE, stylers={6: ok_style})]

    def body(self) -> ComposeResult:
        yield self.panes[0].table


def event_matches(ev: dict[str, Any], text: str) -> bool:
    """Whether an event's type, target or data contain `text` (case matters, as in every
    other view's filter)."""
    if not text:
        return True
    return text in ev.get("type", "") or any(text in str(v) for v in ev["data"].values())


def event_text(ev: dict[str, Any]) -> Text:
    data = dict(ev["data"])
    who = data.pop("object", None) or data.pop("execution_id", "") or data.pop("target", "")
    style = "red" if ev["type"].endswith(("failed", "dead")) else (
        "yellow" if "near" in ev["type"] or "retry" in ev["type"] else "")
    line = Text(f"{clock_text(ev['at_ms'])}  ", style="dim")
    line.append(f"{ev['type']:<26}", style=style)
    line.append(f" {who!s:<30} ")
    line.append(first_line(" ".join(f"{k}={v}" for k, v in data.items()), 80), style="dim")
    return line


class EventsScreen(ConsoleScreen):
    """The events this console has received (the last `MAX_EVENTS`), newest last; `/`
    keeps the lines that contain a text."""

    BINDINGS = [
        Binding("slash", "filter", "Filter", tooltip="Show only the events that contain a "
                "text", id="filter"),
        Binding("escape", "clear", "Clear", tooltip="Show every event again", id="clear"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.shown = 0
        self.filter = ""

    def body(self) -> ComposeResult:
        log = RichLog(id="event-log", max_lines=2000, wrap=False)
        log.border_title = "Event log (live)"
        yield log

    def badge(self) -> str:
        return f"filter “{self.filter}”" if self.filter else ""

    def draw(self, state: ConsoleState) -> None:
        super().draw(state)
        log = self.query_one(RichLog)
        fresh = min(state.events_total - self.shown, len(state.events))
        new = list(state.events)[-fresh:] if fresh > 0 else []
        for ev in new[-200:]:
            if event_matches(ev, self.filter):
                log.write(event_text(ev))
        self.shown = state.events_total
        log.border_title = (f"Event log (live)  [{self.badge()}]" if self.filter
                            else "Event log (live)")
        self.refresh_actions()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "clear":
            return bool(self.filter)
        return True

    def refilter(self, text: str) -> None:
        """Show again, from the events held, the ones that match `text`."""
        self.filter = text
        log = self.query_one(RichLog)
        log.clear()
        for ev in self.console.state.events:
            if event_matches(ev, text):
                log.write(event_text(ev))
        self.shown = self.console.state.events_total
        self.redraw()

    @work(group="dialogs")
    async def action_filter(self) -> None:
        text = await self.app.push_screen_wait(TextDialog(
            "Filter the event log by text (empty: show all)", "e.g. alarm.dead or payments",
            self.filter, required=False))
        if text is not None:
            self.refilter(text)

    def action_clear(self) -> None:
        self.refilter("")
        self.say("filter cleared: every event")


HELP = """\
# alarmtop keys

- `1`..`9` views: overview, alarms, executions, objects, dead letters, faults, audit, events,
  timers
- `0` nodes: the fleet's nodes, up or DOWN, with their shards and last lease renewal
- `/` filter this view by text (each view keeps its own; the event log too)
- `s` sort this view by its next column, by the real value; `S` reverse it
- `escape` clear this view's filter and sort; close a dialog or a detail
- `pageup` `pagedown` the previous or next page; `home` `end` the first or last row
- `enter` the selected row in full: its detail, events, faults and audit rows
- `r` re-arm the selected alarm, `n` fire it now (both ask first)
- `x` clear the selected dead letter (alarms) or fault (faults)
- `f` inject a fault on the selected object or execution
- `R` retry the failed compensation, `h` resolve it by hand, `a` abort, `H` hand to a human
- `p` pause or resume the selected execution or alarm (paused rows show `‖`)
- `z` snooze the selected alarm (move it later); `v` replay check of the selected execution
- `d` redrive a failed or timed-out execution, `F` fork one from an operation: both run
  the replay check first and need `Force` when the log and the handler disagree
- `c` complete, fail or heartbeat a waiting callback by hand (e.g. `go` or `cancel` for
  the festival verdict; or `enter` on it in the detail)
- `space` mark the row (by identity, in any list view), `u` unmark all
- `b` bulk action on the marked rows, `m` select by query (shows how many match first),
  `B` the progress of the latest bulk action (done, failed, left, failures, cancel)
- `9` the timers board: `n` fire the selected timer now, `z` snooze it
- `tab` the next table or pane of the view
- `ctrl+p` command palette: views, filters, sorts, every action on the selection
- `?` this help, `q` quit

The urgent counts (DEAD, NEAR-EXH, RETRYING, NEEDS-HUMAN) stay in the header in
every view; on a fleet, so does the node count, on red when one is down. The
cursor follows its row (its object, not its line) as rows move, sort or filter;
a row it is on that a refresh leaves out stays in sight, dimmed, for a few
seconds (an alarm firing and re-arming), and the status line says when it has
left for good. A key acts on the row highlighted when it is pressed, and names
its target when it asks and when it is done; a key that does not apply to the row
says why. With `--read-only` or a viewer token every action is hidden, and its
key says the console is read-only.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close", tooltip="Close help")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog help", id="help-scroll"):
            yield Markdown(HELP)

    def on_mount(self) -> None:
        self.query_one("#help-scroll", VerticalScroll).focus()  # arrows and pgdn scroll it
