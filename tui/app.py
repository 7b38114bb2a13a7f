"""`alarmtop`: the Textual console for alarms and sagas.

One Screen per view, switched with MODES. The feed is one exclusive worker that
connects, merges frames into `ConsoleState` and reconnects with backoff when the
server goes away. The view shown draws when `RedrawPacer` says so (at most once
per server tick, keys first): the app posts it a `StateChanged` message, which a
newer one replaces while it waits. List views re-query the window they show
from the server when a frame touches their kind (`screens/listed.py`). Every view
is composed once, right after the first one shows, so that a view's first visit
costs what a later one does. Commands go through `command()`, which refuses for a
viewer or in read-only mode and names the target in what it says.

While it cannot connect, the header says why ("reconnecting: connection refused:
..."). `q` leaves at once: the feed is cancelled, not waited for, and the
connection gets at most `QUIT_CLOSE_S` to close.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from textual import events, work
from textual.app import App, ScreenStackError, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.timer import Timer

from alarmtop.tui import collector
from alarmtop.tui.bulk import BulkBook
from alarmtop.tui.client import CommandError, Disconnected, OpsClient
from alarmtop.tui.commands import console_commands
from alarmtop.tui.compat import compose_ahead, drawing_driver, mode_started, restyle_pending
from alarmtop.tui.console import Console, Outcome
from alarmtop.tui.listings import ServerListings
from alarmtop.tui.marks import Marks
from alarmtop.tui.messages import BulkChanged, Reload, StateChanged
from alarmtop.tui.pacing import RedrawPacer
from alarmtop.tui.screens.alarms import AlarmsScreen, DeadLettersScreen
from alarmtop.tui.screens.base import ConsoleScreen
from alarmtop.tui.screens.executions import ExecutionsScreen
from alarmtop.tui.screens.lists import (
    AuditScreen,
    EventsScreen,
    FaultsScreen,
    HelpScreen,
    ObjectsScreen,
)
from alarmtop.tui.screens.nodes import NodesScreen
from alarmtop.tui.screens.overview import OverviewScreen
from alarmtop.tui.screens.target import TargetScreen
from alarmtop.tui.screens.timers import TimersScreen
from alarmtop.tui.state import ConsoleState

MAX_BACKOFF_S = 10.0
QUIT_CLOSE_S = 0.3  # what quitting waits for the connection's close, at most
COMPOSE_GAP_S = 0.02
# What an operator command did, for its result line: {target} is what it acted on.
DONE = {"rearm": "re-armed {target}", "fire_now": "fired {target} now",
        "clear_dead_letter": "cleared the dead letter of {target}",
        "inject_fault": "injected a fault on {target}", "clear_fault": "removed {target}",
        "send_callback": "sent a result to {target}",
        "retry_compensation": "retrying the failed compensation of {target}",
        "resolve": "resolved {target} by hand", "abort": "aborted {target}",
        "hand_to_human": "handed {target} to a human", "pause": "paused {target}",
        "resume": "resumed {target}", "redrive": "redriving {target}",
        "fork": "forked {target}", "complete_callback": "completed {target} by hand",
        "pause_alarm": "paused the alarm of {target}",
        "resume_alarm": "resumed the alarm of {target}", "snooze_alarm": "snoozed {target}",
        "fire_timer": "fired {target} now", "snooze_timer": "snoozed {target}",
        "bulk_start": "started {target}", "bulk_cancel": "cancelling {target}"}
VERB = {"rearm": "re-arm", "fire_now": "fire now", "clear_dead_letter": "clear dead letter",
        "inject_fault": "inject fault", "clear_fault": "remove", "send_callback": "send",
        "retry_compensation": "retry compensation", "resolve": "resolve", "abort": "abort",
        "hand_to_human": "hand to a human", "pause": "pause", "resume": "resume",
        "redrive": "redrive", "fork": "fork", "complete_callback": "complete",
        "pause_alarm": "pause the alarm of", "resume_alarm": "resume the alarm of",
        "snooze_alarm": "snooze", "fire_timer": "fire", "snooze_timer": "snooze",
        "bulk_start": "start", "bulk_cancel": "cancel"}


class AlarmtopApp(App[None]):
    CSS_PATH = "alarmtop.tcss"
    TITLE = "alarmtop"
    MODES: ClassVar[dict[str, Any]] = {
        "overview": OverviewScreen, "alarms": AlarmsScreen, "executions": ExecutionsScreen,
        "objects": ObjectsScreen, "dead": DeadLettersScreen, "faults": FaultsScreen,
        "audit": AuditScreen, "events": EventsScreen, "timers": TimersScreen,
        "nodes": NodesScreen,
    }
    DEFAULT_MODE = "overview"
    # Below 120 columns a view's detail pane goes under its table (alarmtop.tcss) and the
    # footer is compact.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
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
        Binding("9", "switch_mode('timers')", "Timers", show=False, id="view-timers"),
        Binding("0", "switch_mode('nodes')", "Nodes", show=False, id="view-nodes",
                tooltip="The fleet's nodes: up or down, shards owned, last renewal"),
        # Shown at the right end of every footer (widgets/footer.py), never scrolled away.
        Binding("question_mark", "help", "Help", tooltip="Every key and what it does",
                id="help", show=False),
        Binding("q", "quit", "Quit", tooltip="Leave alarmtop", id="quit", show=False),
    ]

    def __init__(self, client: OpsClient, *, target: str = "", read_only: bool = False,
                 confirm_actions: bool = True) -> None:
        super().__init__()
        self.client = client
        self.listings = ServerListings(client)
        self.target = target
        self.read_only_flag = read_only
        self.confirm_actions = confirm_actions  # r and n ask first
        self.state = ConsoleState()
        self.pacer = RedrawPacer()
        self._pace_timer: Timer | None = None
        # Snapshots received: one comes after each (re)connect, and pages fetched before
        # it may show data the server no longer has, so views key their pages by it.
        self.snapshots = 0
        self.marks = Marks()  # rows marked for a bulk action, in every view, by identity
        self.bulks = BulkBook()  # the bulk batches heard of (events, answers)

    def get_driver_class(self) -> Any:
        """Textual's, but drawing on the terminal when stderr is redirected
        (`compat.drawing_driver`): `alarmtop --demo 2>err.log` drew into the file."""
        return drawing_driver(super().get_driver_class())

    # -- who we are ------------------------------------------------------------------------

    @property
    def read_only(self) -> bool:
        """No action is offered: `--read-only`, or a viewer token (the server would
        refuse every one)."""
        return self.read_only_flag or self.state.role == "viewer"

    @property
    def read_only_reason(self) -> str:
        """Why no action is offered, for what a refused key says."""
        if self.state.role == "viewer":
            return "this console is read-only (a viewer's token)"
        return "this console is read-only (--read-only)"

    @property
    def role_label(self) -> str:
        if self.state.role == "viewer":
            return "viewer (read-only)"
        if self.read_only_flag:
            return "read-only"
        return self.state.role or "-"

    def toggle_confirmations(self) -> None:
        self.confirm_actions = not self.confirm_actions
        self.notify("re-arm and fire now " + ("ask first" if self.confirm_actions
                                              else "no longer ask first"))

    # -- start and stop ---------------------------------------------------------------------

    def on_mount(self) -> None:
        self.feed()
        self._pace()
        self.call_after_refresh(self.compose_views)

    @work(group="compose-views")
    async def compose_views(self) -> None:
        """Compose every view once, one at a time, after the first one shows.

        Composing a view on its first visit (its widgets, their styles, its table
        columns) took 40-110 ms of the key that asked for it on a loaded machine; a
        view composed beforehand is shown as a later visit is (`compat.compose_ahead`).
        """
        if restyle_pending(self):
            # Textual restyled the app before the first view was mounted, so it restyles
            # everything again when that view is shown again (60-70 ms of the key that
            # goes back to it, on a loaded machine); done now, nobody waits for it.
            self.refresh_css(animate=False)
        for mode, view in self.MODES.items():
            if mode_started(self, mode) or not self.is_running:
                continue
            screen: Screen[Any] = view()
            mounting = compose_ahead(self, mode, screen)
            if mounting is None:
                return  # Textual is not as expected: views compose on their first visit
            await mounting
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

    async def action_quit(self) -> None:
        """Leave now, whatever the server is doing: the feed is cancelled (a reconnect
        or a frame it waits for must not hold the exit), and the connection gets a
        short while to close politely, then is left to the process's end."""
        self.workers.cancel_group(self, "feed")
        with contextlib.suppress(Exception, TimeoutError):
            async with asyncio.timeout(QUIT_CLOSE_S):
                await self.client.close()
        self.exit()

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, (events.Key, events.MouseDown)):
            self.pacer.key(self.clock())
        await super().on_event(event)

    def clock(self) -> float:
        """Seconds for pacing and for the age of cached pages.

        The loop's clock, not `time.monotonic()`: tests freeze the latter (countdowns)."""
        return asyncio.get_running_loop().time()

    # -- the feed and the redraws -------------------------------------------------------------

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
                    if frame.get("type") == "snapshot":
                        self.snapshots += 1  # before the views see it: pages are stale
                    self._bulk_events(frame)
                    if self.state.apply(frame, time.monotonic()):
                        self.pacer.changed()
                        self._pace()
            except CommandError as exc:  # a bad token will not get better by retrying
                self.state.connected, self.state.status = False, f"refused: {exc}"
                self._redraw()
                self.notify(f"the server refused us: {exc}", severity="error", timeout=30)
                return
            except (Disconnected, OSError) as exc:
                reason = exc.reason if isinstance(exc, Disconnected) else (
                    exc.strerror or str(exc))
                self.state.connected, self.state.status = False, (
                    f"disconnected, reconnecting: {reason}")
                self._redraw()
                self.log.warning(f"feed: {reason}")
            await asyncio.sleep(backoff)
            backoff = min(MAX_BACKOFF_S, backoff * 2)

    def _bulk_events(self, frame: dict[str, Any]) -> None:
        """Bulk batches' progress from the frame's events, to the screen on top (the
        progress view of that batch shows it)."""
        for event in frame.get("events") or ():
            if str(event.get("type", "")).startswith("bulk."):
                batch = self.bulks.apply_event(event)
                if batch is not None:
                    with contextlib.suppress(ScreenStackError):
                        self.screen.post_message(BulkChanged(batch))

    def redraw_soon(self) -> None:
        """Redraw the view when the pacer says, as after a frame: for answers that come
        in the background, so that a key pressed meanwhile is shown first."""
        self.pacer.changed()
        self._pace()

    def active_view(self) -> ConsoleScreen | None:
        """The view the operator sees: the topmost console screen (a dialog over it does
        not hide it)."""
        try:
            stack = self.screen_stack
        except ScreenStackError:  # shutting down
            return None
        return next((s for s in reversed(stack) if isinstance(s, ConsoleScreen)), None)

    def _redraw(self) -> None:
        view = self.active_view()
        if view is not None and view.is_mounted:  # not mounted yet: it draws when it is
            view.post_message(StateChanged(self.state))

    # -- talking to the server ---------------------------------------------------------------

    async def fetch(self, op: str, **args: Any) -> Any:
        """A read from the server; None (and a notice) when it fails."""
        try:
            return await self.client.request(op, **{k: v for k, v in args.items()
                                                    if v is not None})
        except (CommandError, Disconnected, TimeoutError) as exc:
            self.notify(f"{op}: {exc}", severity="warning")
            return None

    async def perform(self, op: str, target: str, args: dict[str, Any], *,
                      said: Callable[[Any], str] | None = None) -> Outcome:
        """An operator action on `target` (what the operator reads, say "Flaky/payments-0"
        or "fault f1 (...)"). What happened is said, naming the target, in a notice and
        on the status line: `said(answer)` when given, else the op's own words."""
        if self.read_only:
            why = "this console is a viewer's" if self.state.role == "viewer" else (
                "the console is read-only")
            self._say(f"{VERB.get(op, op)} {target} refused: {why}", "error")
            return Outcome(False, error=why, refused=True)
        try:
            data = await self.client.request(op, **args)
        except (CommandError, Disconnected, TimeoutError) as exc:
            self._say(f"{VERB.get(op, op)} {target} failed: {exc}", "error")
            return Outcome(False, error=str(exc), refused=isinstance(exc, CommandError))
        text = said(data) if said is not None else DONE.get(op, op + " {target}").format(
            target=target)
        self._say(text, "information")
        view = self.active_view()
        if view is not None:
            view.post_message(Reload())
        return Outcome(True, data)

    async def try_command(self, op: str, target: str, /, **args: Any) -> tuple[bool, str]:
        """`perform` as (done, the server's reason when not)."""
        outcome = await self.perform(op, target, args)
        return outcome.ok, outcome.error

    async def command(self, op: str, target: str, /, **args: Any) -> bool:
        return (await self.try_command(op, target, **args))[0]

    def _say(self, text: str, severity: str) -> None:
        self.notify(text, severity=severity,  # type: ignore[arg-type]
                    timeout=8 if severity == "error" else 4)
        view = self.active_view()
        if view is not None:
            view.say(text, severity)

    # -- keys --------------------------------------------------------------------------------

    def drill(self, kind: str, target: str) -> None:
        """Open the detail of an alarm, object or execution over the current view."""
        self.push_screen(TargetScreen(kind, target))

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from console_commands(self, screen)
        yield from super().get_system_commands(screen)


# The views type `self.app` as a `Console`: mypy holds the app to being one here.
_THE_APP_IS_A_CONSOLE: type[Console] = AlarmtopApp
