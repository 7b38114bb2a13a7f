"""Every control that can take the focus is on screen, whole, when it has it: in every
view, the help, each detail and every dialog of the console, at 80x24 and 160x48.

The snooze dialog drew 4 of its 6 presets and the clipped ones still took the focus:
Tab, Tab, Tab, Enter snoozed a callback deadline by a day. Here each focusable widget
of each screen is focused in turn (as Tab would, which scrolls a scrollable form to
it) and must then be drawn whole inside the terminal: not cut by its container, not
past the edge. The console runs on the fake backend of `fake.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from textual.errors import NoWidget
from textual.screen import Screen
from textual.widget import Widget

from alarmtop.tui.bulk import Batch
from alarmtop.tui.screens.bulk_dialogs import BulkDialog, BulkProgressScreen, SelectionDialog
from alarmtop.tui.screens.dialogs import CallbackDialog, ConfirmDialog, FaultDialog, TextDialog
from alarmtop.tui.screens.target import JsonDialog
from alarmtop.tui.screens.tool_dialogs import (
    ForkDialog,
    RedriveDialog,
    ReplayDialog,
    SnoozeDialog,
)
from alarmtop.tui.tools import operations
from tests.tui.fake import (
    BULK,
    BULK_SAMPLE,
    DETAILS,
    EVENTS,
    REPLAY_DIVERGED,
    SIZE,
    SMALL,
    fake_console,
    fed,
    until,
)

Pilot = Any
CLEAN = {"clean": True, "version": "1", "summary": "replay clean", "replayed": 9,
         "recorded": 9, "stopped_at": None, "divergence": None}
CALLBACKS = [{"name": "verdict", "callback_id": "cb1.WyJoc2YtZGF5MSIsIjQiXQ",
              "status": "started", "kind": "Callback"}]
LONG = "festival-stream/hsf-day2-with-a-rather-long-execution-id-0123456789"

DIALOGS: dict[str, Callable[[], Screen[Any]]] = {
    "confirm": lambda: ConfirmDialog(f"Drop the dead letter of {LONG}? Its attempts stay in "
                                     "the event log only.", "Drop"),
    "text": lambda: TextDialog(f"Abort {LONG}? It ends as aborted and runs nothing more. "
                               "Why?", "reason"),
    "fault-object": lambda: FaultDialog("LeaseLedger/tenant-42"),
    "fault-execution": lambda: FaultDialog("hsf-day2", ["compensate_open_viewing_page"]),
    "callback": lambda: CallbackDialog(LONG, CALLBACKS),
    "snooze": lambda: SnoozeDialog("the callback deadline of festival-stream/hsf-day1 "
                                   "(operation 4)", "due in 59m"),
    "redrive-clean": lambda: RedriveDialog(LONG, CLEAN),
    "redrive-diverged": lambda: RedriveDialog(LONG, REPLAY_DIVERGED),
    "fork": lambda: ForkDialog(LONG, REPLAY_DIVERGED, operations(DETAILS["hsf-day2"]["history"]),
                               "2"),
    "replay": lambda: ReplayDialog(LONG, REPLAY_DIVERGED),
    "json": lambda: JsonDialog("alarm.fired", EVENTS[1]),
    "bulk": lambda: BulkDialog("alarms", BULK_SAMPLE),
    "selection-alarms": lambda: SelectionDialog("alarms", 0),
    "selection-executions": lambda: SelectionDialog("executions", 0),
    "bulk-progress": lambda: BulkProgressScreen(Batch("b-0117").merged(BULK)),
}
# The views and the screens reached by keys from the first view.
KEYS = {"overview": (), "alarms": ("2",), "executions": ("3",), "objects": ("4",),
        "dead": ("5",), "faults": ("6",), "audit": ("7",), "events": ("8",),
        "timers": ("9",), "nodes": ("0",), "help": ("question_mark",),
        "alarm-detail": ("2", "enter"), "execution-detail": ("3", "enter"),
        "object-detail": ("4", "enter")}
SIZES = {"80x24": SMALL, "160x48": SIZE}


def unseen(screen: Screen[Any], widget: Widget) -> str | None:
    """What is wrong with how `widget` is drawn, or None when it is drawn whole and
    inside the terminal."""
    try:
        geometry = screen.find_widget(widget)
    except NoWidget:
        return "not drawn at all"
    region = geometry.region
    shown = region.intersection(geometry.clip).intersection(screen.region)
    if not region.area:
        return "drawn with no size"
    if shown != region:
        return f"drawn at {region} but only {shown} is visible"
    return None


def label(widget: Widget) -> str:
    text = getattr(widget, "label", None) or getattr(widget, "placeholder", None) or ""
    return f"{type(widget).__name__}#{widget.id or '-'} {str(text)!r}"


async def _settled(pilot: Pilot) -> None:
    """Only the feed (and a key's worker waiting for its form) still runs."""
    await until(pilot, lambda: all(w.group in ("feed", "actions") or w.is_finished
                                   for w in pilot.app.workers), "the console's workers")
    await pilot.pause()


async def hidden_controls(pilot: Pilot) -> list[str]:
    """Focus every control of the screen on top in turn (as Tab does); those not shown
    whole when they have the focus."""
    screen = pilot.app.screen
    out = []
    for widget in list(screen.focus_chain):
        widget.focus()
        # Focus scrolls its container after the next refresh, and a loaded machine may
        # draw a few frames before that: wait for the settled picture (a control that is
        # really cut stays cut, and is reported once the frames stop changing it).
        problem = unseen(screen, widget)
        for _ in range(50):
            if problem is None:
                break
            await pilot.pause(0.02)
            problem = unseen(screen, widget)
        if problem is not None:
            out.append(f"{label(widget)}: {problem}")
    return out


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("name", list(KEYS))
async def test_every_control_of_a_view_is_on_screen(name: str, size: str) -> None:
    app = fake_console()
    async with app.run_test(size=SIZES[size]) as pilot:
        await fed(pilot)
        for key in KEYS[name]:
            if key == "enter":  # on the first row, once there is one
                await until(pilot, lambda: getattr(pilot.app.focused, "row_count", 0) > 0,
                            "a row to open")
            before = pilot.app.screen
            await pilot.press(key)
            await until(pilot, lambda b=before: pilot.app.screen is not b,  # type: ignore[misc]
                        f"the screen after {key}")
        await _settled(pilot)
        assert list(pilot.app.screen.focus_chain), "nothing to focus"
        assert await hidden_controls(pilot) == []
        app.workers.cancel_group(app, "feed")


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("name", list(DIALOGS))
async def test_every_control_of_a_dialog_is_on_screen(name: str, size: str) -> None:
    app = fake_console()
    async with app.run_test(size=SIZES[size]) as pilot:
        await fed(pilot)
        dialog = DIALOGS[name]()
        app.push_screen(dialog)
        await until(pilot, lambda: pilot.app.screen is dialog and dialog.is_mounted,
                    f"the {name} dialog")
        await _settled(pilot)
        assert await hidden_controls(pilot) == []
        app.workers.cancel_group(app, "feed")
