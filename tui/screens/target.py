"""One alarm, object or execution in full: its detail, its history, and its own events,
faults and audit rows (enter on a row of any list view comes here; escape goes back).

The detail scrolls (home and end, vertically); an execution's history is a table
with a timestamp per event, and enter on an event (of the history or of the
events) shows its JSON. The actions of the target's kind apply here too.
"""

from __future__ import annotations

import contextlib
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.widgets import Collapsible, DataTable, Static, TabbedContent, TabPane

from alarmtop.tui.columns import AUDIT, FAULTS
from alarmtop.tui.detail import callback_cells, history_cells, saga_text, summary_text
from alarmtop.tui.formatting import clock_text, first_line, pretty_json
from alarmtop.tui.paging import RefreshGate
from alarmtop.tui.screens.alarms import attempts_text
from alarmtop.tui.screens.listed import ListPane, ListScreen
from alarmtop.tui.screens.lists import ok_style
from alarmtop.tui.screens.loader import Loader
from alarmtop.tui.screens.tools import ToolsMixin
from alarmtop.tui.state import ConsoleState
from alarmtop.tui.widgets.table import ConsoleTable

LONG_JSON = 12  # input and result longer than this many lines start collapsed
Row = dict[str, Any]


def involves(ev: dict[str, Any], kind: str, target: str) -> bool:
    """Whether an event is about the target: its object, its execution, its fault."""
    data = ev.get("data") or {}
    if kind == "execution":
        return target in (data.get("execution_id"), data.get("target")) or data.get(
            "object") == f"Execution/{target}"
    return target in (data.get("object"), data.get("target"))


def event_cells(ev: dict[str, Any]) -> tuple[str, str, str]:
    data = {k: v for k, v in (ev.get("data") or {}).items()
            if k not in ("object", "execution_id")}
    return (clock_text(ev.get("at_ms")), str(ev.get("type")),
            first_line(" ".join(f"{k}={v}" for k, v in data.items()), 120))


class JsonDialog(ModalScreen[None]):
    """One event (or any value) as indented JSON, scrollable."""

    BINDINGS = [Binding("escape,q,enter", "dismiss", "Close", tooltip="Close")]

    def __init__(self, title: str, value: Any) -> None:
        super().__init__()
        self.title_text, self.value = title, value

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog json", id="json-scroll"):
            yield Static(Text(self.title_text, style="bold"))
            yield Static(pretty_json(self.value, 10**9)[0], id="json-body")

    def on_mount(self) -> None:
        self.query_one("#json-scroll", VerticalScroll).focus()


class TargetScreen(ToolsMixin, ListScreen):
    BINDINGS = [Binding("escape", "back", "Back", tooltip="Back to the list", id="back"),
                *ToolsMixin.ALARM_BINDINGS, *ToolsMixin.EXECUTION_BINDINGS,
                *ToolsMixin.ALARM_TOOL_BINDINGS, *ToolsMixin.EXECUTION_TOOL_BINDINGS,
                *ListScreen.LIST_BINDINGS[:5]]

    def __init__(self, kind: str, target: str) -> None:
        self.kind, self.target = kind, target  # before the panes: they are made for it
        super().__init__()
        self.alarm: Row | None = None
        self.execution: Row | None = None
        self.object_row: Row | None = None
        self._versions: tuple[int, ...] = ()
        self._events_shown = -1
        self._mine: list[dict[str, Any]] = []  # the events shown, top first
        self._collapsed_set = False
        self.loads = Loader(self, self.load, RefreshGate(), "target", paced=False)

    def make_panes(self) -> list[ListPane]:
        target = (("target", self.target),)
        return [ListPane("target-faults", FAULTS, "Faults on it", kinds=("faults",),
                         fixed=target, size=100, stylers={}),
                ListPane("target-audit", AUDIT, "Audit rows about it", kinds=("audit",),
                         fixed=target, size=100, stylers={6: ok_style})]

    def body(self) -> ComposeResult:
        with TabbedContent(id="target-tabs"):
            with TabPane("Detail", id="tab-detail"), VerticalScroll(id="target-detail"):
                yield Static(id="target-summary")
                if self.kind == "execution":
                    yield Collapsible(Static(id="target-input"), title="input",
                                      id="input-box")
                    yield Collapsible(Static(id="target-result"), title="result",
                                      id="result-box")
                    yield Static(id="target-saga")
                    callbacks = ConsoleTable(id="target-callbacks")
                    callbacks.add_columns("callback", "status", "kind", "id")
                    callbacks.border_title = ("Callbacks (enter on a waiting one: complete "
                                              "or fail it by hand)")
                    yield callbacks
            if self.kind == "execution":
                with TabPane("History", id="tab-history"):
                    history = ConsoleTable(id="target-history")
                    history.add_columns("#", "time", "event", "name", "detail")
                    history.border_title = "History (enter: the event's JSON)"
                    yield history
            with TabPane("Events", id="tab-events"):
                events = ConsoleTable(id="target-events")
                events.add_columns("when", "event", "data")
                events.border_title = "Events this console saw (enter: JSON)"
                yield events
            with TabPane("Faults", id="tab-faults"):
                yield self.panes[0].table
            with TabPane("Audit", id="tab-audit"):
                yield self.panes[1].table

    # -- what the actions act on ---------------------------------------------------------

    def selected_alarm(self) -> Row | None:
        return self.alarm if self.kind in ("alarm", "object") else None

    def selected_execution(self) -> Row | None:
        return self.execution if self.kind == "execution" else None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("page", "filter", "sort", "reverse"):
            return any(p.table is self.focused for p in self.panes)
        return super().check_action(action, parameters)

    def action_back(self) -> None:
        self.dismiss()

    # -- loading -------------------------------------------------------------------------

    def state_changed(self, state: ConsoleState) -> None:
        super().state_changed(state)
        kinds = ("executions",) if self.kind == "execution" else ("alarms", "objects")
        versions = tuple(state.versions[k] for k in kinds)
        if versions != self._versions:
            self._versions = versions
            self.loads.ask()  # at most every half second under a busy feed

    def reload(self) -> None:
        super().reload()
        self.loads.ask(urgent=True)

    def on_screen_suspend(self) -> None:
        super().on_screen_suspend()
        self.loads.stop()

    async def load(self) -> None:
        """The target itself (`loads` runs it, one at a time)."""
        if self.kind == "execution":
            self.execution = await self.console.fetch("execution", execution_id=self.target)
            self.alarm = None
        else:
            self.alarm = await self.console.fetch("alarm", object=self.target)
            if self.kind == "object":
                found = await self.console.fetch("objects", filter=self.target, limit=50)
                self.object_row = next((r for r in (found or {}).get("rows", [])
                                        if r["object"] == self.target), None)
        self.redraw()

    # -- drawing -------------------------------------------------------------------------

    def draw_detail(self) -> None:
        with contextlib.suppress(NoMatches):
            if self.kind == "execution":
                self._draw_execution(self.console.state.now_ms)
            else:
                self._draw_object(self.console.state.now_ms)
            self._draw_events(self.console.state)

    def _draw_object(self, now_ms: int) -> None:
        out = Text(f"{self.target}\n", style="bold")
        row = self.object_row
        if row is not None:
            out.append(f"{'resident' if row['resident'] else 'hibernated'}  sockets "
                       f"{row['sockets']}  storage {'yes' if row.get('storage') else 'no'}\n\n")
        if self.alarm is None:
            out.append("no alarm set\n", style="dim")
        else:
            out.append_text(attempts_text(self.alarm, now_ms, in_list=False))
        self.query_one("#target-summary", Static).update(out)

    def _draw_execution(self, now_ms: int) -> None:
        d = self.execution
        summary = self.query_one("#target-summary", Static)
        if d is None:
            summary.update(Text(f"{self.target}: no such execution", style="dim"))
            return
        summary.update(summary_text(d, now_ms))
        for box, value, label in (("input", d.get("input"), "input"),
                                  ("result", d.get("result"), "result")):
            body, lines = pretty_json(value, 10**9)
            self.query_one(f"#target-{box}", Static).update(body)
            collapsible = self.query_one(f"#{box}-box", Collapsible)
            collapsible.title = f"{label} ({lines} line{'s' if lines != 1 else ''})"
            if not self._collapsed_set:
                collapsible.collapsed = lines > LONG_JSON
        self._collapsed_set = True
        self.query_one("#target-saga", Static).update(saga_text(d.get("saga") or []))
        self.query_one("#target-callbacks", ConsoleTable).show(
            [(str(c.get("callback_id")), callback_cells(c)) for c in d.get("callbacks") or []])
        history = self.query_one("#target-history", ConsoleTable)
        history.show([(str(ev.get("EventId")), history_cells(ev))
                      for ev in d.get("history") or []])

    def _draw_events(self, state: ConsoleState) -> None:
        if state.events_total == self._events_shown:
            return
        self._events_shown = state.events_total
        mine = [ev for ev in state.events if involves(ev, self.kind, self.target)]
        table = self.query_one("#target-events", ConsoleTable)
        table.show([(str(i), event_cells(ev)) for i, ev in enumerate(reversed(mine))])
        self._mine = list(reversed(mine))

    # -- enter on an event -----------------------------------------------------------------

    @on(DataTable.RowSelected, "#target-history")
    def _history_event(self, event: DataTable.RowSelected) -> None:
        key = str(event.row_key.value)
        ev = next((e for e in (self.execution or {}).get("history", [])
                   if str(e.get("EventId")) == key), None)
        if ev is not None:
            self.app.push_screen(JsonDialog(f"{self.target} event {key} "
                                            f"{ev.get('EventType')}", ev))

    @on(DataTable.RowSelected, "#target-callbacks")
    def _callback_chosen(self, event: DataTable.RowSelected) -> None:
        cid = str(event.row_key.value)
        cb = next((c for c in (self.execution or {}).get("callbacks", [])
                   if c.get("callback_id") == cid), None)
        if cb is None:
            return
        if cb.get("status") != "started" or cb.get("kind") != "Callback":
            self.say(f"callback '{cb.get('name')}' is {cb.get('status')} "
                     f"({cb.get('kind')}): nothing to complete by hand", "warning")
        elif self.console.read_only:
            self.say("the console is read-only: callbacks are completed by operators",
                     "warning")
        else:
            self.answer_callback(cid)

    @on(DataTable.RowSelected, "#target-events")
    def _console_event(self, event: DataTable.RowSelected) -> None:
        index = int(str(event.row_key.value))
        if index < len(self._mine):
            ev = self._mine[index]
            self.app.push_screen(JsonDialog(f"{ev['type']} at {clock_text(ev['at_ms'])}", ev))

