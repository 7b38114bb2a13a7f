"""Marking, bulk actions and the timers board from the console, against a real server.

Marks are the console's own (no server op): those tests run everywhere. Bulk
batches (`bulk_preview`, `bulk_start`, `bulk`, `bulk_cancel`) and the timers
board's `timers`, `fire_timer` and `snooze_timer` are server ops: the tests that
need one are skipped, saying which, while the server lacks it. The board falls
back to `execution_timers` on a server without `timers`, and that path is tested
always.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import pytest
from textual.widgets import Button, Input, Label, Select

from alarmtop.core import AlarmInfo, DurableObject, VirtualClock
from alarmtop.core.durable import DurableContext, durable_execution
from alarmtop.server.wire import OPS
from alarmtop.tui.bulk import Batch, BulkBook, parse_duration, parse_when, progress_text, selection
from alarmtop.tui.marks import MARK, Marks, TooManyMarks
from alarmtop.tui.messages import BulkChanged
from alarmtop.tui.screens.alarms import AlarmsScreen, DeadLettersScreen
from alarmtop.tui.screens.bulk_dialogs import (
    BulkDialog,
    BulkProgressScreen,
    SelectionDialog,
    bulk_args,
    keys_text,
    matching,
)
from alarmtop.tui.screens.executions import ExecutionsScreen
from alarmtop.tui.screens.timers import OLD_SERVER, TimersScreen, board_span
from alarmtop.tui.timers import Cursors, countdown, overdue, timer_cells
from tests.tui.conftest import (
    FAST_RETRY,
    Harness,
    cell_text,
    fixed_keys,
    focus,
    static_text,
    table_keys,
    until,
)
from tests.tui.fake import frozen_console_clock
from tests.tui.test_console import (
    audit_actions,
    connected,
    dialog,
    paste,
    run,
    settle_workers,
    start,
    view,
)

Pilot = Any


@pytest.fixture
def still_console_clock() -> Iterator[None]:
    """The console's countdowns move on its own wall clock between frames: on a loaded
    machine seconds pass between a frame and the check. Stopped, a countdown is what the
    runtime's (virtual) clock says."""
    with frozen_console_clock():
        yield


def needs(*ops: str) -> pytest.MarkDecorator:
    """Skip while the server lacks one of `ops` (the console side is ready for it)."""
    missing = [op for op in ops if op not in OPS]
    return pytest.mark.skipif(bool(missing), reason=f"the server has no {', '.join(missing)} "
                              "op yet (bulk and timers board server side)")


# -- pure ---------------------------------------------------------------------------------


def test_marks_are_by_identity_and_bounded() -> None:
    marks = Marks()
    assert marks.toggle("alarms", "Flaky/a") and marks.toggle("executions", "e1")
    assert ("alarms", "Flaky/a") in marks and marks.summary() == "1 alarm + 1 execution marked"
    assert not marks.toggle("alarms", "Flaky/a")
    assert marks.summary() == "1 marked" and marks.keys("executions") == ["e1"]
    with pytest.raises(ValueError, match="take no bulk action"):
        marks.toggle("faults", "f1")
    marks.clear()
    for i in range(10_000):
        marks.toggle("alarms", f"Flaky/{i}")
    with pytest.raises(TooManyMarks, match="select by query"):
        marks.toggle("alarms", "Flaky/one-more")


def test_a_selection_from_the_form() -> None:
    now = 1_800_000_000_000
    assert selection("alarms", {"state": "dead", "class": " Flaky ", "due_from": "-10m",
                                "due_to": "in 1h", "error": ""}, now) == {
        "kind": "alarms", "state": "dead", "class": "Flaky",
        "due_from_ms": now - 600_000, "due_to_ms": now + 3_600_000}
    assert selection("executions", {"state": "failed", "updated_from": "2027-01-15T08:00",
                                    "due_from": "-1h"}, now) == {
        "kind": "executions", "status": "failed",
        "updated_from_ms": _iso_ms("2027-01-15T08:00")}
    with pytest.raises(ValueError, match="state is one of pending, retrying, dead, paused"):
        selection("alarms", {"state": "running"}, now)
    with pytest.raises(ValueError, match="due: 'from' is after 'to'"):
        selection("alarms", {"due_from": "+2h", "due_to": "+1h"}, now)
    with pytest.raises(ValueError, match="updated from: 'yesterday' is not a time"):
        selection("alarms", {"updated_from": "yesterday"}, now)
    assert parse_duration("1h30m") == 5_400_000 and parse_when("now", now) == now
    assert parse_when("10m ago", now) == now - 600_000


def _iso_ms(text: str) -> int:
    from datetime import UTC, datetime
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def test_bulk_args_from_the_form() -> None:
    from alarmtop.tui.bulk import action_of
    assert bulk_args(action_of("alarms", "rearm"), " ops ", "", "8") == {
        "action": "rearm", "reason": "ops", "max_in_flight": 8}
    with pytest.raises(ValueError, match="needs a note"):
        bulk_args(action_of("executions", "resolve"), "", " ", "")
    with pytest.raises(ValueError, match="throttle is a whole number"):
        bulk_args(action_of("alarms", "rearm"), "", "", "lots")
    assert keys_text([f"k{i}" for i in range(7)]) == "k0, k1, k2, k3, k4 … and 2 more"


def test_a_batch_merges_events_and_answers_in_any_order() -> None:
    book = BulkBook()
    book.apply({"batch_id": "b1", "action": "rearm", "kind": "alarms", "total": 10,
                "status": "running"})
    book.apply_event({"type": "bulk.progress", "data": {
        "batch_id": "b1", "done": 6, "failed": 1, "total": 10,
        "recent_failures": [{"key": "Flaky/x", "error": "NoAlarm: nothing to re-arm"}]}})
    b = book.apply({"batch_id": "b1", "done": 3, "failed": 0})  # an older answer
    assert b is not None and (b.done, b.failed, b.left) == (6, 1, 3)
    assert b.failures == (("Flaky/x", "NoAlarm: nothing to re-arm"),)
    b = book.apply_event({"type": "bulk.finished", "data": {"batch_id": "b1", "done": 8,
                                                            "failed": 1, "cancelled": 1,
                                                            "status": "cancelled"}})
    assert b is not None and not b.live and b.left == 0
    assert progress_text(b) == ("rearm b1: 8 of 10 done, 1 failed, 0 left, 1 cancelled "
                                "(cancelled)")
    b = book.apply({"batch_id": "b1", "status": "running"})
    assert b is not None and b.status == "cancelled"  # an ended batch never runs again


def test_a_start_sent_again_without_an_answer_keeps_its_token() -> None:
    """A start that got no answer may have begun on the server: sent again as it was,
    it carries the same client token (the server then answers with that batch); once
    answered, the next start of the same items is a new batch with a new token."""
    book = BulkBook()
    args = {"action": "rearm", "keys": ["Flaky/a", "Flaky/b"], "reason": "fixed"}
    first = book.start_token(args)
    assert first.startswith("console-") and book.start_token(dict(args)) == first
    assert book.start_token({**args, "reason": "other"}) != first  # another start
    book.start_answered(args)
    assert book.start_token(args) != first


def test_countdowns_flag_what_is_overdue() -> None:
    now = 1_000_000
    assert countdown(now + 4200, now) == "in 4.2s"
    assert countdown(now - 500, now) == "due now"
    assert countdown(now - 40_000, now) == "due 40s ago, not fired"
    assert countdown(now - 40_000, now, paused=True) == "due 40s ago, paused"
    assert overdue({"due_ms": now - 40_000}, now)
    assert not overdue({"due_ms": now - 40_000, "paused": True}, now)
    row = {"kind": "callback_timeout", "target": "trip/lisbon", "execution_id": "lisbon",
           "op_id": "4", "name": "verdict", "due_ms": now + 60_000, "state": "suspended",
           "paused": False, "retry_count": None}
    assert timer_cells(row, now) == ("in 1m00s", "callback deadline", "trip/lisbon",
                                     "verdict (operation 4)", "SUSPENDED", "-", "-")
    cursors = Cursors()
    cursors.learn(0, [{"key": [i]} for i in range(1, 201)])
    assert cursors.nearest(0) == (0, None) and cursors.nearest(150) == (150, [150])


def test_a_preview_says_how_many_match_in_good_english() -> None:
    assert matching(1, "alarms") == "1 alarm matches"  # not "1 alarm match"
    assert matching(1_240, "executions") == "1,240 executions match"


def test_the_board_says_how_many_it_holds_as_far_as_it_knows() -> None:
    """The board's subtitle said "1-10" and no total; an empty one "0-0"."""
    assert board_span(0, 10, more=False) == "1-10 of 10"
    assert board_span(100, 100, more=True) == "101-200 of more than 200  pgdn: next"
    assert board_span(0, 0, more=False) == "none"


# -- marking, against the server -----------------------------------------------------------


async def test_space_marks_a_row_by_identity_in_every_view(harness: Harness) -> None:
    """Space marks the alarm under the cursor and moves down; the mark shows on its row,
    the title and the footer count it, it follows its object into another view and
    through a re-sort; u clears them all."""
    dead = [await harness.dead_letter(n) for n in ("payments-1", "payments-2")]
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "5", DeadLettersScreen, "#alarm-page", sorted(dead))
        first, second = table_keys(pilot, "#alarm-page")
        await pilot.press("space")
        await until(pilot, lambda: cell_text(pilot, "#alarm-page", first)[0].startswith(
            MARK.strip()), "the mark on the first row")
        assert not cell_text(pilot, "#alarm-page", second)[0].startswith(MARK.strip())
        assert pilot.app.screen.query_one("#alarm-page").cursor_row == 1  # moved down
        assert "[1 marked]" in str(pilot.app.screen.query_one("#alarm-page").border_title)
        assert "1 marked" in fixed_keys(pilot)
        assert ("alarms", first) in pilot.app.marks
        await pilot.press("2")
        await until(pilot, lambda: isinstance(pilot.app.screen, AlarmsScreen)
                    and first in table_keys(pilot, "#alarm-page"), "the alarms view")
        await until(pilot, lambda: cell_text(pilot, "#alarm-page", first)[0].startswith(
            MARK.strip()), "the mark in view 2")
        await pilot.press("S")  # re-sorted: the mark stays on its object
        await until(pilot, lambda: table_keys(pilot, "#alarm-page")[0] == second,
                    "the reversed order")
        assert cell_text(pilot, "#alarm-page", first)[0].startswith(MARK.strip())
        assert not cell_text(pilot, "#alarm-page", second)[0].startswith(MARK.strip())
        await pilot.press("3")
        await until(pilot, lambda: isinstance(pilot.app.screen, ExecutionsScreen),
                    "the executions view")
        assert "1 marked" in fixed_keys(pilot)  # marks are the console's, not a view's
        await pilot.press("2", "u")
        await until(pilot, lambda: len(pilot.app.marks) == 0, "the marks cleared")
        await until(pilot, lambda: not cell_text(pilot, "#alarm-page", first)[0].startswith(
            MARK.strip()), "the mark gone")
        await settle_workers(pilot)
    assert await harness.rt.audit.list() == []  # marking runs nothing


async def test_bulk_and_select_are_hidden_for_a_viewer(harness: Harness) -> None:
    """A viewer may mark rows (it changes nothing) but b and m are neither offered nor
    open anything; n and z are not offered on the board."""
    dead = await harness.dead_letter()
    app, rec = await start(harness, token=harness.tokens.viewer)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "5", DeadLettersScreen, "#alarm-page", [dead])
        await pilot.press("space")
        await until(pilot, lambda: len(pilot.app.marks) == 1, "the mark")
        active = set(pilot.app.screen.active_bindings)
        assert "space" in active and not {"b", "m"} & active
        await pilot.press("b", "m")
        assert isinstance(pilot.app.screen, DeadLettersScreen), "no form may open"
        await pilot.press("9")
        await until(pilot, lambda: isinstance(pilot.app.screen, TimersScreen), "the board")
        assert not {"n", "z", "b", "m"} & set(pilot.app.screen.active_bindings)
        await settle_workers(pilot)


async def test_the_bulk_form_names_its_action_and_count(harness: Harness) -> None:
    """b on two marked dead letters opens the form on them: their keys, and a button
    that says the action and how many ("Re-arm 2 alarms"), following the action
    chosen; Cancel runs nothing."""
    dead = sorted([await harness.dead_letter(n) for n in ("payments-1", "payments-2")])
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "5", DeadLettersScreen, "#alarm-page", dead)
        await pilot.press("space", "space", "b")
        form = await dialog(pilot, BulkDialog)
        await pilot.pause()
        assert form.keys == dead and form.kind == "alarms"
        assert str(form.query_one("#ok", Button).label) == "Re-arm 2 alarms"
        assert static_text(pilot, "#bulk-keys") == ", ".join(dead)
        form.query_one("#action", Select).value = "clear_dead_letter"
        await until(pilot, lambda: str(form.query_one("#ok", Button).label)
                    == "Clear dead letter 2 alarms", "the button to follow the action")
        await pilot.click("#cancel")
        await until(pilot, lambda: isinstance(pilot.app.screen, DeadLettersScreen), "closed")
        assert len(pilot.app.marks) == 2  # kept for another try
        await settle_workers(pilot)
    assert await harness.rt.audit.list() == []


async def test_the_progress_view_shows_counts_failures_and_the_end(harness: Harness) -> None:
    """The progress view of a batch follows its events: done / failed / left and the
    bar, each failure with its reason; once the batch ended Cancel is gone."""
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        batch = app.bulks.apply({"batch_id": "b7", "action": "rearm", "kind": "alarms",
                                 "total": 1000, "status": "running"})
        assert batch is not None
        app.push_screen(BulkProgressScreen(batch))
        screen = await dialog(pilot, BulkProgressScreen)
        await pilot.pause()
        assert "rearm b7: 0 of 1,000 done, 0 failed, 1,000 left" in static_text(
            pilot, "#bulk-counts")
        assert screen.query_one("#cancel-batch", Button).display
        for data in ({"done": 412, "failed": 3, "recent_failures": [
                         {"key": "Flaky/a", "error": "NoAlarm: Flaky/a has no alarm"}]},
                     {"done": 500, "failed": 3, "status": "cancelling"},
                     {"done": 997, "failed": 3, "status": "done"}):
            ev = {"type": "bulk.progress", "data": {"batch_id": "b7", "total": 1000, **data}}
            moved = app.bulks.apply_event(ev)
            assert moved is not None
            screen.post_message(BulkChanged(moved))
            await pilot.pause()
            cancel = screen.query_one("#cancel-batch", Button)
            if data.get("status") == "cancelling":  # asked: shown, not asked again
                assert cancel.display and cancel.disabled
                assert str(cancel.label) == "Cancelling..."
            if data["done"] == 412:
                assert cancel.display and not cancel.disabled
                assert "412 of 1,000 done, 3 failed, 585 left (running)" in static_text(
                    pilot, "#bulk-counts")
                assert cell_text(pilot, "#bulk-failures", "Flaky/a") == [
                    "Flaky/a", "NoAlarm: Flaky/a has no alarm"]
        assert "997 of 1,000 done, 3 failed, 0 left (done)" in static_text(pilot,
                                                                            "#bulk-counts")
        assert not screen.query_one("#cancel-batch", Button).display
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(pilot.app.screen, BulkProgressScreen),
                    "closed")
        await pilot.press("B")  # opens the latest batch again
        await dialog(pilot, BulkProgressScreen)
        await settle_workers(pilot)


@needs("bulk_start", "bulk")
async def test_bulk_rearm_of_marked_dead_letters(harness: Harness) -> None:
    """Two marked dead letters, b, Re-arm: the batch runs on the server, the progress view
    reaches "2 of 2 done", the alarms are pending again, the marks are cleared, and
    the audit log has each item and the batch."""
    dead = sorted([await harness.dead_letter(n) for n in ("payments-1", "payments-2")])
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "5", DeadLettersScreen, "#alarm-page", dead)
        await pilot.press("space", "space", "b")
        await dialog(pilot, BulkDialog)
        await focus(pilot, "reason")
        await paste(pilot, "processor back")
        await pilot.click("#ok")
        screen = await dialog(pilot, BulkProgressScreen)
        await until(pilot, lambda: "2 of 2 done, 0 failed, 0 left" in static_text(
            pilot, "#bulk-counts"), "the batch to finish")
        assert rec.has(f"started re-arm on 2 alarms marked as batch "
                       f"{screen.watched.batch_id}", "information"), rec.messages()
        assert len(pilot.app.marks) == 0
        for ref in dead:
            status = await harness.rt.alarm("Flaky", ref.split("/")[1])
            assert status is not None and status.state != "dead"
        actions = [a[0] for a in await audit_actions(harness)]
        assert actions.count("rearm") >= 2 and any("bulk" in a for a in actions)
        await settle_workers(pilot)


def stuck_class(clock: VirtualClock, held: dict[str, asyncio.Event]) -> type[DurableObject]:
    """A class whose alarm fails like Flaky's; an attempt of an object named in `held`
    first waits for its event to be set, holding the object's turn meanwhile (as a
    handler stuck on a slow downstream does). The wait is idle to the virtual clock."""

    class Stuck(DurableObject):
        async def arm(self, delay_ms: int = 0) -> int:
            at = self.ctx.now_ms() + int(delay_ms)
            await self.ctx.storage.set_alarm(at)
            return at

        async def alarm(self, info: AlarmInfo) -> None:
            gate = held.get(self.ctx.id)
            if gate is not None:
                await clock.idle_wait(gate.wait())
            raise RuntimeError("downstream unavailable")

    return Stuck


@needs("bulk_start", "bulk", "bulk_cancel")
async def test_cancel_a_running_batch_from_its_progress_view(harness: Harness) -> None:
    """Ten marked dead letters, b, Re-arm one at a time (throttle 1): the fifth one's
    object is busy in an attempt, so the batch waits on it with four done. Cancel batch
    there: the server marks the batch cancelling, the item in flight ends as it will
    (re-armed once the attempt let go), the five not started stay dead letters. The
    view says cancelled and hides Cancel; the audit log has the batch as cancelled,
    with a re-arm row for each item done and none for the others."""
    held: dict[str, asyncio.Event] = {}
    stuck = stuck_class(harness.clock, held)
    harness.rt.register(stuck, retry_policy=FAST_RETRY)
    names = [f"s-{i:02d}" for i in range(1, 11)]
    dead = [await harness.dead_letter(n, stuck) for n in names]
    done_keys, left_keys = dead[:5], dead[5:]
    gate = held["s-05"] = asyncio.Event()
    app, rec = await start(harness)
    try:
        async with run(app, rec) as pilot:
            await connected(pilot)
            await view(pilot, "5", DeadLettersScreen, "#alarm-page", dead)
            await pilot.press(*["space"] * len(dead))
            await until(pilot, lambda: pilot.app.marks.keys("alarms") == dead, "the marks")
            # s-05 is re-armed meanwhile and its attempt hangs: its object is busy.
            await harness.rt.rearm(stuck, "s-05")
            await harness.clock.advance(0)
            status = await harness.rt.alarm(stuck, "s-05")
            assert status is not None and status.state == "running", status
            await pilot.press("b")
            form = await dialog(pilot, BulkDialog)
            await pilot.pause()
            assert form.keys == dead
            assert str(form.query_one("#ok", Button).label) == "Re-arm 10 alarms"
            await focus(pilot, "reason")
            await paste(pilot, "processor back")
            await focus(pilot, "throttle")
            await paste(pilot, "1")
            await pilot.click("#ok")
            screen = await dialog(pilot, BulkProgressScreen)
            bid = screen.watched.batch_id
            # the start's notice names the batch (the answer is the batch row: its `id`)
            await until(pilot, lambda: rec.has(
                f"started re-arm on 10 alarms marked as batch {bid}", "information"),
                f"the start's notice (seen: {rec.messages()})")

            async def batch() -> dict[str, Any]:
                return await harness.rt.bulk.get(bid)

            await until(pilot, lambda: "4 of 10 done, 0 failed, 6 left (running)"
                        in static_text(pilot, "#bulk-counts"), "four items done")

            async def waiting_on_the_fifth() -> bool:
                b = await batch()
                return b["status"] == "running" and b["done"] == 4 and b["in_flight"] == 1

            await until(pilot, waiting_on_the_fifth, "the batch to wait on s-05")
            cancel = screen.query_one("#cancel-batch", Button)
            assert cancel.display
            await pilot.click("#cancel-batch")

            async def cancelling() -> bool:
                return (await batch())["status"] == "cancelling"

            await until(pilot, cancelling, "the server to take the cancel")
            gate.set()  # the attempt ends; the item in flight finishes, nothing more starts
            await until(pilot, lambda: "(cancelled)" in static_text(pilot, "#bulk-counts"),
                        "the view to say cancelled")
            assert static_text(pilot, "#bulk-counts") == (
                f"rearm {bid}: 5 of 10 done, 0 failed, 0 left, 5 cancelled (cancelled)")
            assert "cancelled" in str(screen.query_one("#bulk-title", Label).content)
            assert not cancel.display
            await until(pilot, lambda: rec.has(f"cancelling batch {bid} (rearm)",
                                               "information"),
                        f"the cancel's notice (seen: {rec.messages()})")
            await settle_workers(pilot)
    finally:
        gate.set()
    b = await harness.rt.bulk.get(bid)
    assert (b["status"], b["total"], b["done"], b["failed"], b["cancelled"], b["left"]) == (
        "cancelled", 10, 5, 0, 5, 0), b
    for ref in dead:
        status = await harness.rt.alarm(stuck, ref.split("/")[1])
        assert status is not None
        assert (status.state != "dead") == (ref in done_keys), (ref, status.state)
    audit = await harness.rt.audit.list()
    (entry,) = [a for a in audit if a["action"] == "bulk_rearm" and a["target"] == bid]
    assert not entry["ok"] and entry["reason"] == "processor back"
    assert {k: entry["detail"][k] for k in ("status", "total", "done", "failed",
                                            "cancelled")} == {
        "status": "cancelled", "total": 10, "done": 5, "failed": 0, "cancelled": 5}
    rearmed = [a["target"] for a in audit if a["action"] == "rearm"
               and (a.get("detail") or {}).get("batch_id") == bid]
    assert sorted(rearmed) == done_keys and not set(rearmed) & set(left_keys)
    assert [(a["target"], a["ok"], a["role"]) for a in audit
            if a["action"] == "bulk_cancel"] == [(bid, True, "operator")]


@needs("bulk_preview", "bulk_start")
async def test_a_selection_is_counted_before_anything_runs(harness: Harness) -> None:
    """m, state dead: Run is not offered until Preview said "2 alarms match"; a field
    changed hides it again; Run then re-arms exactly those."""
    dead = sorted([await harness.dead_letter(n) for n in ("payments-1", "payments-2")])
    await harness.pending()
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "5", DeadLettersScreen, "#alarm-page", dead)
        await pilot.press("m")
        form = await dialog(pilot, SelectionDialog)
        await pilot.pause()
        assert not form.query_one("#ok", Button).display
        await paste(pilot, "dead")
        await pilot.click("#preview-btn")
        await until(pilot, lambda: "2 alarms match" in static_text(pilot, "#preview"),
                    "the preview's count")
        assert form.query_one("#ok", Button).display
        assert str(form.query_one("#ok", Button).label) == "Re-arm 2 alarms"
        # a preview runs nothing (the server may audit the preview itself)
        assert [a for a in await audit_actions(harness) if a[0] != "bulk_preview"] == []
        for ref in dead:
            status = await harness.rt.alarm("Flaky", ref.split("/")[1])
            assert status is not None and status.state == "dead"
        await focus(pilot, "sel-name")
        await paste(pilot, "payments-1")
        await until(pilot, lambda: not form.query_one("#ok", Button).display,
                    "Run hidden after a change")
        form.query_one("#sel-name", Input).value = ""
        await pilot.click("#preview-btn")
        await until(pilot, lambda: form.query_one("#ok", Button).display, "previewed again")
        await pilot.click("#ok")
        await dialog(pilot, BulkProgressScreen)
        await until(pilot, lambda: "2 of 2 done" in static_text(pilot, "#bulk-counts"),
                    "the batch to finish")
        await settle_workers(pilot)


# -- the timers board -----------------------------------------------------------------------


@durable_execution(name="nap")
async def nap(event: Any, ctx: DurableContext) -> str:
    await ctx.wait(int(event["s"]), name="nap")
    return "rested"


async def test_the_board_lists_timers_soonest_first_with_countdowns(
        harness: Harness, still_console_clock: None) -> None:
    """Two executions waiting 60 s and 10 s: the board lists the 10 s wait first, with a
    countdown that moves with the runtime's clock; paused and past due, a wait says
    "paused" (it does not fire). Enter opens its execution."""
    harness.rt.register_execution(nap)
    for eid, s in (("long", 60), ("short", 10)):
        await harness.rt.executions.start("nap", {"s": s}, execution_id=eid)
    await harness.clock.advance(0)
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await pilot.press("9")
        board = await dialog(pilot, TimersScreen)

        def waits() -> list[list[str]]:
            return [cell_text(pilot, "#timer-board", k) for k in table_keys(
                pilot, "#timer-board") if "wait" in cell_text(pilot, "#timer-board", k)[1]]

        await until(pilot, lambda: len(waits()) == 2, "the two waits")
        (short, long_) = waits()
        assert "short" in short[2] and "long" in long_[2]
        # the countdowns move with the console's own clock between frames too
        assert re.fullmatch(r"in (10|9(\.\d)?)s", short[0]), short[0]
        assert re.fullmatch(r"in (1m00|59\.\d|59)s", long_[0]), long_[0]
        if "timers" not in OPS:
            assert OLD_SERVER in str(board.table.border_title)
        await harness.rt.executions.pause("short", "checking")
        await harness.clock.advance(30)
        await until(pilot, lambda: waits() and re.fullmatch(
            r"due 2\d(\.\d)?s ago, paused", waits()[0][0]) is not None
                    and waits()[0][5] == "paused", "the paused wait past due")
        assert re.fullmatch(r"in (30|29)(\.\d)?s", waits()[1][0]), waits()[1][0]
        assert (await harness.describe("short"))["status"] == "suspended"  # not fired
        await pilot.press("enter")
        await until(pilot, lambda: type(pilot.app.screen).__name__ == "TargetScreen",
                    "the execution's detail")
        await settle_workers(pilot)


async def test_on_an_80_column_terminal_the_board_keeps_every_column_whole(
        harness: Harness, still_console_clock: None) -> None:
    """At 80x24 the board's columns and their padding fit the table: the state is not
    cut off, and a paused timer past due says "paused" in its countdown (the narrow
    board has no column of its own for it)."""
    harness.rt.register_execution(nap)
    for eid, s in (("long", 60), ("short", 10)):
        await harness.rt.executions.start("nap", {"s": s}, execution_id=eid)
    await harness.clock.advance(0)
    app, rec = await start(harness)
    async with app.run_test(size=(80, 24), notifications=True, message_hook=rec) as pilot:
        await connected(pilot)
        await pilot.press("9")
        board = await dialog(pilot, TimersScreen)
        table = board.table

        def waits() -> list[list[str]]:
            return [cell_text(pilot, "#timer-board", k) for k in table_keys(
                pilot, "#timer-board") if "wait" in cell_text(pilot, "#timer-board", k)[1]]

        await until(pilot, lambda: len(waits()) == 2, "the two waits")
        widths = [c.get_render_width(table) for c in table.columns.values()]
        assert [str(c.label) for c in table.columns.values()] == [
            "due", "kind", "target", "what", "state", "retry"]
        assert sum(widths) <= table.scrollable_content_region.width
        assert all(row[4] == "PENDING" for row in waits()), waits()
        await harness.rt.executions.pause("short", "checking")
        await harness.clock.advance(30)
        # The pause and the clock's 30 s reach the console in separate frames: wait for
        # both, not the first.
        await until(pilot, lambda: len(waits()) == 2 and waits()[0][0] == "paused"
                    and waits()[1][0].startswith("in ") and not waits()[1][0].startswith(
                        "in 1m"), "the paused wait, 30 s later")
        assert re.fullmatch(r"in (30|29)(\.\d)?s", waits()[1][0]), waits()[1][0]
        await settle_workers(pilot)


@needs("timers")
async def test_the_board_lists_alarms_waits_and_callback_deadlines(harness: Harness) -> None:
    """With the server's board: an object's alarm, a festival's callback deadline and a
    nap's wait are on one board, soonest first; marking an alarm's row marks the alarm,
    a wait's row its execution."""
    harness.rt.register_execution(nap)
    await harness.rt.executions.start("nap", {"s": 5}, execution_id="n1")
    alarm = await harness.pending(in_s=20)
    await harness.festival()
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await pilot.press("9")
        board = await dialog(pilot, TimersScreen)
        await until(pilot, lambda: {r.get("kind") for r in board.rows} >= {"alarm", "wait"},
                    "alarms and waits together")
        dues = [int(r["due_ms"]) for r in board.rows]
        assert dues == sorted(dues)
        assert OLD_SERVER not in str(board.table.border_title)
        keys = table_keys(pilot, "#timer-board")
        await pilot.press("space")
        first = board.rows[0]
        kind = "executions" if first.get("execution_id") else "alarms"
        assert len(pilot.app.marks) == 1 and pilot.app.marks.kinds() == [kind]
        assert keys and alarm in {r.get("object") or r.get("target") for r in board.rows}
        await settle_workers(pilot)


@needs("timers", "snooze_timer")
async def test_snooze_from_the_board_moves_the_timer(harness: Harness) -> None:
    harness.rt.register_execution(nap)
    await harness.rt.executions.start("nap", {"s": 10}, execution_id="n1")
    await harness.clock.advance(0)
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await pilot.press("9")
        board = await dialog(pilot, TimersScreen)
        await until(pilot, lambda: any(r.get("execution_id") == "n1" for r in board.rows),
                    "the wait")
        before = next(r for r in board.rows if r.get("execution_id") == "n1")["due_ms"]
        await pilot.press("z")
        await until(pilot, lambda: type(pilot.app.screen).__name__ == "SnoozeDialog",
                    "the snooze form")
        await pilot.click("#by-300000")
        await until(pilot, lambda: any(r.get("execution_id") == "n1" and r["due_ms"]
                                       >= before + 300_000 for r in board.rows),
                    "the wait five minutes later")
        await settle_workers(pilot)


def test_batch_defaults() -> None:
    assert Batch("b").live and not Batch("b", status="done").live


async def test_help_and_the_palette_list_the_new_keys(harness: Harness) -> None:
    """The help names every new key; the palette offers the board, marking and bulk on a
    dead letter (named), and not bulk before anything is marked."""
    from textual.widgets import Markdown

    from alarmtop.tui.screens.lists import HelpScreen
    dead = await harness.dead_letter()
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "5", DeadLettersScreen, "#alarm-page", [dead])
        titles = [c.title for c in app.get_system_commands(pilot.app.screen)]
        assert "Go to Timers board (9)" in titles and f"Mark or unmark {dead}" in titles
        assert "Select by query…" in titles
        assert not any(t.startswith("Bulk action") for t in titles)
        await pilot.press("space")
        titles = [c.title for c in app.get_system_commands(pilot.app.screen)]
        assert "Bulk action on the marked (1 marked)…" in titles
        await pilot.press("question_mark")
        help_screen = await dialog(pilot, HelpScreen)
        text = help_screen.query_one(Markdown).source
        for key in ("`space` mark", "`b` bulk", "`m` select by query", "`9` the timers board",
                    "`d` redrive", "`F` fork", "`v` replay check", "`p` pause"):
            assert key in text, key
        await settle_workers(pilot)


@needs("pause_alarm", "resume_alarm", "snooze_alarm")
async def test_pause_snooze_and_resume_an_alarm(harness: Harness) -> None:
    """p on a pending alarm asks why and pauses it: its row shows the paused mark, the
    detail says so, and p is now Resume; z snoozes it five minutes; p resumes it."""
    from alarmtop.tui.screens.dialogs import TextDialog
    from alarmtop.tui.screens.tool_dialogs import SnoozeDialog
    from tests.tui.test_console import confirm, done
    ref = await harness.pending(in_s=60)
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "2", AlarmsScreen, "#alarm-page", [ref])
        await pilot.press("p")
        box = await dialog(pilot, TextDialog)
        assert f"Pause the alarm of {ref}?" in box.title_text
        await paste(pilot, "vendor maintenance")
        await pilot.press("enter")
        await done(pilot, rec, f"paused the alarm of {ref}")
        status = await harness.rt.alarm("Flaky", "payments-9")
        assert status is not None and status.paused
        await until(pilot, lambda: cell_text(pilot, "#alarm-page", ref)[0].endswith("‖"),
                    "the paused mark")
        await until(pilot, lambda: "PAUSED" in static_text(pilot, "#attempts"), "the detail")
        # since when, who and why (the README says the detail does)
        await until(pilot, lambda: ": vendor maintenance" in static_text(pilot, "#attempts"),
                    "who paused it and why")
        detail = static_text(pilot, "#attempts")
        assert re.search(r"PAUSED since \d\d:\d\d:\d\d UTC \((now|[\d.]+s ago)\) by "
                         r"127\.0\.0\.1:\d+: vendor maintenance", detail), detail
        assert pilot.app.screen.active_bindings["p"].binding.description == "Resume"
        due = status.next_attempt_ms
        await pilot.press("z")
        await dialog(pilot, SnoozeDialog)
        await pilot.click("#by-300000")
        await done(pilot, rec, f"snoozed {ref}")
        status = await harness.rt.alarm("Flaky", "payments-9")
        assert status is not None and due is not None and status.next_attempt_ms == due + 300_000
        await pilot.press("p")
        await confirm(pilot, f"Resume the alarm of {ref}?")
        await done(pilot, rec, f"resumed the alarm of {ref}")
        status = await harness.rt.alarm("Flaky", "payments-9")
        assert status is not None and not status.paused
        await settle_workers(pilot)


@needs("bulk_start", "bulk")
async def test_bulk_pause_of_marked_executions(harness: Harness) -> None:
    """Marks in the executions view mark executions: b offers the executions' actions,
    and Pause on two waiting festivals pauses both, with the reason given."""
    eids = [await harness.festival(e) for e in ("hsf-day1", "hsf-day4")]
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "3", ExecutionsScreen, "#execution-page", sorted(eids))
        await pilot.press("space", "space", "b")
        form = await dialog(pilot, BulkDialog)
        assert form.kind == "executions" and sorted(form.keys) == sorted(eids)
        form.query_one("#action", Select).value = "pause"
        await until(pilot, lambda: str(form.query_one("#ok", Button).label)
                    == "Pause 2 executions", "the button")
        await focus(pilot, "reason")
        await paste(pilot, "venue checks")
        await pilot.click("#ok")
        await dialog(pilot, BulkProgressScreen)
        await until(pilot, lambda: "2 of 2 done" in static_text(pilot, "#bulk-counts"),
                    "the batch to finish")
        for eid in eids:
            assert (await harness.describe(eid))["paused"]
        await settle_workers(pilot)
