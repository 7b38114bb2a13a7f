"""`alarmtop`: the Textual console for alarms and sagas.

One Screen per view, switched with MODES. The feed is one exclusive worker that
connects, merges frames into `ConsoleState` and reconnects with backoff when the
server goes away; the current view redraws from that state when `RedrawPacer`
says so (at most once per server tick, keys first); the pages the alarms views
fetch in the background are drawn the same way (`redraw_soon()`). Every view is
composed once, right after the first one shows, so that a view's first visit
costs what a later one does. Commands go through `command()`, which refuses in
read-only mode and shows the server's answer.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, ClassVar

from textual import events, work
from textual.app import App, ScreenStackError
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.timer import Timer
from textual.widget import AwaitMount

from alarmtop.tui import collector
from alarmtop.tui.client import CommandError, Disconnected, OpsClient
from alarmtop.tui.pacing import RedrawPacer
from alarmtop.tui.screens.alarms import AlarmsScreen, DeadLettersScreen
from alarmtop.tui.screens.dialogs import TextDialog
from alarmtop.tui.screens.executions import ExecutionsScreen
from alarmtop.tui.screens.lists import (
    AuditScreen,
    EventsScreen,
    FaultsScreen,
    HelpScreen,
    ObjectsScreen,
)
from alarmtop.tui.screens.overview import OverviewScreen
from alarmtop.tui.state import ConsoleState

MAX_BACKOFF_S = 10.0
COMPOSE_GAP_S = 0.02


class AlarmtopApp(App[None]):
    CSS_PATH = "alarmtop.tcss"
    TITLE = "alarmtop"
    MODES: ClassVar[dict[str, Any]] = {
        "overview": OverviewScreen, "alarms": AlarmsScreen, "executions": ExecutionsScreen,
        "objects": ObjectsScreen, "dead": DeadLettersScreen, "faults": FaultsScreen,
        "audit": AuditScreen, "events": EventsScreen,
    }
    DEFAULT_MODE = "overview"
    BINDINGS: ClassVar[list[Any]] = [
        Binding("1", "switch_mode('overview')", "Overview", show=False, id="view-overview"),
        Binding("2", "switch_mode('alarms')", "Alarms", show=False, id="view-alarms"),
        Binding("3", "switch_mode('executions')", "Executions", show=False,
                id="view-executions"),
        Binding("4", "switch_mode('objects')", "Objects", show=False, id="view-objects"),
        Binding("5", "switch_mode('dead')", "Dead letters", show=False, id="view-dead"),
        Binding("6", "switch_mode('faults')", "Faults", show=False, id="view-faults"),
        Binding("7", "switch_mode('audit')", "Audit", show=False, id="view-audit"),
        Binding("8", "switch_mode('events')", "Events", show=False, id="view-events"),
        Binding("slash", "filter", "Filter", tooltip="Show only objects whose Class/name "
                "contains a text", id="filter"),
        Binding("question_mark", "help", "Help", tooltip="Every key and what it does",
                id="help"),
        Binding("q", "quit", "Quit", tooltip="Leave alarmtop", id="quit"),
    ]

    def __init__(self, client: OpsClient, *, target: str = "", read_only: bool = False) -> None:
        super().__init__()
        self.client = client
        self.target = target
        self.read_only = read_only
        self.state = ConsoleState()
        self.filter_text = ""
        self.pacer = RedrawPacer()
        self._pace_timer: Timer | None = None
        # Snapshots received: one comes after each (re)connect, and pages fetched before
        # it may show data the server no longer has, so views key their pages by it.
        self.snapshots = 0

    def on_mount(self) -> None:
        self.feed()
        self._pace()
        self.call_after_refresh(self.compose_views)

    @work(group="compose-views")
    async def compose_views(self) -> None:
        """Compose every view once, one at a time, after the first one shows.

        Composing a view on its first visit (its widgets, their styles, its table
        columns) took 40-110 ms of the key that asked for it on a loaded machine; a
        view composed beforehand is shown as a later visit is. Textual has no public
        way to start a screen that is not shown, so this puts it where `switch_mode`
        looks for a mode's screen (Textual 8.x; tests/tui/test_console.py checks it).
        When those internals are not as expected, views compose on first visit.
        """
        stacks = getattr(self, "_screen_stacks", None)
        register = getattr(self, "_register", None)
        if not isinstance(stacks, dict) or register is None:
            return
        if self.screen._css_update_count != self._css_update_count:
            # Textual restyled the app before the first view was mounted, so it restyles
            # everything again when that view is shown again (60-70 ms of the key that
            # goes back to it, on a loaded machine); done now, nobody waits for it.
            self.refresh_css(animate=False)
        for mode, view in self.MODES.items():
            if mode in stacks or not self.is_running:
                continue
            screen: Screen[Any] = view()
            stacks[mode] = [screen]  # first: a key for this view now finds this screen
            await AwaitMount(screen, register(self, screen))
            if self.current_mode != mode:
                # Composing focused its table; unfocused, it is focused when first shown,
                # as on a first visit: the table then says which row is highlighted (the
                # detail pane and the footer's actions follow it) once it has its rows.
                # Not if its key came while it was composing: it is shown and focused.
                screen.set_focus(None)
            await asyncio.sleep(COMPOSE_GAP_S)  # keys and frames pass between two views
        collector.settle()  # the views live as long as the console

    def on_unmount(self) -> None:
        collector.thaw()

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, (events.Key, events.MouseDown)):
            self.pacer.key(self.clock())
        await super().on_event(event)

    def clock(self) -> float:
        """Seconds for pacing and for the age of cached pages.

        The loop's clock, not `time.monotonic()`: tests freeze the latter (countdowns)."""
        return asyncio.get_running_loop().time()

    def _pace(self) -> None:
        """Redraw if the pacer says it is time, then sleep until it will be."""
        now = self.clock()
        if self.pacer.wait(now) == 0:
            stale = self.pacer.stale
            self.pacer.drawn(now)
            if stale:  # on the time the frame carries
                self._redraw()
            elif self.state.connected:  # countdowns move between frames
                self.state.advance_local(time.monotonic())
                self._redraw()
        if self._pace_timer is not None:
            self._pace_timer.stop()
        self._pace_timer = self.set_timer(self.pacer.wait(now), self._pace, name="redraw")

    @work(exclusive=True, group="feed")
    async def feed(self) -> None:
        """Connect, follow the frames, reconnect with backoff: forever."""
        backoff = 0.5
        while True:
            try:
                await self.client.connect()
                backoff = 0.5
                async for frame in self.client.frames():
                    if self.state.apply(frame, time.monotonic()):
                        self.pacer.changed()
                        self._pace()
                    if frame.get("type") == "snapshot":
                        self.snapshots += 1
                        self._reload_view()  # after a reconnect pages may be stale
            except CommandError as exc:  # a bad token will not get better by retrying
                self.state.connected, self.state.status = False, f"refused: {exc}"
                self._redraw()
                self.notify(f"the server refused us: {exc}", severity="error", timeout=30)
                return
            except (Disconnected, OSError) as exc:
                self.state.connected, self.state.status = False, "disconnected, reconnecting"
                self._redraw()
                self.log.warning(f"feed: {exc}")
            await asyncio.sleep(backoff)
            backoff = min(MAX_BACKOFF_S, backoff * 2)

    def redraw_soon(self) -> None:
        """Redraw the view when the pacer says, as after a frame: for answers that come
        in the background, so that a key pressed meanwhile is shown first."""
        self.pacer.changed()
        self._pace()

    def _redraw(self) -> None:
        try:
            screen = self.screen
        except ScreenStackError:  # shutting down: nothing left to draw on
            return
        refresh = getattr(screen, "refresh_from", None)
        if refresh is None or not screen.is_mounted:
            return  # a view not mounted yet draws itself when it is
        try:
            refresh(self.state)
        except NoMatches:  # its widgets are still being composed: the next tick redraws
            pass

    def _reload_view(self) -> None:
        reload = getattr(self.screen, "reload", None)
        if reload is not None and self.screen.is_mounted:
            self.screen.run_worker(reload, exclusive=True, group="reload")

    async def fetch(self, op: str, **args: Any) -> Any:
        """A read from the server; None (and a notice) when it fails."""
        try:
            return await self.client.request(op, **{k: v for k, v in args.items()
                                                    if v is not None})
        except (CommandError, Disconnected, TimeoutError) as exc:
            self.notify(f"{op}: {exc}", severity="warning")
            return None

    async def command(self, op: str, **args: Any) -> Any:
        """An operator action; shows the server's answer either way."""
        if self.read_only:
            self.notify(f"{op} refused: the console is read-only", severity="error")
            return None
        try:
            data = await self.client.request(op, **args)
        except (CommandError, Disconnected, TimeoutError) as exc:
            self.notify(f"{op} failed: {exc}", severity="error", timeout=8)
            return None
        self.notify(f"{op}: ok", severity="information")
        self._reload_view()
        return data

    @work(group="dialogs")
    async def action_filter(self) -> None:
        text = await self.push_screen_wait(TextDialog(
            "Filter by Class/name (empty: show all)", "e.g. LeaseLedger/tenant",
            self.filter_text, required=False))
        if text is not None:
            self.filter_text = text
            self._redraw()
            reload = getattr(self.screen, "reload", None)
            if reload is not None:
                await reload()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())
