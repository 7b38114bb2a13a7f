"""What every console view shares: the header, the status line, the footer.

A view draws when the app posts it `StateChanged` (data down, coalesced); it
says things to the operator on its status line (`say`).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import events, on
from textual.app import App, ComposeResult, ScreenStackError
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.screen import ModalScreen, Screen

from alarmtop.tui import collector
from alarmtop.tui.compat import adopt_styles
from alarmtop.tui.formatting import EXEC_STYLE, PAUSED_MARK, STATE_STYLE
from alarmtop.tui.marks import MARK
from alarmtop.tui.messages import Reload, StateChanged
from alarmtop.tui.state import ConsoleState
from alarmtop.tui.widgets.footer import FixedKeys, FooterRow, StatusLine
from alarmtop.tui.widgets.status_bar import StatusBar

if TYPE_CHECKING:
    from alarmtop.tui.console import Console


def styled_state(label: str) -> Text:
    """A state or status in its colours; a paused one keeps them and gets the mark."""
    marked = label.startswith(MARK)
    base = label.removeprefix(MARK).removesuffix(PAUSED_MARK)
    style = STATE_STYLE.get(base) or EXEC_STYLE.get(base.lower(), "")
    out = Text(MARK.strip(), style="bold cyan") if marked else Text()
    out.append(f" {base} ", style=style)
    if label.endswith(PAUSED_MARK):
        out.append(PAUSED_MARK.strip(), style="bold magenta")
    return out


# Actions that change something: refused, and said so, on a read-only console.
CHANGES = frozenset({
    "rearm", "fire_now", "clear_dead_letter", "inject_fault", "send_callback",
    "retry_compensation", "resolve", "abort", "hand_to_human", "clear_fault",
    "pause_alarm", "resume_alarm", "snooze_alarm", "pause_execution", "resume_execution",
    "redrive", "fork", "fire_timer", "snooze_timer", "bulk", "select_query"})
# What a key that did nothing explains (`ConsoleScreen.on_key`): the actions above, and
# the reads that need a row.
EXPLAINED = CHANGES | {"replay_check"}


def action_name(action: str) -> str:
    """"page(1)" -> "page"."""
    return action.partition("(")[0]


def _a_screen_is_up(app: App[Any]) -> bool:
    try:
        return app.screen is not None
    except ScreenStackError:
        return False


class ConsoleScreen(Screen[None]):
    """A view: header on top, then its body, its status line and its footer."""

    def __init__(self) -> None:
        super().__init__()
        self._footer_keys: tuple[tuple[str, str, bool], ...] | None = None
        if _a_screen_is_up(self.app):
            # Textual restyles the whole app, re-parsing every stylesheet (30-50 ms),
            # when it shows a screen styled before the last theme change; a new screen
            # counts as such, so a view's first visit paid for that twice. Once a first
            # screen is up the stylesheet is complete, and a new view is styled as it
            # mounts. (The first screen does need it: theme variables come that way.)
            adopt_styles(self, self.app)

    def on_mount(self) -> None:
        # Textual asks the footer to refresh too (on focus changes).
        self.bindings_updated_signal.subscribe(self, self._footer_refreshed, immediate=True)
        self.call_after_refresh(collector.settle)  # composed: it lives as long as we do

    def _footer_refreshed(self, screen: Screen[Any]) -> None:
        # The footer has just rebuilt itself from the bindings as they are now: that is
        # what it shows (forgetting it instead rebuilt it a second time on every view
        # switch, 10-20 ms each on a loaded machine).
        self._footer_keys = self._binding_keys()

    def _binding_keys(self) -> tuple[tuple[str, str, bool], ...]:
        # The action too: `p` is Pause or Resume, both enabled, as the row is now.
        return tuple((key, b.binding.action, b.enabled)
                     for key, b in self.active_bindings.items())

    def refresh_actions(self) -> None:
        """Refresh the footer when an action was enabled or disabled since it was drawn:
        the footer rebuilds all its keys on every request, so not on every frame or
        cursor move."""
        keys = self._binding_keys()
        if keys != self._footer_keys:
            self.refresh_bindings()
            self._footer_keys = keys

    @property
    def console(self) -> Console:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield from self.body()
        yield StatusLine(id="status-line")
        yield FooterRow()

    def body(self) -> ComposeResult:
        yield from ()

    def say(self, text: str, severity: str = "information") -> None:
        """Tell the operator something about this view, on its status line."""
        with contextlib.suppress(NoMatches):
            self.query_one(StatusLine).say(text, severity)

    # -- a key whose action does not apply ----------------------------------------------

    def why_not(self, action: str) -> str:
        """Why `action` does not apply to what is selected, in a few words ("" when it
        does, or when the view cannot say)."""
        return ""

    def on_key(self, event: events.Key) -> None:
        """An action key that no binding will run (read-only, or the action does not apply
        to the row as it is now) says why, rather than nothing at all.

        Keys reach the view before the app runs their bindings, and the bindings it
        will consider are the active ones: a key among them is left to its binding."""
        if event.key in self.active_bindings:
            return
        bindings = [b for b in self._own_bindings() if event.key in b.key.split(",")
                    and action_name(b.action) in EXPLAINED]
        if bindings:
            self.explain(event.key, bindings)

    def _own_bindings(self) -> list[Binding]:
        return [b for b in type(self).BINDINGS if isinstance(b, Binding)]

    def explain(self, key: str, bindings: list[Binding]) -> None:
        if self.console.read_only and any(action_name(b.action) in CHANGES for b in bindings):
            text = (f"{key} ({bindings[0].description}): {self.console.read_only_reason}; "
                    "actions are for an operator")
            self.say(text, "warning")
            self.notify(text, severity="warning", timeout=4)
            return
        reasons = [(b, self.why_not(action_name(b.action))) for b in bindings]
        reasons = [(b, r) for b, r in reasons if r]
        # "no alarm is selected" only when nothing better is known: the p of an execution
        # row is not about its missing alarm.
        best = next(((b, r) for b, r in reasons if not r.startswith("no ")), None) or (
            reasons[0] if reasons else (bindings[0], "it does not apply here"))
        self.say(f"{key} ({best[0].description}): {best[1]}", "warning")

    def badge(self) -> str:
        """The filter and sort on in this view, for the footer ('' when none)."""
        return ""

    @on(StateChanged)
    def _state_changed(self, message: StateChanged) -> None:
        self.redraw()
        self.state_changed(message.state)

    @on(Reload)
    def _reload(self, message: Reload) -> None:
        self.reload()

    def state_changed(self, state: ConsoleState) -> None:
        """What else a view does on a new state (views that page: ask for a refresh)."""

    def reload(self) -> None:
        """Fetch again what this view shows from the server (views that page)."""

    def on_screen_resume(self) -> None:
        self.redraw()
        self.reload()

    def on_screen_suspend(self) -> None:
        """Left for another view (not covered by a dialog): what the status line said was
        about this view as it was; coming back, it would contradict what is shown."""
        with contextlib.suppress(NoMatches, ScreenStackError):
            if not isinstance(self.app.screen, ModalScreen):
                self.query_one(StatusLine).clear()

    def redraw(self) -> None:
        """Redraw from the console state, unless the view is not (or no longer) composed:
        frames, ticks and answers to queries may land while a view comes or goes."""
        with contextlib.suppress(NoMatches):
            self.draw(self.console.state)
            if _a_screen_is_up(self.app) and self is self.app.screen:
                # What is shown is now current: the pacer then holds the next redraw back
                # (while keys come), instead of drawing at once an answer that lands while
                # a key waits, as it would for a view it thinks was drawn long ago.
                self.console.pacer.drawn(self.console.clock())

    def draw(self, state: ConsoleState) -> None:
        """Draw from the console state (views add their own)."""
        self.query_one(StatusBar).show(state, self.console.target, self.console.role_label)
        self.query_one(FixedKeys).show(self.badge(), self.console.read_only)
