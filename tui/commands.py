"""The command palette's alarmtop commands (ctrl+p): views, filters, sorts, and every
action that applies to the selection, named with its target.

What is offered follows the view the palette was opened on, as its footer does:
an action hidden there (read-only, nothing selected, not a dead letter) is not
offered here either.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from textual.app import SystemCommand
from textual.screen import Screen

from alarmtop.tui.screens.actions import ActionsMixin
from alarmtop.tui.screens.listed import ListScreen
from alarmtop.tui.screens.lists import EventsScreen, FaultsScreen
from alarmtop.tui.screens.marking import MarkingMixin
from alarmtop.tui.screens.timers import TimersScreen

if TYPE_CHECKING:
    from alarmtop.tui.console import Console

VIEWS = [("overview", "Overview", "1"), ("alarms", "Alarms", "2"),
         ("executions", "Executions", "3"), ("objects", "Objects", "4"),
         ("dead", "Dead letters", "5"), ("faults", "Faults", "6"), ("audit", "Audit log", "7"),
         ("events", "Event log", "8"), ("timers", "Timers board", "9"),
         ("nodes", "Nodes", "0")]
# action: (title with {alarm} / {execution} / {fault}, help)
ACTIONS: dict[str, tuple[str, str]] = {
    "rearm": ("Re-arm {alarm}", "A fresh retry ladder, first attempt now"),
    "fire_now": ("Fire {alarm} now", "Run the alarm's next attempt at once"),
    "clear_dead_letter": ("Clear the dead letter of {alarm}", "Drop it for good"),
    "inject_fault": ("Inject a fault on {target}", "Make it misbehave on purpose"),
    "send_callback": ("Send a callback result to {execution}", "Complete a waiting callback"),
    "retry_compensation": ("Retry the failed compensation of {execution}",
                           "Re-run the compensation that failed and carry on"),
    "resolve": ("Resolve {execution} by hand", "Record the failed step as done by hand"),
    "abort": ("Abort {execution}", "End it as aborted; it runs nothing more"),
    "hand_to_human": ("Hand {execution} to a human", "Hold it until someone decides"),
    "clear_fault": ("Remove fault {fault}", "The target behaves again"),
    "pause_execution": ("Pause {execution}", "It runs nothing until resumed"),
    "resume_execution": ("Resume {execution}", "What fell due while paused runs now"),
    "redrive": ("Redrive {execution}…", "From its first failed operation, after a replay check"),
    "fork": ("Fork {execution} from an operation…", "A new execution, after a replay check"),
    "replay_check": ("Replay check of {execution}", "Clean, or the first divergence"),
    "pause_alarm": ("Pause the alarm of {alarm}", "Fire nothing until resumed"),
    "resume_alarm": ("Resume the alarm of {alarm}", "Let it fire again"),
    "snooze_alarm": ("Snooze the alarm of {alarm}…", "Move it later"),
    "fire_timer": ("Fire {timer} now", "Run the timer's work at once"),
    "snooze_timer": ("Snooze {timer}…", "Move the timer later"),
    "mark": ("Mark or unmark {row}", "For a bulk action (space)"),
    "unmark_all": ("Unmark all ({marked})", "Clear every mark (u)"),
    "bulk": ("Bulk action on the marked ({marked})…", "Asks first, then shows progress (b)"),
    "select_query": ("Select by query…", "See how many match, then act on them (m)"),
    "batches": ("Progress of the latest bulk action", "Done, failed, left; cancel (B)"),
}


def _names(screen: Screen[Any]) -> dict[str, str]:
    names: dict[str, str] = {}
    if isinstance(screen, ActionsMixin):
        names["alarm"] = screen.selected_object() or ""
        names["execution"] = screen.execution_label()
        names["target"] = names["alarm"] or names["execution"]
    if isinstance(screen, MarkingMixin):
        target = screen.mark_target()
        names["row"] = target[1] if target else ""
        names["marked"] = screen.console.marks.summary() or "none marked"
    if isinstance(screen, TimersScreen):
        timer = screen.selected_timer()
        names["timer"] = "" if timer is None else screen.label(timer)
    if isinstance(screen, FaultsScreen):
        fault = screen.selected_fault()
        names["fault"] = "" if fault is None else f"{fault['id']} ({fault['kind']} on " \
                                                  f"{fault['target']})"
    return names


def _action(screen: Screen[Any], action: str) -> Callable[[], Any]:
    return partial(screen.run_action, action)


def action_commands(screen: Screen[Any]) -> Iterator[SystemCommand]:
    """The actions `screen` offers now, each named with its target."""
    names = _names(screen)
    for action, (title, help_text) in ACTIONS.items():
        if not hasattr(screen, f"action_{action}") or not screen.check_action(action, ()):
            continue
        try:
            label = title.format(**names)
        except KeyError:
            continue
        yield SystemCommand(label, help_text, _action(screen, action))


def list_commands(screen: Screen[Any]) -> Iterator[SystemCommand]:
    """Filter, sort and clear for the view's focused list."""
    if isinstance(screen, EventsScreen):
        yield SystemCommand("Filter the event log…", "Show only events with a text",
                            screen.action_filter)
        return
    if not isinstance(screen, ListScreen):
        return
    pane = screen.pane()
    yield SystemCommand(f"Filter {pane.title}…", "Show only rows that contain a text",
                        screen.action_filter)
    if pane.query.narrowed:
        yield SystemCommand("Clear filter and sort", "The view's own order, every row",
                            screen.action_clear)
    for column in pane.listing.columns:
        if column.sort is not None:
            yield SystemCommand(f"Sort {pane.title} by {column.label}",
                                "By the real value, ascending (then S reverses)",
                                partial(screen.requery, pane, pane.query.with_sort(
                                    column.sort)))
    yield SystemCommand("Reverse the sort", "The same column the other way round",
                        screen.action_reverse)


def console_commands(app: Console, screen: Screen[Any]) -> Iterator[SystemCommand]:
    for mode, title, key in VIEWS:
        yield SystemCommand(f"Go to {title} ({key})", f"Switch to the {title.lower()} view",
                            partial(app.switch_mode, mode))
    yield from list_commands(screen)
    yield from action_commands(screen)
    state = "on" if app.confirm_actions else "off"
    yield SystemCommand(f"Ask before re-arm and fire now: {state} (toggle)",
                        "Whether r and n ask for a confirmation first",
                        app.toggle_confirmations)
    yield SystemCommand("Help", "Every key and what it does", app.action_help)
