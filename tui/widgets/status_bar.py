"""The two header lines: where we are connected, who we are, and the urgent counts.

Each line is cut at the terminal's edge, never wrapped: a wrapped first line
pushed the urgent counts off an 80x24 screen. Below `WIDE` columns the header is
compact and the urgent counts come first, right after the name.
"""

from __future__ import annotations

from rich.text import Text
from textual.events import Resize
from textual.widgets import Static

from alarmtop.tui.fleet import nodes_header
from alarmtop.tui.formatting import STATE_STYLE, clock_text, count, duration, sparkline
from alarmtop.tui.state import ConsoleState

WIDE = 110


def urgent_counts(state: ConsoleState, gap: str = " ") -> Text:
    """The urgent counts, each on its colour when not 0; all dim while disconnected
    (they are the last ones heard, not the server's now)."""
    c = state.counts
    alarms = c.get("alarms", {})
    out = Text()
    for label, n in (("DEAD", alarms.get("dead", 0)),
                     ("NEAR-EXH", c.get("near_exhaustion", 0)),
                     ("RETRYING", alarms.get("retrying", 0)),
                     ("NEEDS-HUMAN", c.get("needs_human", 0))):
        live = n and state.connected
        out.append(f" {label} {count(int(n))} ", style=STATE_STYLE[label] if live else "dim")
        out.append(gap)
    return out


def faults(state: ConsoleState) -> Text:
    return Text(f"faults {len(state.faults)}",
                style="bold yellow" if state.faults else "dim")


def totals(state: ConsoleState) -> str:
    """Objects, executions and alarms. Live objects are not all among those with storage:
    an object that never wrote anything has no database (and "11 stored, 12 live" read
    wrong). Each execution is an object with storage of its own: the server counts them
    among the stored objects, said apart here ("15 with storage" counted 12 of them)."""
    c = state.counts
    alarms = sum(int(v) for v in c.get("alarms", {}).values())
    executions = sum(int(v) for v in (c.get("executions") or {}).values())
    stored = max(0, int(c.get("objects", 0)) - executions)
    return (f"objects {count(int(c.get('resident', 0)))} live, {count(stored)} with storage"
            + (f"  executions {count(executions)}" if executions else "")
            + f"  alarms {count(alarms)}")


def rates(state: ConsoleState) -> Text:
    out = Text("fires ")
    out.append(sparkline(state.fires), style="green")
    out.append(f" {state.fires[-1] if state.fires else 0}/tick  failures ")
    out.append(sparkline(state.failures), style="red")
    out.append(f" {state.failures[-1] if state.failures else 0}  late ")
    out.append(sparkline(state.lateness), style="yellow")
    out.append(f" {duration(state.lateness[-1] if state.lateness else 0)}")
    return out


def _connection(state: ConsoleState) -> Text:
    """While not connected: what happened in capitals ("DISCONNECTED"), then the reason
    as the system said it (an upper-cased "CONNECTION REFUSED: [ERRNO 111]" read as
    shouting), and since when the counts are the last ones heard."""
    if state.connected:
        return Text()
    head, _, rest = state.status.partition(", ") if state.status.startswith(
        "disconnected") else state.status.partition(": ")
    out = Text(f" {head.upper()} ", style="bold white on red")
    if rest:
        out.append(f" {rest}", style="bold red")
    if state.now_ms:
        out.append(f"  counts as of {clock_text(state.now_ms)}", style="dim")
    return out


def _nodes(state: ConsoleState) -> Text:
    """The fleet's node count and a warning when one is down, with a gap after it
    (nothing on SQLite)."""
    text = nodes_header(state.counts)
    return Text.assemble(text, "  ") if text else text


def status_text(state: ConsoleState, target: str, role: str, width: int = 160) -> Text:
    """Both header lines for a terminal `width` columns wide, each cut to fit."""
    brand = Text(" alarmtop ", style="bold reverse")
    if width >= WIDE:
        first = Text.assemble(brand, f"  {target}  ", (role, "bold"), "  ",
                              _connection(state), f"  {totals(state)}")
        second = Text.assemble(urgent_counts(state), " ", _nodes(state), faults(state), "   ",
                               rates(state))
    else:
        first = Text.assemble(brand, " ", urgent_counts(state, ""), " ", (role, "bold"))
        # A node down is urgent: it comes first on the second line, where it is not cut.
        second = Text.assemble(_connection(state), " ", _nodes(state), faults(state), "  ",
                               target, "  ",
                               totals(state), "  ", rates(state))
    for line in (first, second):
        line.truncate(max(1, width), overflow="ellipsis")
    return Text("\n").join([first, second])


class StatusBar(Static):
    DEFAULT_CSS = """
    StatusBar { height: 2; background: $panel; }
    """

    _shown: Text | None = None
    _inputs: tuple[ConsoleState, str, str] | None = None

    def show(self, state: ConsoleState, target: str, role: str) -> None:
        self._inputs = (state, target, role)
        text = status_text(state, target, role, self.size.width or 160)
        if text != self._shown:  # a repaint, even of the same text, is not free
            self._shown = text
            self.update(text, layout=False)  # two lines, always: no new layout

    def on_resize(self, event: Resize) -> None:
        if self._inputs is not None:
            self.show(*self._inputs)
