"""The console tells the truth while things move: Pilot tests against a real server.

Every list view is open while the runtime changes underneath it (no key pressed):
the view must show the change within a refresh, in its order. The cursor must
stay on its object while rows re-sort, and say so when the object leaves. Each
view keeps its own filter and sort; every list pages past 200 rows. The clock is
the runtime's `VirtualClock`; the waits are for frames (see `until`).
"""

from __future__ import annotations

from typing import Any

from textual.containers import VerticalScroll
from textual.widgets import DataTable, TabbedContent

from alarmtop.core.kernel.executions.context import DurableContext
from alarmtop.core.kernel.executions.functions import durable_execution
from alarmtop.examples.flaky import Flaky
from alarmtop.tui.client import CommandError
from alarmtop.tui.screens.alarms import AlarmsScreen, DeadLettersScreen
from alarmtop.tui.screens.dialogs import CallbackDialog, ConfirmDialog, FaultDialog
from alarmtop.tui.screens.executions import ExecutionsScreen
from alarmtop.tui.screens.lists import AuditScreen, EventsScreen, FaultsScreen, ObjectsScreen
from alarmtop.tui.screens.target import JsonDialog, TargetScreen
from tests.tui.conftest import (
    Harness,
    Recorder,
    cell_text,
    fixed_keys,
    focus,
    static_text,
    status_line,
    status_text,
    table_keys,
    until,
)
from tests.tui.fake import ALARMS, fake_console, fed
from tests.tui.test_console import (
    connected,
    dialog,
    done,
    paste,
    run,
    settle_workers,
    start,
    type_text,
    view,
)

Pilot = Any


def subtitle(pilot: Pilot, table: str) -> str:
    return str(pilot.app.screen.query_one(table).border_subtitle)


def title(pilot: Pilot, table: str) -> str:
    return str(pilot.app.screen.query_one(table).border_title)


def selected(pilot: Pilot, table: str) -> str | None:
    return pilot.app.screen.query_one(table).selected  # type: ignore[no-any-return]


@durable_execution(name="noop")
async def noop(event: Any, ctx: DurableContext) -> Any:
    return event


# -- rows appear while a view is open ------------------------------------------------------


async def test_the_dead_letters_view_reaches_the_headers_dead_count(harness: Harness) -> None:
    """The bug: view 5 kept one RETRYING row while the header said DEAD 2. Open on an
    empty list, two alarms walk their ladders to dead letters: the view lists both,
    its total is the header's DEAD, and nothing that is not dead stays."""
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "5", DeadLettersScreen, "#alarm-page", [])
        await harness.rt.get(Flaky, "payments-1").arm(0)
        await harness.clock.advance(0.6)  # retrying now
        await until(pilot, lambda: "RETRYING 1" in status_text(pilot), "RETRYING 1")
        await harness.rt.get(Flaky, "payments-2").arm(0)
        await harness.clock.advance(5)
        refs = ["Flaky/payments-1", "Flaky/payments-2"]
        # The list and the header refresh on their own paces: wait for both.
        await until(pilot, lambda: sorted(table_keys(pilot, "#alarm-page")) == refs
                    and "DEAD 2" in status_text(pilot), "both dead letters in view 5")
        assert "1-2 of 2" in subtitle(pilot, "#alarm-page")
        await settle_workers(pilot)


async def test_a_row_appears_in_each_view_while_it_is_open(harness: Harness) -> None:
    """Alarms, executions, objects, faults and the audit log: something new in the
    runtime shows in the open view without a key."""
    harness.rt.register_execution(noop)
    first = await harness.pending("payments-1", 60)
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "2", AlarmsScreen, "#alarm-page", [first])
        second = await harness.pending("payments-0", 30)  # sooner: first in the order
        await until(pilot, lambda: table_keys(pilot, "#alarm-page") == [second, first],
                    "the new alarm, in its place")
        await view(pilot, "3", ExecutionsScreen, "#execution-page", [])
        await harness.rt.executions.start("noop", {"n": 1}, execution_id="n-1")
        await harness.clock.advance(0)
        await until(pilot, lambda: table_keys(pilot, "#execution-page") == ["n-1"],
                    "the new execution")
        await view(pilot, "4", ObjectsScreen, "#object-page",
                   ["Execution/n-1", second, first])
        third = await harness.pending("payments-3", 90)
        await until(pilot, lambda: third in table_keys(pilot, "#object-page"),
                    "the new object")
        await view(pilot, "6", FaultsScreen, "#fault-table", [])
        fid = harness.rt.faults.inject(first, "alarm_raise", 2)
        await until(pilot, lambda: table_keys(pilot, "#fault-table") == [fid], "the new fault")
        await pilot.press("7")
        await until(pilot, lambda: isinstance(pilot.app.screen, AuditScreen), "audit")
        await harness.rt.audit.record("127.0.0.1:1", "rearm", first, "from elsewhere",
                                      role="operator")
        await until(pilot, lambda: len(table_keys(pilot, "#audit-table")) == 1,
                    "the new audit row")
        await settle_workers(pilot)


# -- identity, not position ----------------------------------------------------------------


async def test_the_cursor_stays_on_its_object_while_rows_re_sort(harness: Harness) -> None:
    """The operator puts the cursor on the second alarm; another alarm moves ahead of it:
    the cursor moves with its alarm to the third line, and nothing is said about a row
    leaving."""
    a = await harness.pending("payments-a", 10)
    b = await harness.pending("payments-b", 20)
    c = await harness.pending("payments-c", 30)
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "2", AlarmsScreen, "#alarm-page", [a, b, c])
        await pilot.press("down")
        assert selected(pilot, "#alarm-page") == b
        await harness.rt.get(Flaky, "payments-c").arm(5_000)  # c is now the soonest
        await harness.clock.advance(0)
        await until(pilot, lambda: table_keys(pilot, "#alarm-page") == [c, a, b], "re-sorted")
        assert selected(pilot, "#alarm-page") == b
        assert pilot.app.screen.query_one("#alarm-page", DataTable).cursor_row == 2
        assert "left this view" not in status_line(pilot)
        await settle_workers(pilot)


async def test_when_the_object_leaves_the_cursor_goes_near_and_the_status_line_says_so(
        harness: Harness) -> None:
    d1 = await harness.dead_letter("payments-1")
    d2 = await harness.dead_letter("payments-2")
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "5", DeadLettersScreen, "#alarm-page", [d1, d2])
        await pilot.press("home")  # the operator's choice: d1
        await harness.rt.clear_dead_letter(Flaky, "payments-1")  # someone else cleared it
        await until(pilot, lambda: table_keys(pilot, "#alarm-page") == [d2], "d1 gone")
        assert selected(pilot, "#alarm-page") == d2
        await until(pilot, lambda: f"{d1} left this view" in status_line(pilot),
                    "the status line")
        assert f"the cursor is on {d2}" in status_line(pilot)
        await settle_workers(pilot)


async def test_after_rearm_the_cursor_stays_on_the_rearmed_alarm(harness: Harness) -> None:
    """In view 2 the re-armed dead letter moves below the other dead letter (it is
    retrying now); the cursor goes with it. The confirmation and result name it."""
    d1 = await harness.dead_letter("payments-1")
    d2 = await harness.dead_letter("payments-2")
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "2", AlarmsScreen, "#alarm-page", [d1, d2])
        assert selected(pilot, "#alarm-page") == d1
        await pilot.press("r")
        box = await dialog(pilot, ConfirmDialog)
        assert box.question.startswith(f"Re-arm {d1}?")
        await pilot.click("#yes")
        await done(pilot, rec, f"re-armed {d1}")
        await harness.clock.advance(0)  # its first new attempt fails: retrying
        await until(pilot, lambda: table_keys(pilot, "#alarm-page") == [d2, d1], "re-sorted")
        await until(pilot, lambda: cell_text(pilot, "#alarm-page", d1)[0].strip() == "RETRYING",
                    "the re-armed alarm retrying")
        assert table_keys(pilot, "#alarm-page") == [d2, d1]
        assert selected(pilot, "#alarm-page") == d1
        await settle_workers(pilot)


async def test_after_retry_compensation_the_cursor_stays_on_the_saga(harness: Harness) -> None:
    """The needs-human saga is first; once its rollback finishes it sorts after the
    suspended one, and the cursor is still on it."""
    eid, fid = await harness.needs_human("hsf-day2")
    await harness.festival("hsf-day1")
    harness.rt.faults.clear(fid)
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "3", ExecutionsScreen, "#execution-page", [eid, "hsf-day1"])
        await pilot.press("R")
        await done(pilot, rec, f"retrying the failed compensation of festival-stream/{eid}")
        await harness.clock.advance(1)
        await until(pilot, lambda: table_keys(pilot, "#execution-page") == ["hsf-day1", eid],
                    "the finished saga after the suspended one")
        assert selected(pilot, "#execution-page") == eid
        assert "SUCCEEDED" in cell_text(pilot, "#execution-page", eid)[0]
        await settle_workers(pilot)


async def test_confirmations_can_be_turned_off(harness: Harness) -> None:
    """With confirm_actions off (a setting, and a palette command), `n` fires at once."""
    pending = await harness.pending()
    app = harness.console(confirm_actions=False)
    rec = Recorder()
    async with run(app, rec) as pilot:
        await connected(pilot)
        await until(pilot, lambda: table_keys(pilot, "#overview-alarms") == [pending], "row")
        await pilot.press("n")
        await done(pilot, rec, f"fired {pending} now")
        app.toggle_confirmations()
        await pilot.press("n")
        await dialog(pilot, ConfirmDialog)
        await pilot.press("escape")
        await settle_workers(pilot)


# -- filters and sorts per view -------------------------------------------------------------


async def test_sorting_from_the_keyboard_by_the_real_value(harness: Harness) -> None:
    """`s` twice sorts the alarms by due time: "in 51m" after "in 6.0s" (the text would
    put it first); the header shows the arrow, the footer the badge; `S` reverses;
    escape goes back to the most urgent first. Another view keeps its own order."""
    late = await harness.pending("payments-late", 51 * 60)
    soon = await harness.pending("payments-soon", 6)
    dead = await harness.dead_letter("payments-dead")
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "2", AlarmsScreen, "#alarm-page", [dead, soon, late])
        await pilot.press("s", "s")  # object, then due in
        await until(pilot, lambda: table_keys(pilot, "#alarm-page") == [soon, late, dead],
                    "sorted by due time (the dead letter has none: last)")
        labels = [str(c.label) for c in pilot.app.screen.query_one(
            "#alarm-page", DataTable).columns.values()]
        assert labels[2] == "due in ▲" and labels[0] == "state"
        assert "sort due in ▲" in fixed_keys(pilot) and "sort due in ▲" in title(
            pilot, "#alarm-page")
        await pilot.press("S")
        await until(pilot, lambda: table_keys(pilot, "#alarm-page") == [late, soon, dead],
                    "reversed")
        await view(pilot, "5", DeadLettersScreen, "#alarm-page", [dead])
        assert "sort" not in fixed_keys(pilot)
        await pilot.press("2")
        await until(pilot, lambda: isinstance(pilot.app.screen, AlarmsScreen), "alarms")
        await pilot.press("escape")
        await until(pilot, lambda: table_keys(pilot, "#alarm-page") == [dead, soon, late],
                    "the most urgent first again")
        await settle_workers(pilot)


async def filter_then_sort(pilot: Pilot, key: str, screen: type, table: str, text: str,
                           filtered: set[str], sort_keys: str, in_order: list[str]) -> None:
    """Open view `key`, filter it by `text` (the rows `filtered`), press `sort_keys`
    (the rows `in_order`)."""
    await pilot.press(key)
    await until(pilot, lambda: isinstance(pilot.app.screen, screen)
                and len(table_keys(pilot, table)) > 0, f"view {key}")
    await pilot.press("slash")
    await paste(pilot, text)
    await pilot.press("enter")
    await until(pilot, lambda: set(table_keys(pilot, table)) == filtered,
                f"view {key} filtered")
    assert f"filter “{text}”" in title(pilot, table)
    await pilot.press(*sort_keys)
    await until(pilot, lambda: table_keys(pilot, table) == in_order, f"view {key} sorted")


async def test_each_list_filters_and_sorts_on_its_own(harness: Harness) -> None:
    """Executions, objects, faults and the audit log each take a filter and a sort."""
    harness.rt.register_execution(noop)
    for eid in ("n-b", "n-a", "other"):
        await harness.rt.executions.start("noop", {}, execution_id=eid)
    await harness.clock.advance(0)
    for name in ("x", "y"):
        harness.rt.faults.inject(f"Flaky/{name}", "alarm_raise", None)
        await harness.rt.audit.record("127.0.0.1:1", f"act-{name}", f"Flaky/{name}",
                                      role="operator")
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        # executions: newest first, then s: by name/id, ascending
        await filter_then_sort(pilot, "3", ExecutionsScreen, "#execution-page", "n-",
                               {"n-a", "n-b"}, "s", ["n-a", "n-b"])
        # objects: by name, then S: the other way round
        await filter_then_sort(pilot, "4", ObjectsScreen, "#object-page", "Execution/n",
                               {"Execution/n-a", "Execution/n-b"}, "S",
                               ["Execution/n-b", "Execution/n-a"])
        # faults: by id, then S: f2 first
        await filter_then_sort(pilot, "6", FaultsScreen, "#fault-table", "Flaky/",
                               {"f1", "f2"}, "S", ["f2", "f1"])
        # the audit log: newest first, then S: oldest first
        await filter_then_sort(pilot, "7", AuditScreen, "#audit-table", "act-",
                               {"1", "2"}, "S", ["1", "2"])
        await settle_workers(pilot)


async def test_the_event_log_filters_too(harness: Harness) -> None:
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await pilot.press("8")
        await until(pilot, lambda: isinstance(pilot.app.screen, EventsScreen), "events")
        await pilot.press("slash")
        await paste(pilot, "alarm.dead")
        await pilot.press("enter")
        await harness.dead_letter("payments-1")
        await harness.pending("payments-2")
        log = pilot.app.screen.query_one("#event-log")
        await until(pilot, lambda: any("alarm.dead" in line.text for line in log.lines),
                    "the dead letter's event")
        assert all("alarm.dead" in line.text for line in log.lines)
        assert "filter “alarm.dead”" in fixed_keys(pilot)
        await pilot.press("escape")
        await until(pilot, lambda: any("alarm.set" in line.text for line in log.lines),
                    "every event again")
        await settle_workers(pilot)


# -- paging everywhere -----------------------------------------------------------------------


async def test_objects_executions_and_audit_page_past_200(harness: Harness) -> None:
    """No fixed cap: 230 of each, "201-230 of 230" on the third page of every list."""
    harness.rt.register_execution(noop)
    for i in range(230):
        await harness.rt.executions.start("noop", {}, execution_id=f"n-{i:03d}")
        await harness.rt.audit.record("127.0.0.1:1", "rearm", f"Flaky/p-{i:03d}",
                                      role="operator")
    await harness.clock.advance(0)
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        for key, table in (("3", "#execution-page"), ("4", "#object-page"),
                           ("7", "#audit-table")):
            await pilot.press(key)
            await until(pilot, lambda t=table: "1-100 of 230" in subtitle(pilot, t),  # type: ignore[misc]
                        f"the first page of view {key}")
            await pilot.press("pagedown", "pagedown")
            await until(pilot, lambda t=table: "201-230 of 230" in subtitle(pilot, t)  # type: ignore[misc]
                        and len(table_keys(pilot, t)) == 30, f"the third page of view {key}")
        assert table_keys(pilot, "#audit-table")[-1] == "1"  # the oldest, last
        await settle_workers(pilot)


# -- a small terminal ---------------------------------------------------------------------


async def test_at_80x24_every_view_keeps_the_urgent_counts_help_and_quit(
        harness: Harness) -> None:
    await harness.dead_letter()
    await harness.needs_human()
    app, rec = await start(harness)
    async with app.run_test(size=(80, 24), notifications=True, message_hook=rec) as pilot:
        await connected(pilot)
        for key in "234567891":
            await pilot.press(key)
            await pilot.pause()
            first = status_text(pilot).split("\n")[0]
            for count in ("DEAD 1", "NEAR-EXH 0", "RETRYING 0", "NEEDS-HUMAN 1"):
                assert count in first, (key, first)
            assert len(first) <= 80
            keys = fixed_keys(pilot)
            assert "? Help" in keys and "q Quit" in keys, (key, keys)
            assert pilot.app.screen.query_one("#fixed-keys").region.right <= 80
        await settle_workers(pilot)


# -- one execution in full ------------------------------------------------------------------


async def test_the_execution_detail_scrolls_to_its_last_event_with_input_and_result(
        harness: Harness) -> None:
    """A cancelled festival: its side pane scrolls to ExecutionSucceeded (end, not
    sideways); enter opens it in full: outcome, input and result, the history table
    whose last row is ExecutionSucceeded, and enter on it shows the event's JSON."""
    eid = await harness.festival("hsf-day1")
    await harness.verdict(eid, "cancel")
    await harness.clock.advance(5)
    assert (await harness.describe(eid))["status"] == "succeeded"
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "3", ExecutionsScreen, "#execution-page", [eid])
        await until(pilot, lambda: "ExecutionSucceeded" in static_text(
            pilot, "#execution-detail-text"), "the whole history in the side pane")
        text = static_text(pilot, "#execution-detail-text")
        assert "outcome: cancelled" in text and '"eventId": "hsf-day1"' in text
        assert '"event": "hsf-day1"' in text and "more lines" in text  # the result, cut
        await focus(pilot, "execution-detail")
        await pilot.press("end")
        pane = pilot.app.screen.query_one("#execution-detail", VerticalScroll)
        await until(pilot, lambda: pane.scroll_y == pane.max_scroll_y > 0, "scrolled down")
        assert pane.scroll_x == 0
        await pilot.press("shift+tab")  # back on the list
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(pilot.app.screen, TargetScreen)
                    and "outcome: cancelled" in static_text(pilot, "#target-summary"),
                    "the execution in full")
        assert '"startsInSeconds": 3600' in static_text(pilot, "#target-input")
        assert '"status": "cancelled"' in static_text(pilot, "#target-result")
        assert "compensated" in static_text(pilot, "#target-saga")
        pilot.app.screen.query_one(TabbedContent).active = "tab-history"
        await focus(pilot, "target-history")
        await pilot.press("end")
        history = pilot.app.screen.query_one("#target-history", DataTable)
        last = table_keys(pilot, "#target-history")[-1]
        assert history.cursor_row == history.row_count - 1
        assert cell_text(pilot, "#target-history", last)[2] == "ExecutionSucceeded"
        assert cell_text(pilot, "#target-history", last)[1].count(":") == 2  # a time
        await pilot.press("enter")
        box = await dialog(pilot, JsonDialog)
        assert box.value["EventType"] == "ExecutionSucceeded"
        await pilot.press("escape")
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(pilot.app.screen, ExecutionsScreen), "back")
        await settle_workers(pilot)


async def test_an_alarm_drills_down_to_its_events_faults_and_audit(harness: Harness) -> None:
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        dead = await harness.dead_letter()  # while the console watches: it sees the events
        fid = harness.rt.faults.inject(dead, "alarm_delay", 1, seconds=2)
        await harness.rt.audit.record("127.0.0.1:1", "rearm", dead, role="operator")
        await view(pilot, "5", DeadLettersScreen, "#alarm-page", [dead])
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(pilot.app.screen, TargetScreen)
                    and "#3" in static_text(pilot, "#target-summary"), "the alarm in full")
        tabs = pilot.app.screen.query_one(TabbedContent)
        tabs.active = "tab-events"
        await until(pilot, lambda: any(
            cell_text(pilot, "#target-events", k)[1] == "alarm.dead"
            for k in table_keys(pilot, "#target-events")), "its alarm.dead event")
        tabs.active = "tab-faults"
        await until(pilot, lambda: table_keys(pilot, "#target-faults") == [fid], "its fault")
        tabs.active = "tab-audit"
        await until(pilot, lambda: len(table_keys(pilot, "#target-audit")) == 1,
                    "its audit row")
        assert "r" in pilot.app.screen.active_bindings  # its actions apply here too
        await settle_workers(pilot)


# -- forms --------------------------------------------------------------------------------


async def test_a_refused_fault_opens_the_form_again_as_typed(harness: Harness) -> None:
    """`nan` is refused by the form itself, saying how; a fault the server refuses comes
    back in the form with what was typed and the server's reason."""
    pending = await harness.pending()
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "2", AlarmsScreen, "#alarm-page", [pending])
        await pilot.press("f")
        await dialog(pilot, FaultDialog)
        await focus(pilot, "seconds")
        await type_text(pilot, "nan")
        await pilot.press("enter")
        await until(pilot, lambda: "seconds is a number of seconds above 0" in static_text(
            pilot, "#problem"), "the form's own refusal")
        request = app.client.request

        async def refuse_once(op: str, **args: Any) -> Any:
            if op == "inject_fault":
                app.client.request = request  # type: ignore[method-assign]
                raise CommandError("inject_fault refused: the registry is full")
            return await request(op, **args)

        app.client.request = refuse_once  # type: ignore[method-assign]
        await pilot.press("end", "backspace", "backspace", "backspace")
        await type_text(pilot, "2.5")
        await focus(pilot, "times")
        await type_text(pilot, "3")
        await focus(pilot, "ok")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(pilot.app.screen, FaultDialog)
                    and "the registry is full" in static_text(pilot, "#problem"),
                    "the form again, with the server's reason")
        form = pilot.app.screen
        assert isinstance(form, FaultDialog)
        assert (form.fields()["times"], form.fields()["seconds"]) == ("3", "2.5")
        await focus(pilot, "ok")
        await pilot.press("enter")
        await done(pilot, rec, f"injected a fault on {pending}")
        (fault,) = harness.rt.faults.list()
        assert (fault["times"], fault["seconds"]) == (3, 2.5)
        await settle_workers(pilot)


async def test_enter_in_the_callback_payload_sends_it(harness: Harness) -> None:
    eid = await harness.festival("hsf-day1")
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "3", ExecutionsScreen, "#execution-page", [eid])
        await pilot.press("c")
        await dialog(pilot, CallbackDialog)
        assert f"of festival-stream/{eid}" in static_text(pilot, ".question")
        await focus(pilot, "payload")
        await type_text(pilot, "go")
        await pilot.press("enter")
        await done(pilot, rec, f"completed callback 'verdict' of festival-stream/{eid} by hand")
        await settle_workers(pilot)


async def test_a_callbacks_audit_row_names_its_execution(harness: Harness) -> None:
    eid = await harness.festival("hsf-day1")
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await harness.verdict(eid, "go")
        d = await harness.describe(eid)
        (cb,) = [c for c in d["callbacks"] if c["name"] == "verdict"]
        await harness.rt.audit.record("127.0.0.1:1", "send_callback", cb["callback_id"],
                                      role="operator")
        await pilot.press("7")
        await until(pilot, lambda: isinstance(pilot.app.screen, AuditScreen)
                    and len(table_keys(pilot, "#audit-table")) == 1, "the audit row")
        (key,) = table_keys(pilot, "#audit-table")
        assert cell_text(pilot, "#audit-table", key)[5] == f"{eid} (callback)"
        await settle_workers(pilot)


# -- the command palette ---------------------------------------------------------------------


async def test_the_command_palette_offers_alarmtops_commands(harness: Harness) -> None:
    """Views, filter, sort, and the actions on the selection named with their target;
    choosing one runs it (re-arm asks first, as its key does)."""
    dead = await harness.dead_letter()
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await until(pilot, lambda: table_keys(pilot, "#overview-alarms") == [dead], "row")
        titles = [c.title for c in app.get_system_commands(pilot.app.screen)]
        for wanted in ("Go to Dead letters (5)", "Filter Alarms (most urgent first)…",
                       "Sort Alarms (most urgent first) by due in", "Reverse the sort",
                       f"Re-arm {dead}", f"Fire {dead} now",
                       f"Clear the dead letter of {dead}", f"Inject a fault on {dead}"):
            assert wanted in titles, (wanted, titles)
        assert not any(t.startswith("Abort") for t in titles)  # nothing applies here
        await pilot.press("ctrl+p")
        await pilot.pause()
        await type_text(pilot, f"Re-arm {dead}")
        await pilot.pause(0.3)
        await pilot.press("enter")
        box = await dialog(pilot, ConfirmDialog)
        assert box.question.startswith(f"Re-arm {dead}?")
        await pilot.press("escape")
        await settle_workers(pilot)


async def test_a_wide_terminal_shows_the_whole_last_error() -> None:
    """At 220 columns the last error is not cut at 48 characters (the fake server's
    near-exhaustion alarm has a 55-character one)."""
    app = fake_console()
    async with app.run_test(size=(220, 60)) as pilot:
        await fed(pilot)
        ref = "LeaseLedger/tenant-42"
        await until(pilot, lambda: ref in table_keys(pilot, "#overview-alarms"), "row")
        error = next(a["last_error"] for a in ALARMS if a["object"] == ref)
        assert len(error) > 48
        assert cell_text(pilot, "#overview-alarms", ref)[5] == error
        column = pilot.app.screen.query_one("#overview-alarms", DataTable).ordered_columns[5]
        assert column.width > 120
        app.workers.cancel_group(app, "feed")


async def test_the_clear_dead_letter_question_is_whole_at_80x24(harness: Harness) -> None:
    """It was cut after "Its attempts stay in the": the question wraps inside the
    dialog, every line of it on screen."""
    dead = await harness.dead_letter()
    app, rec = await start(harness)
    async with app.run_test(size=(80, 24), notifications=True, message_hook=rec) as pilot:
        await connected(pilot)
        await view(pilot, "5", DeadLettersScreen, "#alarm-page", [dead])
        await pilot.press("x")
        box = await dialog(pilot, ConfirmDialog)
        await pilot.pause()
        label = box.query_one(".question")
        lines = label.render_lines(label.region.reset_offset)
        shown = " ".join("".join(seg.text for seg in line).strip() for line in lines)
        assert shown.endswith("Its attempts stay in the event log only."), shown
        assert box.query_one(".dialog").region.contains_region(label.region)
        assert box.query_one("#yes").region.bottom <= 24
        await pilot.press("escape")
        await settle_workers(pilot)
