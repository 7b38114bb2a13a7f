"""Objects, faults, the audit log, the live event log, and help."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.widgets import DataTable, Markdown, RichLog
from textual.worker import Worker

from alarmtop.tui.formatting import first_line, relative
from alarmtop.tui.screens.base import ConsoleScreen, selected_key
from alarmtop.tui.screens.dialogs import ConfirmDialog
from alarmtop.tui.state import ConsoleState
from alarmtop.tui.widgets.table import ConsoleTable


def clock_text(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%H:%M:%S")


class ObjectsScreen(ConsoleScreen):
    def body(self) -> ComposeResult:
        table = ConsoleTable(id="object-page")
        table.border_title = "Objects"
        table.add_columns("object", "where", "sockets", "alarm", "alarm state")
        yield table

    async def reload(self) -> None:
        data = await self.console.fetch("objects", limit=200,
                                        filter=self.console.filter_text or None)
        if data is None:
            return
        now = self.console.state.now_ms
        rows = [(r["object"], [r["object"], "resident" if r["resident"] else "hibernated",
                               str(r["sockets"]), relative(r["alarm_ms"], now),
                               r["alarm_state"] or "-"]) for r in data["rows"]]
        with contextlib.suppress(NoMatches):  # the view may have closed meanwhile
            table = self.query_one("#object-page", ConsoleTable)
            table.show(rows)
            table.border_subtitle = (f"{data['total']:,} with storage, "
                                     f"{data['resident']:,} live")


class FaultsScreen(ConsoleScreen):
    BINDINGS = [Binding("x", "clear_fault", "Clear fault", tooltip="Remove the selected fault",
                        id="clear-fault")]

    def body(self) -> ComposeResult:
        table = ConsoleTable(id="fault-table")
        table.border_title = "Active faults"
        table.add_columns("id", "target", "kind", "remaining", "triggered", "step/point/secs")
        yield table

    def refresh_from(self, state: ConsoleState) -> None:
        super().refresh_from(state)
        rows = [(f["id"], [f["id"], f["target"], f["kind"],
                           "always" if f["remaining"] is None else str(f["remaining"]),
                           str(f["triggered"]),
                           " ".join(str(v) for v in (f.get("step"), f.get("point"),
                                                     f.get("seconds")) if v)])
                for f in state.faults]
        self.query_one("#fault-table", ConsoleTable).show(rows)
        self.refresh_actions()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "clear_fault":
            return not self.console.read_only and selected_key(
                self.query_one("#fault-table", DataTable)) is not None
        return True

    @work(group="actions")
    async def action_clear_fault(self) -> None:
        fid = selected_key(self.query_one("#fault-table", DataTable))
        if fid and await self.app.push_screen_wait(ConfirmDialog(f"Remove fault {fid}?")):
            await self.console.command("clear_fault", fault_id=fid)


class AuditScreen(ConsoleScreen):
    def body(self) -> ComposeResult:
        table = ConsoleTable(id="audit-table")
        table.border_title = "Audit log (who, when, what, why)"
        table.add_columns("when", "who", "role", "action", "target", "ok", "reason")
        yield table

    async def reload(self) -> None:
        data = await self.console.fetch("audit", limit=200)
        if data is None:
            return
        rows = [(str(a["seq"]), [clock_text(a["at_ms"]), a["actor"], a["role"] or "-",
                                 a["action"], a["target"] or "-",
                                 Text("ok", style="green") if a["ok"] else Text("refused",
                                                                               style="red"),
                                 first_line(a["reason"], 40)]) for a in data["rows"]]
        with contextlib.suppress(NoMatches):  # the view may have closed meanwhile
            self.query_one("#audit-table", ConsoleTable).show(rows)

    def __init__(self) -> None:
        super().__init__()
        self.seen_total = 0

    def refresh_from(self, state: ConsoleState) -> None:
        super().refresh_from(state)
        fresh = min(state.events_total - self.seen_total, len(state.events))
        self.seen_total = state.events_total
        if fresh > 0 and any(e["type"].startswith("operator.")
                             for e in list(state.events)[-fresh:]):
            worker: Worker[None] = self.run_worker(self.reload, exclusive=True,
                                                   group="reload")
            del worker


class EventsScreen(ConsoleScreen):
    def __init__(self) -> None:
        super().__init__()
        self.shown = 0

    def body(self) -> ComposeResult:
        log = RichLog(id="event-log", max_lines=2000, wrap=False)
        log.border_title = "Event log (live)"
        yield log

    def refresh_from(self, state: ConsoleState) -> None:
        super().refresh_from(state)
        log = self.query_one(RichLog)
        fresh = min(state.events_total - self.shown, len(state.events))
        new = list(state.events)[-fresh:] if fresh > 0 else []
        for ev in new[-200:]:
            data = dict(ev["data"])
            who = data.pop("object", None) or data.pop("execution_id", "")
            style = "red" if ev["type"].endswith(("failed", "dead")) else (
                "yellow" if "near" in ev["type"] or "retry" in ev["type"] else "")
            line = Text(f"{clock_text(ev['at_ms'])}  ", style="dim")
            line.append(f"{ev['type']:<26}", style=style)
            line.append(f" {who:<30} ")
            line.append(first_line(" ".join(f"{k}={v}" for k, v in data.items()), 80),
                        style="dim")
            log.write(line)
        self.shown = state.events_total


HELP = """\
# alarmtop keys

| key | what it does |
|---|---|
| `1`..`8` | overview, alarms, executions, objects, dead letters, faults, audit, events |
| `/` | filter alarms and objects by `Class/name` text |
| `ctrl+p` | command palette |
| `r` / `n` | re-arm / fire now the selected alarm |
| `x` | clear the selected dead letter (alarms) or fault (faults) |
| `f` | inject a fault on the selected object or execution |
| `c` | send a callback result (e.g. `go` or `cancel` for the festival verdict) |
| `R` / `h` / `a` / `H` | retry compensation / resolve by hand / abort / hand to a human |
| `q` | quit |

Destructive actions ask first. With `--read-only` every action is hidden and refused.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close", tooltip="Close help")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog help"):
            yield Markdown(HELP)
