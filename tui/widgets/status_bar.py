"""The two header lines: where we are connected and the urgent counts."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from alarmtop.tui.formatting import STATE_STYLE, count, duration, sparkline
from alarmtop.tui.state import ConsoleState


def status_text(state: ConsoleState, target: str, read_only: bool) -> Text:
    c = state.counts
    alarms = c.get("alarms", {})
    total = sum(int(v) for v in alarms.values())
    role = "read-only" if read_only else (state.role or "-")
    line = Text()
    line.append(" alarmtop ", style="bold reverse")
    line.append(f"  {target}  ")
    line.append(role, style="bold")
    if not state.connected:
        line.append(f"  {state.status.upper()}", style="bold white on red")
    line.append(f"    objects {count(int(c.get('objects', 0)))} stored, "
                f"{count(int(c.get('resident', 0)))} live  alarms {count(total)}\n")
    for label, n in (("DEAD", alarms.get("dead", 0)),
                     ("NEAR-EXH", c.get("near_exhaustion", 0)),
                     ("RETRYING", alarms.get("retrying", 0)),
                     ("NEEDS-HUMAN", c.get("needs_human", 0))):
        line.append(f" {label} {count(int(n))} ",
                    style=STATE_STYLE[label] if n else "dim")
        line.append("  ")
    line.append(f"faults {len(state.faults)}", style="bold yellow" if state.faults else "dim")
    line.append("   fires ")
    line.append(sparkline(state.fires), style="green")
    line.append(f" {state.fires[-1] if state.fires else 0}/tick  failures ")
    line.append(sparkline(state.failures), style="red")
    line.append(f" {state.failures[-1] if state.failures else 0}  late ")
    line.append(sparkline(state.lateness), style="yellow")
    line.append(f" {duration(state.lateness[-1] if state.lateness else 0)}")
    return line


class StatusBar(Static):
    DEFAULT_CSS = """
    StatusBar { height: 2; background: $panel; }
    """

    _shown: Text | None = None

    def show(self, state: ConsoleState, target: str, read_only: bool) -> None:
        text = status_text(state, target, read_only)
        if text != self._shown:  # a repaint, even of the same text, is not free
            self._shown = text
            self.update(text, layout=False)  # two lines, always: no new layout
