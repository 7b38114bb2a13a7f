"""The bottom of every view: a status line, then the footer with the view's keys.

Textual's `Footer` lists the keys of the view and scrolls what does not fit, so
at 80 columns `?` and `q` (the app's keys, listed last) were out of sight. They
live at the right end of the footer row instead (`FixedKeys`), with the view's
filter and sort while one is on, and never scroll away.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.events import Resize
from textual.timer import Timer
from textual.widgets import Footer, Static

COMPACT_BELOW = 120


def fixed_keys_text(badge: str, read_only: bool, compact: bool = False) -> Text:
    """The filter and sort badge, then the keys that never scroll away."""
    out = Text()
    if badge:
        out.append(f" {badge} ", style="bold black on yellow")
        out.append(" esc " if compact else " esc clears ", style="dim")
    if read_only:
        out.append(" read-only ", style="bold")
    for key, label in (("^p", "Commands"), ("?", "Help"), ("q", "Quit")):
        out.append(f" {key}", style="bold")
        out.append(f" {label}" if not compact or key != "^p" else "")
        out.append(" " if not compact else "")
    return out


class FixedKeys(Static):
    """The view's filter and sort badge, then ^p, ? and q: always in sight."""

    DEFAULT_CSS = """
    FixedKeys { width: auto; height: 1; background: $footer-background; }
    """

    _shown: Text | None = None

    def show(self, badge: str, read_only: bool) -> None:
        compact = bool(self.screen.size.width) and self.screen.size.width < COMPACT_BELOW
        text = fixed_keys_text(badge, read_only, compact)
        if text != self._shown:
            self._shown = text
            self.update(text)


class FooterRow(Horizontal):
    DEFAULT_CSS = """
    FooterRow { height: 1; }
    FooterRow > Footer { dock: none; width: 1fr; }
    """

    def compose(self) -> ComposeResult:
        yield Footer(show_command_palette=False)
        yield FixedKeys(id="fixed-keys")

    def on_resize(self, event: Resize) -> None:
        # Under 120 columns the footer drops the padding around its keys (more of them fit).
        self.query_one(Footer).compact = event.size.width < COMPACT_BELOW


class StatusLine(Static):
    """One line for what the console says about the view: where the cursor went when
    its row left, the result of the last action, a refused sort.

    What it says is about the view as it was then: it goes after `LIFE_S` seconds
    (and when the operator leaves the view), rather than stay to contradict what the
    view shows later."""

    DEFAULT_CSS = """
    StatusLine { height: 1; padding: 0 1; color: $text-muted; }
    StatusLine.-warning { color: $warning; }
    StatusLine.-error { color: $error; }
    """
    LIFE_S = 15.0

    _expiry: Timer | None = None

    def say(self, text: str, severity: str = "information") -> None:
        self.set_class(severity == "warning", "-warning")
        self.set_class(severity == "error", "-error")
        self.update(Text(text, no_wrap=True, overflow="ellipsis"))
        if self._expiry is not None:
            self._expiry.stop()
        self._expiry = self.set_timer(self.LIFE_S, self.clear, name="status-line")

    def clear(self) -> None:
        if self._expiry is not None:
            self._expiry.stop()
            self._expiry = None
        self.set_class(False, "-warning")
        self.set_class(False, "-error")
        self.update("")

    @property
    def text(self) -> str:
        content = self.content
        return content.plain if isinstance(content, Text) else str(content)
