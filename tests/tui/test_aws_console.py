"""The console on an execution of the real AWS SDK's handler (Pilot, a real server and
runtime): the executions view shows it waiting on its callback; `f` offers the
checkpoint faults of such executions (from the model's list, with what each does),
and one injected through the form applies; `c` answers the callback by hand and the
execution ends, audited. `p` pauses and resumes it, `a` stops it; a failed one is
redriven with `d` and forked from an operation with `F`, after the replay check.
(The callback in a real terminal: `test_tmux_aws.py`.)"""

from __future__ import annotations

from typing import Any

import pytest
from textual.widgets import Label, Select

from alarmtop.core.model.faults import FAULT_KINDS
from alarmtop.tui.screens.dialogs import CallbackDialog, ConfirmDialog, FaultDialog, TextDialog
from alarmtop.tui.screens.executions import ExecutionsScreen
from alarmtop.tui.screens.tool_dialogs import ForkDialog, RedriveDialog
from tests.tui.conftest import Harness, cell_text, focus, static_text, until
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

h = pytest.importorskip("tests.kernel.executions.aws_handlers")


async def waiting_on_its_callback(harness: Harness, eid: str = "aws-1") -> str:
    harness.rt.register_lambda("approve", h.callback_then_step)
    await harness.rt.executions.start("approve", {}, execution_id=eid)
    await harness.clock.advance(0)
    d = await harness.describe(eid)
    assert (d["status"], d["blocked_on"]) == ("suspended", "waiting for callback 'approval'")
    return eid


async def test_an_aws_execution_offers_checkpoint_faults_and_is_answered_by_hand(
        harness: Harness) -> None:
    eid = await waiting_on_its_callback(harness)
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "3", ExecutionsScreen, "#execution-page", [eid])
        row = cell_text(pilot, "#execution-page", eid)
        assert "SUSPENDED" in row[0] and any("approve/aws-1" in c for c in row), row

        await pilot.press("f")
        form: Any = await dialog(pilot, FaultDialog)
        assert form.target == eid
        assert form.kinds == ["checkpoint_fail", "checkpoint_delay", "checkpoint_revoke"]
        about = form.query_one("#about", Label)
        assert str(about.content) == FAULT_KINDS["checkpoint_fail"]
        await pilot.press("enter", "down", "down", "enter")  # -> checkpoint_revoke
        await until(pilot, lambda: form.query_one("#kind", Select).value == "checkpoint_revoke"
                    and str(about.content) == FAULT_KINDS["checkpoint_revoke"],
                    "checkpoint_revoke chosen, and said what it does")
        await focus(pilot, "times")
        await type_text(pilot, "1")
        await focus(pilot, "ok")
        await pilot.press("enter")
        await done(pilot, rec, f"injected a fault on {eid}")
        (fault,) = harness.rt.faults.list()
        assert (fault["target"], fault["kind"], fault["times"]) == (eid, "checkpoint_revoke", 1)

        await pilot.press("c")
        answer: Any = await dialog(pilot, CallbackDialog)
        (callback,) = answer.callbacks
        assert callback["name"] == "approval" and answer.execution == f"approve/{eid}"
        await focus(pilot, "payload")
        await type_text(pilot, "yes")
        await focus(pilot, "ok")
        await pilot.press("enter")
        await done(pilot, rec, f"completed callback 'approval' of approve/{eid} by hand")
        await harness.clock.advance(1)
        d = await harness.describe(eid)
        assert (d["status"], d["result"]) == ("succeeded", "approved:yes")
        # The revoked token ended one invocation PENDING; the next carried on.
        assert harness.rt.faults.list() == []
        ends = [ev for ev in d["history"] if ev["EventType"] == "InvocationCompleted"]
        assert len(ends) == 3, [ev["EventType"] for ev in d["history"]]
        assert await audit_actions(harness) == [  # the newest first
            ("complete_callback", eid, True, "operator"), ("inject_fault", eid, True, "operator")]
        await until(pilot, lambda: "SUCCEEDED" in cell_text(pilot, "#execution-page", eid)[0],
                    "the execution to show SUCCEEDED")
        await settle_workers(pilot)


async def test_a_native_execution_and_an_object_keep_their_own_fault_kinds(
        harness: Harness) -> None:
    eid = await harness.festival("hsf-day1")
    pending = await harness.pending()
    aws = await waiting_on_its_callback(harness, "aws-2")
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        for target, kinds in [(eid, ["step_raise", "step_crash", "compensation_fail",
                                     "idempotency_off"]),
                              (aws, ["checkpoint_fail", "checkpoint_delay", "checkpoint_revoke"])]:
            await pilot.press("3")
            await until(pilot, lambda t=target: isinstance(pilot.app.screen, ExecutionsScreen)
                        and t in pilot.app.screen.query_one("#execution-page").rows,
                        f"{target} listed")
            table: Any = pilot.app.screen.query_one("#execution-page")
            table.move_cursor(row=table.get_row_index(target))
            await pilot.press("f")
            form: Any = await dialog(pilot, FaultDialog)
            assert (form.target, form.kinds) == (target, kinds)
            await pilot.press("escape")
            await until(pilot, lambda: isinstance(pilot.app.screen, ExecutionsScreen),
                        "the form to close")
        await pilot.press("2")
        await until(pilot, lambda: pending in pilot.app.screen.query_one("#alarm-page").rows,
                    "the pending alarm listed")
        await pilot.press("f")
        form = await dialog(pilot, FaultDialog)
        assert form.kinds == ["alarm_raise", "alarm_delay"]
        await pilot.press("escape")
        await settle_workers(pilot)


async def test_pause_resume_and_stop_from_the_console(harness: Harness) -> None:
    """`p` pauses the waiting execution (the token is withheld from its next
    invocation), `p` again resumes it, `a` stops it: AWS's ExecutionStopped ends its
    history, and each step is audited."""
    eid = await waiting_on_its_callback(harness, "aws-3")
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "3", ExecutionsScreen, "#execution-page", [eid])
        await until(pilot, lambda: "pause_execution" in {
            b.binding.action for b in pilot.app.screen.active_bindings.values()}, "Pause")
        await pilot.press("p")
        await dialog(pilot, TextDialog)
        await paste(pilot, "check the approver")
        await pilot.press("enter")
        await done(pilot, rec, f"paused approve/{eid}")
        d = await harness.describe(eid)
        assert d["paused"] and d["paused_reason"] == "check the approver"
        await until(pilot, lambda: cell_text(pilot, "#execution-page", eid)[0].endswith("‖"),
                    "the paused mark on the row")
        await pilot.press("p")
        await dialog(pilot, ConfirmDialog)
        await pilot.click("#yes")
        await done(pilot, rec, f"resumed approve/{eid}")
        assert not (await harness.describe(eid))["paused"]

        await pilot.press("a")
        await dialog(pilot, TextDialog)
        await paste(pilot, "wrong request")
        await pilot.press("enter")
        await done(pilot, rec, f"aborted approve/{eid}")
        d = await harness.describe(eid)
        assert d["status"] == "aborted"
        assert d["history"][-1]["EventType"] == "ExecutionStopped"
        assert [a[0] for a in await audit_actions(harness)] == ["abort", "resume", "pause"]
        await until(pilot, lambda: "ABORTED" in cell_text(pilot, "#execution-page", eid)[0],
                    "the row to say ABORTED")
        await settle_workers(pilot)


async def failed_execution(harness: Harness, eid: str) -> str:
    h.SWITCHES.clear()
    harness.rt.register_lambda("fixme", h.fails_until_fixed)
    await harness.rt.executions.start("fixme", None, execution_id=eid)
    await harness.clock.advance(5)
    assert (await harness.describe(eid))["status"] == "failed"
    return eid


async def test_redrive_and_fork_from_an_operation(harness: Harness) -> None:
    """A failed execution of the SDK's handler: `d` shows the replay check and redrives
    it from its failed step (the first step not run again); `F` offers its operations
    and forks a new execution from the failed one, keeping what came before."""
    eid = await failed_execution(harness, "aws-4")
    arn = (await harness.describe(eid))["arn"]
    app, rec = await start(harness)
    async with run(app, rec) as pilot:
        await connected(pilot)
        await view(pilot, "3", ExecutionsScreen, "#execution-page", [eid])
        h.SWITCHES["fixed"]["on"] = True  # the cause is fixed
        await pilot.press("F")
        form: Any = await dialog(pilot, ForkDialog)
        await pilot.pause()
        labels = [op.label() for op in form.ops]
        assert [label.split()[-2:] for label in labels] == [["Step", "first"],
                                                            ["Step", "flaky"]], labels
        flaky = form.ops[1].op_id
        assert form.query_one("#from_step", Select).value == flaky  # the failed one
        await until(pilot, lambda: "replays cleanly" in static_text(pilot, "#replay"),
                    "the replay check")
        await focus(pilot, "new_id")
        await paste(pilot, "aws-4-fork")
        await pilot.click("#ok")
        await done(pilot, rec, f"forked fixme/{eid} from operation {flaky} as aws-4-fork")
        await harness.clock.advance(5)
        forked = await harness.describe("aws-4-fork")
        assert (forked["status"], forked["result"]) == ("succeeded", ["first", "fixed"])
        assert h.RUNS[forked["arn"]] == ["flaky"]  # `first` kept from the source

        await pilot.press("d")
        await dialog(pilot, RedriveDialog)
        await until(pilot, lambda: "replays cleanly" in static_text(pilot, "#replay"),
                    "the replay check")
        await type_text(pilot, "config fixed")
        await pilot.press("enter")
        await done(pilot, rec, f"redriving fixme/{eid} from operation {flaky}")
        await harness.clock.advance(5)
        d = await harness.describe(eid)
        assert (d["status"], d["result"]) == ("succeeded", ["first", "fixed"])
        assert h.RUNS[arn] == ["first", "flaky", "flaky"]  # `first` was not run again
        assert [a[0] for a in await audit_actions(harness)] == ["redrive", "fork"]
        await until(pilot, lambda: "SUCCEEDED" in cell_text(pilot, "#execution-page", eid)[0],
                    "the row to say SUCCEEDED")
        await settle_workers(pilot)
