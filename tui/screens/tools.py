"""The execution tools (pause and resume, redrive, fork, the replay check, callbacks by
hand) and the alarm's pause and snooze, as keys of the views that show them.

`p` pauses or resumes whatever is selected (the footer says which); `d` redrives
a failed or timed-out execution and `F` forks any execution, both after the
console ran the replay check and showed it in the confirmation (a divergence
offers only "Force"); `v` runs the replay check alone (viewers too: it changes
nothing); `z` snoozes an alarm. Like every action, each names its target when it
asks and when it is done, and is hidden for a viewer or with `--read-only`.
"""

from __future__ import annotations

from functools import partial
from typing import Any, ClassVar

from textual import work
from textual.binding import Binding

from alarmtop.tui.formatting import duration, relative
from alarmtop.tui.screens.actions import FINISHED, ActionsMixin
from alarmtop.tui.screens.dialogs import TextDialog
from alarmtop.tui.screens.tool_dialogs import ForkDialog, RedriveDialog, ReplayDialog, SnoozeDialog
from alarmtop.tui.tools import Operation, operations, replay_verdict

Row = dict[str, Any]
REDRIVABLE = {"failed", "timed_out"}
ALARM_TOOLS = {"pause_alarm", "resume_alarm", "snooze_alarm"}
EXECUTION_TOOLS = {"pause_execution", "resume_execution", "redrive", "fork"}
READ_TOOLS = {"replay_check"}  # a query: a viewer may run it
TOOL_ACTIONS = ALARM_TOOLS | EXECUTION_TOOLS


def tool_applies(action: str, alarm: Row | None, execution: Row | None) -> bool:
    """Whether a tool applies to the selected alarm or execution row (pure)."""
    return not tool_refusal(action, alarm, execution)


def tool_refusal(action: str, alarm: Row | None, execution: Row | None) -> str:
    """Why a tool does not apply to the selected row, in a few words; "" when it does
    (pure)."""
    if action in ALARM_TOOLS:
        if alarm is None:
            return "no alarm is selected"
        ref, paused = alarm.get("object"), bool(alarm.get("paused"))
        if alarm.get("state") == "dead":
            return f"{ref} is a dead letter: re-arm it (r) or clear it (x)"
        if action == "pause_alarm" and paused:
            return f"the alarm of {ref} is paused already"
        if action == "resume_alarm" and not paused:
            return f"the alarm of {ref} is not paused"
        return ""
    if execution is None:
        return "no execution is selected"
    label = f"{execution.get('name')}/{execution.get('execution_id')}"
    status, paused = str(execution.get("status")), bool(execution.get("paused"))
    if action in ("pause_execution", "resume_execution") and status in FINISHED:
        return f"{label} has ended ({status})"
    if action == "pause_execution" and paused:
        return f"{label} is paused already"
    if action == "resume_execution" and not paused:
        return f"{label} is not paused"
    if action == "redrive" and status not in REDRIVABLE:
        return f"{label} is {status}: redrive carries on a failed or timed-out execution"
    return ""


class ToolsMixin(ActionsMixin):
    ALARM_TOOL_BINDINGS: ClassVar[list[Binding]] = [
        Binding("p", "pause_alarm", "Pause", tooltip="Fire nothing of the selected alarm "
                "until it is resumed (its retry count is kept)", id="pause-alarm"),
        Binding("p", "resume_alarm", "Resume", tooltip="Let the selected alarm fire again",
                id="resume-alarm"),
        Binding("z", "snooze_alarm", "Snooze", tooltip="Move the selected alarm later",
                id="snooze-alarm"),
    ]
    EXECUTION_TOOL_BINDINGS: ClassVar[list[Binding]] = [
        Binding("p", "pause_execution", "Pause", tooltip="Run nothing of the selected "
                "execution until it is resumed; its timers keep their due times",
                id="pause-execution"),
        Binding("p", "resume_execution", "Resume", tooltip="Let the selected execution run "
                "again: what fell due meanwhile runs now", id="resume-execution"),
        Binding("d", "redrive", "Redrive", tooltip="Carry the failed execution on from its "
                "first failed operation (after a replay check)", id="redrive"),
        Binding("F", "fork", "Fork", tooltip="A new execution from one of this one's "
                "operations, with its results before it (after a replay check)", id="fork"),
        Binding("v", "replay_check", "Replay chk", tooltip="Replay the recorded log against "
                "the handler: clean, or the first divergence (runs nothing)",
                id="replay-check"),
    ]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in TOOL_ACTIONS:
            return not self.console.read_only and tool_applies(
                action, self.selected_alarm(), self.selected_execution())
        if action in READ_TOOLS:
            return tool_applies(action, None, self.selected_execution())
        return super().check_action(action, parameters)

    def why_not(self, action: str) -> str:
        if action in TOOL_ACTIONS or action in READ_TOOLS:
            return tool_refusal(action, self.selected_alarm(), self.selected_execution())
        return super().why_not(action)

    # -- pause and resume -----------------------------------------------------------------
    # As in `ActionsMixin`: the target is read when the key is pressed.

    def action_pause_execution(self) -> None:
        execution = self.chosen_execution()
        if execution is not None:
            self._pause_execution(*execution)

    @work(group="actions")
    async def _pause_execution(self, eid: str, label: str) -> None:
        reason = await self.app.push_screen_wait(TextDialog(
            f"Pause {label}? It runs nothing until resumed; its timers keep their due times "
            "and what falls due meanwhile runs on resume. Why? (optional; Enter pauses)",
            "reason", required=False))
        if reason is not None:
            await self.console.command("pause", label, execution_id=eid,
                                       **({"reason": reason} if reason else {}))

    def action_resume_execution(self) -> None:
        execution = self.chosen_execution()
        if execution is not None:
            self._resume_execution(*execution)

    @work(group="actions")
    async def _resume_execution(self, eid: str, label: str) -> None:
        if await self.confirmed(f"Resume {label}? Whatever fell due while it was paused "
                                "runs now.", "Resume"):
            await self.console.command("resume", label, execution_id=eid)

    def action_pause_alarm(self) -> None:
        self.pin_selection()
        ref = self.selected_object()
        if ref is not None:
            self._pause_alarm(ref)

    @work(group="actions")
    async def _pause_alarm(self, ref: str) -> None:
        reason = await self.app.push_screen_wait(TextDialog(
            f"Pause the alarm of {ref}? It is kept, with its retry count, and fires nothing "
            "until resumed. Why? (optional; Enter pauses)", "reason", required=False))
        if reason is not None:
            await self.console.command("pause_alarm", ref, object=ref,
                                       **({"reason": reason} if reason else {}))

    def action_resume_alarm(self) -> None:
        self.pin_selection()
        ref = self.selected_object()
        if ref is not None:
            self._resume_alarm(ref)

    @work(group="actions")
    async def _resume_alarm(self, ref: str) -> None:
        if await self.confirmed(f"Resume the alarm of {ref}? If it fell due while paused it "
                                "fires now.", "Resume"):
            await self.console.command("resume_alarm", ref, object=ref)

    def action_snooze_alarm(self) -> None:
        self.pin_selection()
        alarm = self.selected_alarm()
        if alarm is not None:
            self._snooze_alarm(str(alarm["object"]),
                               alarm.get("next_attempt_ms") or alarm.get("scheduled_ms"))

    @work(group="actions")
    async def _snooze_alarm(self, ref: str, due_ms: int | None) -> None:
        due = relative(due_ms, self.console.state.now_ms)
        by = await self.app.push_screen_wait(SnoozeDialog(f"the alarm of {ref}", f"due {due}"))
        if by:
            await self.console.perform("snooze_alarm", ref, {"object": ref, "by_ms": int(by)},
                                       said=lambda _: f"snoozed {ref} by {duration(int(by))}")

    # -- the replay check, redrive and fork ---------------------------------------------

    async def replay(self, eid: str, label: str, version: str | None = None) -> Any:
        self.say(f"replaying the log of {label} against its handler…")
        report = await self.console.fetch("replay_check", execution_id=eid, version=version)
        if report is not None:
            self.say(f"replay check of {label}: {replay_verdict(report)}",
                     "information" if report.get("clean") else "warning")
        return report

    def action_replay_check(self) -> None:
        execution = self.chosen_execution()
        if execution is not None:
            self._replay_check(*execution)

    @work(group="actions")
    async def _replay_check(self, eid: str, label: str) -> None:
        report = await self.replay(eid, label)
        if report is not None:
            await self.app.push_screen_wait(ReplayDialog(label, report))

    def action_redrive(self) -> None:
        execution = self.chosen_execution()
        if execution is not None:
            self._redrive(*execution)

    @work(group="actions")
    async def _redrive(self, eid: str, label: str) -> None:
        fields: dict[str, str] = {}
        problem = ""
        while True:  # a re-check or a refusal opens the form again, as it was typed
            report = await self.replay(eid, label, fields.get("version", "").strip() or None)
            if report is None:
                return
            answer = await self.app.push_screen_wait(RedriveDialog(label, report, fields,
                                                                   problem))
            if not answer:
                return
            fields, problem = answer["fields"], ""
            if answer.get("recheck"):
                continue
            outcome = await self.console.perform(
                "redrive", label, {"execution_id": eid, **answer["args"]},
                said=partial(redriving, label, bool(answer["args"]["force"])))
            if outcome.ok:
                return
            problem = outcome.error

    def action_fork(self) -> None:
        execution = self.chosen_execution()
        if execution is not None:
            self._fork(*execution)

    @work(group="actions")
    async def _fork(self, eid: str, label: str) -> None:
        detail = await self.console.fetch("execution", execution_id=eid)
        ops = operations((detail or {}).get("history") or [])
        if not ops:
            self.say(f"{label} has no operation to fork from yet", "warning")
            return
        fields: dict[str, str] = {}
        problem = ""
        while True:
            report = await self.replay(eid, label, fields.get("version", "").strip() or None)
            if report is None:
                return
            answer = await self.app.push_screen_wait(ForkDialog(
                label, report, ops, fork_start(detail or {}, ops), fields, problem))
            if not answer:
                return
            fields, problem = answer["fields"], ""
            if answer.get("recheck"):
                continue
            outcome = await self.console.perform(
                "fork", label, {"execution_id": eid, **answer["args"]},
                said=lambda d: f"forked {label} from operation {d.get('from_operation')} as "
                               f"{d.get('execution_id')}")
            if outcome.ok:
                return
            problem = outcome.error


def redriving(label: str, forced: bool, answer: Any) -> str:
    """The result line of a redrive, with the operation it carries on from."""
    start = (answer or {}).get("from_operation") or "where it stopped (nothing failed)"
    return f"redriving {label} from operation {start}" + (" (forced)" if forced else "")


def fork_start(detail: dict[str, Any], ops: list[Operation]) -> str:
    """Where the fork form starts: the first failed operation, else the last one."""
    failed = {str(ev.get("Id")) for ev in detail.get("history") or []
              if str(ev.get("EventType", "")).endswith(("Failed", "TimedOut"))}
    return next((op.op_id for op in ops if op.op_id in failed), ops[-1].op_id)
