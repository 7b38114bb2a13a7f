"""The execution tools from the console, end to end: a key, its form, the real server,
the runtime's state and audit log, and what the console says (naming its target).

A trip books a flight and a hotel, then charges; the charge fails for good while
`broken["charge"]` holds (no retry), so the trip fails and can be redriven or
forked once the cause is gone. Version 2 renames the hotel step: a replay check
against it diverges at operation 2.
"""

from __future__ import annotations

from typing import Any

import pytest
from textual.widgets import Button, Input, Select

from alarmtop.core.durable import DurableContext, RetryPresets, StepConfig, durable_execution
from alarmtop.tui.screens.dialogs import (
    CallbackDialog,
    ConfirmDialog,
    TextDialog,
    callback_args,
)
from alarmtop.tui.screens.executions import ExecutionsScreen
from alarmtop.tui.screens.target import TargetScreen
from alarmtop.tui.screens.tool_dialogs import ForkDialog, RedriveDialog, ReplayDialog, fork_args
from alarmtop.tui.screens.tools import tool_applies
from alarmtop.tui.tools import (
    Operation,
    event_kind,
    fork_needs_force,
    fork_summary,
    kept_by_fork,
    operations,
    replay_lines,
    replay_verdict,
)
from tests.tui.conftest import (
    Harness,
    cell_text,
    focus,
    static_text,
    status_line,
    table_keys,
    until,
)
from tests.tui.test_console import (
    audit_actions,
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
bodies: list[str] = []
broken = {"charge": True}
ONCE = StepConfig(retry_strategy=RetryPresets.none())


def body(label: str) -> Any:
    def run_body() -> str:
        bodies.append(label)
        if label == "charge" and broken["charge"]:
            raise ConnectionError("card processor down")
        return label
    run_body.__name__ = label
    return run_body


@durable_execution(name="trip")
async def trip(event: Any, ctx: DurableContext) -> list[str]:
    a = await ctx.step(body("book_flight"), name="book_flight")
    b = await ctx.step(body("book_hotel"), name="book_hotel")
    c = await ctx.step(body("charge"), name="charge", config=ONCE)
    return [a, b, c]


@durable_execution(name="trip", version="2")
async def trip_v2(event: Any, ctx: DurableContext) -> list[str]:
    a = await ctx.step(body("book_flight"), name="book_flight")
    b = await ctx.step(body("reserve_room"), name="reserve_room")  # the log says book_hotel
    return [a, b]


async def failed_trip(harness: Harness, eid: str = "lisbon") -> str:
    bodies.clear()
    broken["charge"] = True
    harness.rt.register_execution(trip)
    harness.rt.register_execution(trip_v2)
    await harness.rt.executions.start("trip", {"to": eid}, execution_id=eid, version="1")
    await harness.clock.advance(1)
    assert (await harness.describe(eid))["status"] == "failed"
    return eid


# -- pure: the replay check in words, the operations a fork starts from -------------------

CLEAN_REPORT = {"clean": True, "version": "1", "summary": "replays cleanly", "divergence": None,
                "replayed": 4, "recorded": 4,
                "stopped_at": {"op_id": "4", "reason": "waiting for callback 'verdict'"}}
DIVERGED = {"clean": False, "version": "2", "summary": "replay diverged at operation 2: ...",
            "replayed": 1, "recorded": 3, "stopped_at": None,
            "divergence": {"op_id": "2", "index": 1,
                           "recorded": {"type": "STEP", "kind": "Step", "name": "book_hotel"},
                           "current": {"type": "STEP", "kind": "Step",
                                       "name": "reserve_room"}}}


def test_replay_lines_say_clean_or_where_it_diverges() -> None:
    assert replay_lines(CLEAN_REPORT) == [
        "replays cleanly against version 1",
        "4 of 4 recorded operations replayed; it stopped at operation 4: waiting for "
        "callback 'verdict'"]
    assert replay_lines(DIVERGED)[:4] == [
        "does NOT replay against version 2",
        "first divergence at operation 2 (operation index 1):",
        "  recorded: Step 'book_hotel'", "  handler now: Step 'reserve_room'"]
    gone = {**DIVERGED, "divergence": {**DIVERGED["divergence"], "current": None}}
    assert "handler now: nothing (the handler no longer calls it)" in replay_lines(gone)[3]
    assert replay_verdict(CLEAN_REPORT) == "replays cleanly (version 1)"
    assert replay_verdict(DIVERGED).startswith("diverges at operation 2 (index 1): recorded "
                                               "Step 'book_hotel', handler now Step")
    timeout = {"clean": False, "version": "1", "summary": "did not finish", "divergence": None}
    assert replay_lines(timeout)[0] == "not clean against version 1: did not finish"


def test_operations_come_from_the_history_in_replay_order() -> None:
    history = [{"EventType": "ExecutionStarted"},
               {"EventType": "StepStarted", "Id": "1", "Name": "reserve", "SubType": "Step"},
               {"EventType": "StepSucceeded", "Id": "1", "Name": "reserve"},
               {"EventType": "ContextStarted", "Id": "2", "Name": "partners"},
               {"EventType": "StepStarted", "Id": "2-1", "Name": "notify"},
               {"EventType": "WaitStarted", "Id": "10", "Name": None},
               {"EventType": "InvocationCompleted"}]
    assert [op.label() for op in operations(history)] == [
        "1  Step reserve", "2  Context partners", "2-1  Step notify", "10  Wait"]
    assert event_kind("ChainedInvokeSucceeded") == "ChainedInvoke"


def test_a_fork_needs_force_only_for_a_divergence_it_keeps() -> None:
    assert kept_by_fork("1", "3") and kept_by_fork("2-1", "3")
    assert not kept_by_fork("3", "3") and not kept_by_fork("4", "3")
    assert not kept_by_fork("2", "2-1")  # the context holding the fork point runs again
    assert fork_needs_force(DIVERGED, "3")  # keeps operation 2
    assert not fork_needs_force(DIVERGED, "2") and not fork_needs_force(DIVERGED, "1")
    assert not fork_needs_force(CLEAN_REPORT, "1")
    assert fork_needs_force({"clean": False, "divergence": None}, "9")


def test_tools_apply_where_they_make_sense() -> None:
    suspended = {"status": "suspended", "paused": False}
    assert tool_applies("pause_execution", None, suspended)
    assert not tool_applies("resume_execution", None, suspended)
    assert tool_applies("resume_execution", None, {**suspended, "paused": True})
    assert not tool_applies("pause_execution", None, {"status": "succeeded"})
    assert tool_applies("redrive", None, {"status": "failed"})
    assert tool_applies("redrive", None, {"status": "timed_out"})
    assert not tool_applies("redrive", None, suspended)
    assert tool_applies("fork", None, {"status": "succeeded"})
    assert tool_applies("pause_alarm", {"state": "pending"}, None)
    assert not tool_applies("pause_alarm", {"state": "dead"}, None)
    assert tool_applies("resume_alarm", {"state": "retrying", "paused": True}, None)
    assert not tool_applies("snooze_alarm", None, suspended)


def test_the_fork_summary_follows_its_from() -> None:
    """What a fork keeps depends on where it starts; the replay check is of the whole log
    (the same "3 of 3 replayed" whatever "from" says), so the form says it per "from"."""
    ops = [Operation("1", "book_flight", "Step"), Operation("2", "book_hotel", "Step"),
           Operation("3", "charge", "Step")]
    assert fork_summary(CLEAN_REPORT, ops, "3") == (
        "A fork from operation 3 keeps the recorded results of 2 of 3 operations and runs "
        "the rest anew; what it keeps replays cleanly.")
    assert fork_summary(CLEAN_REPORT, ops, "1").endswith("0 of 3 operations and runs the rest "
                                                         "anew: it keeps nothing to replay.")
    assert fork_summary(DIVERGED, ops, "3").endswith(
        "; operation 2, among what it keeps, does NOT replay.")
    assert fork_summary(DIVERGED, ops, "2").endswith(
        "replays cleanly (the divergence is after it).")


def test_fork_args_from_the_form() -> None:
    assert fork_args({"from_step": "3", "input": ' {"to": "porto"} ', "new_id": "p1",
                      "version": "", "reason": "retry to porto"}, False) == {
        "from_step": "3", "force": False, "input": {"to": "porto"},
        "new_execution_id": "p1", "reason": "retry to porto"}
    with pytest.raises(ValueError, match="input is JSON"):
        fork_args({"from_step": "3", "input": "{"}, False)
    assert callback_args("cb", "failure", "no", " why ") == {
        "op": "complete_callback", "callback_id": "cb", "outcome": "failure",
        "error_type": "OperatorRejected", "message": "no", "reason": "why"}
    assert callback_args("cb", "heartbeat", "", "x") == {
        "op": "send_callback", "callback_id": "cb", "outcome": "heartbeat"}


# -- against a real server -------------------------------------------------------------------


def buttons(pilot: Pilot) -> set[str]:
    """The ids of the buttons the form on top shows."""
    return {str(b.id) for b in pilot.app.screen.query(Button) if b.display}


async def test_pause_then_resume_from_the_executions_view(harness: Harness) -> None:
    """`p` on a waiting festival asks why and pauses it: describe() says paused, the
    row and the detail show it, and `p` is now Resume; `p` again resumes it."""
    eid = await harness.festival("hsf-day1")
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "3", ExecutionsScreen, "#execution-page", [eid])
        await until(pilot, lambda: "pause_execution" in {
            b.binding.action for b in pilot.app.screen.active_bindings.values()}, "Pause")
        await pilot.press("p")
        box = await dialog(pilot, TextDialog)
        assert f"Pause festival-stream/{eid}?" in box.title_text
        await paste(pilot, "venue checks first")
        await pilot.press("enter")
        await done(pilot, rec, f"paused festival-stream/{eid}")
        d = await harness.describe(eid)
        assert d["paused"] and d["paused_reason"] == "venue checks first"
        assert d["status"] == "suspended"  # the status is unchanged
        await until(pilot, lambda: cell_text(pilot, "#execution-page", eid)[0].endswith("‖"),
                    "the paused mark on the row")
        await until(pilot, lambda: "PAUSED (venue checks first" in static_text(
            pilot, "#execution-detail-text"), "the detail to say paused")
        assert pilot.app.screen.active_bindings["p"].binding.description == "Resume"
        await pilot.press("p")
        box = await dialog(pilot, ConfirmDialog)
        assert box.question.startswith(f"Resume festival-stream/{eid}?")
        await pilot.click("#yes")
        await done(pilot, rec, f"resumed festival-stream/{eid}")
        assert not (await harness.describe(eid))["paused"]
        assert [a[0] for a in await audit_actions(harness)] == ["resume", "pause"]
        await settle_workers(pilot)


async def test_redrive_after_the_cause_was_fixed(harness: Harness) -> None:
    """`d` on the failed trip: the form shows the replay check ("replays cleanly") and
    offers Redrive; the trip carries on from the charge, the bookings not made again."""
    eid = await failed_trip(harness)
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "3", ExecutionsScreen, "#execution-page", [eid])
        broken["charge"] = False  # the processor is back
        await pilot.press("d")
        form = await dialog(pilot, RedriveDialog)
        await pilot.pause()
        assert f"Redrive trip/{eid} from its first failed operation?" in static_text(
            pilot, ".question")
        assert "replays cleanly against version 1" in static_text(pilot, "#replay")
        assert buttons(pilot) == {"ok", "recheck", "cancel"}
        assert form.report["clean"]
        await focus(pilot, "reason")
        await paste(pilot, "processor back")
        await pilot.click("#ok")
        await done(pilot, rec, f"redriving trip/{eid} from operation 3")
        await harness.clock.advance(1)
        d = await harness.describe(eid)
        assert (d["status"], d["result"], d["redrives"]) == (
            "succeeded", ["book_flight", "book_hotel", "charge"], 1)
        assert bodies == ["book_flight", "book_hotel", "charge", "charge"]
        (audit,) = [r for r in await harness.rt.audit.list() if r["action"] == "redrive"]
        assert (audit["ok"], audit["reason"], audit["role"]) == (True, "processor back",
                                                                 "operator")
        await until(pilot, lambda: "SUCCEEDED" in cell_text(pilot, "#execution-page", eid)[0],
                    "the row to say SUCCEEDED")
        await settle_workers(pilot)


async def test_a_reason_typed_into_a_fresh_redrive_form_is_kept(harness: Harness) -> None:
    """The redrive and fork forms opened with the focus on their button, so a reason
    typed at once went nowhere: the focus is on the reason, and Enter redrives with it."""
    eid = await failed_trip(harness)
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "3", ExecutionsScreen, "#execution-page", [eid])
        broken["charge"] = False
        await pilot.press("d")
        await dialog(pilot, RedriveDialog)
        await pilot.pause()
        assert pilot.app.focused is not None and pilot.app.focused.id == "reason"
        await type_text(pilot, "processor back")
        await pilot.press("enter")
        await done(pilot, rec, f"redriving trip/{eid} from operation 3")
        (audit,) = [r for r in await harness.rt.audit.list() if r["action"] == "redrive"]
        assert audit["reason"] == "processor back"
        await pilot.press("F")
        form = await dialog(pilot, ForkDialog)
        await pilot.pause()
        assert pilot.app.focused is not None and pilot.app.focused.id == "reason"
        assert "keeps the recorded results of 2 of 3" in static_text(pilot, "#replay")
        form.query_one("#from_step", Select).value = "1"
        await until(pilot, lambda: "keeps the recorded results of 0 of 3" in static_text(
            pilot, "#replay"), "the summary to follow from")
        assert pilot.app.focused is not None and pilot.app.focused.id == "reason"
        await pilot.press("escape")
        await settle_workers(pilot)


async def test_a_divergence_is_shown_before_a_forced_redrive(harness: Harness) -> None:
    """Version 2 typed into the redrive form is checked first: the form then names the
    first divergence (operation 2, recorded Step 'book_hotel', now Step 'reserve_room')
    and offers only Force; forced, the redrive runs and its history says so."""
    eid = await failed_trip(harness)
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "3", ExecutionsScreen, "#execution-page", [eid])
        await pilot.press("d")
        await dialog(pilot, RedriveDialog)
        await focus(pilot, "version")
        await paste(pilot, "2")
        await pilot.press("enter")  # not run: the check is for version 1
        await until(pilot, lambda: isinstance(pilot.app.screen, RedriveDialog)
                    and not pilot.app.screen.report["clean"], "the check against version 2")
        await pilot.pause()
        shown = static_text(pilot, "#replay")
        assert "does NOT replay against version 2" in shown
        assert "first divergence at operation 2 (operation index 1)" in shown
        assert "recorded: Step 'book_hotel'" in shown
        assert "handler now: Step 'reserve_room'" in shown
        assert buttons(pilot) == {"force", "recheck", "cancel"}
        assert pilot.app.screen.query_one("#version", Input).value == "2"  # kept
        await pilot.press("enter")  # Enter does not force
        assert isinstance(pilot.app.screen, RedriveDialog)
        await pilot.click("#force")
        await done(pilot, rec, f"redriving trip/{eid} from operation 3 (forced)")
        d = await harness.describe(eid)
        (redriven,) = [e for e in d["history"] if e["EventType"] == "ExecutionRedriven"]
        assert redriven["ExecutionRedrivenDetails"]["Forced"] is True
        assert redriven["ExecutionRedrivenDetails"]["Version"] == "2"
        await settle_workers(pilot)


async def test_fork_from_the_charge_runs_only_what_follows(harness: Harness) -> None:
    """`F` offers the trip's operations (starting at the failed charge) and the replay
    check; Fork with a new id starts a new execution that keeps the bookings."""
    eid = await failed_trip(harness)
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "3", ExecutionsScreen, "#execution-page", [eid])
        broken["charge"] = False
        bodies.clear()
        await pilot.press("F")
        form = await dialog(pilot, ForkDialog)
        await pilot.pause()
        assert [op.label() for op in form.ops] == [
            "1  Step book_flight", "2  Step book_hotel", "3  Step charge"]
        assert form.query_one("#from_step", Select).value == "3"
        assert "replays cleanly" in static_text(pilot, "#replay")
        await focus(pilot, "new_id")
        await paste(pilot, "lisbon-again")
        await pilot.click("#ok")
        await done(pilot, rec, f"forked trip/{eid} from operation 3 as lisbon-again")
        await harness.clock.advance(1)
        d = await harness.describe("lisbon-again")
        assert (d["status"], d["result"]) == ("succeeded", ["book_flight", "book_hotel",
                                                            "charge"])
        assert bodies == ["charge"]
        assert d["forked_from"]["ExecutionId"] == eid
        assert (await harness.describe(eid))["status"] == "failed"  # the source as it was
        await until(pilot, lambda: "lisbon-again" in table_keys(pilot, "#execution-page"),
                    "the fork in the list")
        await settle_workers(pilot)


async def test_a_bad_fork_input_keeps_the_form(harness: Harness) -> None:
    """Input that is not JSON is refused in the form, which keeps what was typed; the
    divergence of version 2 at operation 2 matters to a fork from operation 3 (it keeps
    operation 2) but not to one from operation 2 (it runs it anew)."""
    eid = await failed_trip(harness)
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "3", ExecutionsScreen, "#execution-page", [eid])
        await pilot.press("F")
        await dialog(pilot, ForkDialog)
        await focus(pilot, "input")
        await paste(pilot, "{not json")
        await pilot.click("#ok")
        await until(pilot, lambda: "input is JSON" in static_text(pilot, "#problem"),
                    "the form's complaint")
        assert pilot.app.screen.query_one("#input", Input).value == "{not json"
        await focus(pilot, "version")
        await paste(pilot, "2")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(pilot.app.screen, ForkDialog)
                    and not pilot.app.screen.report["clean"], "the check against version 2")
        await pilot.pause()
        assert pilot.app.screen.query_one("#input", Input).value == "{not json"
        assert buttons(pilot) == {"force", "recheck", "cancel"}
        assert "keeps operation 2's record" in static_text(pilot, "#replay")
        pilot.app.screen.query_one("#from_step", Select).value = "2"
        await until(pilot, lambda: buttons(pilot) == {"ok", "recheck", "cancel"},
                    "Fork without force from operation 2")
        assert "which the fork runs anew" in static_text(pilot, "#replay")
        await pilot.press("escape")
        await settle_workers(pilot)
    assert [a for a in await audit_actions(harness) if a[0] == "fork"] == []


async def test_replay_check_on_demand(harness: Harness) -> None:
    """`v` replays the log and shows the verdict, naming the execution; nothing is
    audited (it is a query)."""
    eid = await harness.festival("hsf-day1")
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "3", ExecutionsScreen, "#execution-page", [eid])
        await pilot.press("v")
        await dialog(pilot, ReplayDialog)
        await pilot.pause()
        assert static_text(pilot, ".question") == f"Replay check of festival-stream/{eid}"
        shown = static_text(pilot, "#replay")
        assert "replays cleanly against version 1" in shown
        assert "4 of 4 recorded operations replayed" in shown
        assert "waiting for callback 'verdict'" in shown
        await pilot.press("escape")
        await until(pilot, lambda: "replays cleanly" in status_line(pilot), "the status line")
        assert await harness.rt.audit.list() == []
        await settle_workers(pilot)


async def test_fail_a_callback_by_hand_from_the_detail(harness: Harness) -> None:
    """Enter on the festival, then enter on its waiting "verdict" in the detail's
    callbacks: the form opens on that callback; failure with a message fails it by
    hand, audited under the execution with the reason."""
    eid = await harness.festival("hsf-day1")
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "3", ExecutionsScreen, "#execution-page", [eid])
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(pilot.app.screen, TargetScreen)
                    and len(table_keys(pilot, "#target-callbacks")) == 1, "the callbacks")
        (cid,) = table_keys(pilot, "#target-callbacks")
        assert cell_text(pilot, "#target-callbacks", cid)[:2] == ["verdict", "started"]
        await focus(pilot, "target-callbacks")
        await pilot.press("enter")
        form = await dialog(pilot, CallbackDialog)
        assert form.query_one("#callback", Select).value == cid
        form.query_one("#outcome", Select).value = "failure"
        await paste(pilot, "venue burnt down")
        await focus(pilot, "reason")
        await paste(pilot, "called the venue")
        await pilot.press("enter")
        await done(pilot, rec, f"failed callback 'verdict' of festival-stream/{eid} by hand")
        await harness.clock.advance(5)
        d = await harness.describe(eid)
        (verdict,) = [c for c in d["callbacks"] if c["name"] == "verdict"]
        assert verdict["status"] == "failed"
        (row,) = await harness.rt.audit.list()
        assert (row["action"], row["target"], row["reason"], row["ok"]) == (
            "complete_callback", eid, "called the venue", True)
        await settle_workers(pilot)


async def test_a_viewer_sees_no_tool_but_the_replay_check(harness: Harness) -> None:
    """With a viewer token p, d, F, c and z are hidden and open nothing; v (a query) is
    offered and works."""
    eid = await failed_trip(harness)
    app, rec = await start(harness, token=harness.tokens.viewer)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "3", ExecutionsScreen, "#execution-page", [eid])
        await pilot.pause()
        active = set(pilot.app.screen.active_bindings)
        assert not {"p", "d", "F", "c", "z"} & active and "v" in active
        await pilot.press("p", "d", "F", "c")
        assert isinstance(pilot.app.screen, ExecutionsScreen), "no form may open"
        await pilot.press("v")
        await dialog(pilot, ReplayDialog)
        await pilot.press("escape")
        await settle_workers(pilot)
    assert await harness.rt.audit.list() == []
    assert (await harness.describe(eid))["status"] == "failed"
