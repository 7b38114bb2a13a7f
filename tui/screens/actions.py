"""Operator actions on alarms and executions, shared by the views that show them.

Bindings document themselves (footer label, tooltip, id); actions that do not
apply (read-only or viewer, nothing selected, an alarm that is not a dead letter,
an execution that needs no human) are hidden through `check_action`. Every
confirmation and every result names its target. `r` and `n` ask first unless the
console was started with confirmations off (`AlarmtopApp(confirm_actions=False)`,
or the command palette's "Ask before re-arm and fire now").
"""

from __future__ import annotations

from typing import Any, ClassVar

from textual import work
from textual.binding import Binding

from alarmtop.tui.screens.base import ConsoleScreen
from alarmtop.tui.screens.dialogs import CallbackDialog, ConfirmDialog, FaultDialog, TextDialog
from alarmtop.tui.widgets.table import ConsoleTable

Row = dict[str, Any]
OPERATOR_ACTIONS = {"rearm", "fire_now", "inject_fault", "clear_dead_letter", "send_callback",
                    "retry_compensation", "resolve", "abort", "hand_to_human", "clear_fault"}
ALARM_ACTIONS = {"rearm", "fire_now", "clear_dead_letter"}
FINISHED = {"succeeded", "failed", "timed_out", "aborted"}
# execution action: the statuses it applies to (None: any but finished)
EXECUTION_ACTIONS: dict[str, set[str] | None] = {
    "send_callback": {"running", "suspended"}, "retry_compensation": {"needs_human"},
    "resolve": {"needs_human"}, "abort": None, "hand_to_human": {"running", "suspended"}}


def stuck_on_compensation(execution: Row) -> bool:
    """Whether the execution waits for a human on a failed compensation (the one thing
    `R` retries), not merely held for one with `H`."""
    return execution.get("status") == "needs_human" and str(
        execution.get("blocked_on") or "").startswith("needs a human:")


def applies(action: str, alarm: Row | None, execution: Row | None) -> bool:
    """Whether `action` applies to the selected alarm or execution row (pure)."""
    return not refusal(action, alarm, execution)


def refusal(action: str, alarm: Row | None, execution: Row | None) -> str:
    """Why `action` does not apply to the selected alarm or execution row, in a few
    words for the status line; "" when it applies (pure)."""
    if action in ALARM_ACTIONS:
        if alarm is None:
            return "no alarm is selected"
        ref, state = alarm.get("object"), alarm.get("state")
        if action == "clear_dead_letter" and state != "dead":
            return f"{ref} is not a dead letter (it is {state})"
        if action == "fire_now" and alarm.get("paused"):
            return f"the alarm of {ref} is paused: resume it first (p)"
        return ""
    if action in EXECUTION_ACTIONS:
        if execution is None:
            return "no execution is selected"
        label = f"{execution.get('name')}/{execution.get('execution_id')}"
        statuses, status = EXECUTION_ACTIONS[action], str(execution.get("status"))
        if statuses is None:
            return f"{label} has ended ({status})" if status in FINISHED else ""
        if status not in statuses:
            return f"{label} is {status}, not {' or '.join(sorted(statuses))}"
        if action == "retry_compensation" and not stuck_on_compensation(execution):
            return (f"{label} is held for a human, not stuck on a failed compensation: "
                    "nothing to retry (h resolves it, a aborts it)")
        return ""
    if action == "inject_fault" and (alarm or execution) is None:
        return "nothing is selected"
    return ""


class ActionsMixin(ConsoleScreen):
    """Subclasses say what is selected: `selected_alarm()` / `selected_execution()`, each
    a row of its listing (or None)."""

    ALARM_BINDINGS: ClassVar[list[Binding]] = [
        Binding("r", "rearm", "Re-arm", tooltip="Give the selected alarm a fresh retry ladder",
                id="rearm"),
        Binding("n", "fire_now", "Fire now", tooltip="Run the selected alarm's next attempt now",
                id="fire-now"),
        Binding("f", "inject_fault", "Fault",
                tooltip="Make the selected object or execution misbehave", id="inject-fault"),
        Binding("x", "clear_dead_letter", "Clear dead", tooltip="Drop the selected dead letter",
                id="clear-dead"),
    ]
    EXECUTION_BINDINGS: ClassVar[list[Binding]] = [
        Binding("c", "send_callback", "Callback", tooltip="Complete or fail a waiting callback "
                "by hand", id="callback"),
        Binding("R", "retry_compensation", "Retry comp.",
                tooltip="Re-run the compensation that failed", id="retry-comp"),
        Binding("h", "resolve", "Resolve", tooltip="Record the failed step as done by hand",
                id="resolve"),
        Binding("a", "abort", "Abort", tooltip="End the execution as aborted", id="abort"),
        Binding("H", "hand_to_human", "To human", tooltip="Hold the execution for a human",
                id="hand-to-human"),
    ]

    def selected_alarm(self) -> Row | None:
        return None

    def selected_execution(self) -> Row | None:
        return None

    def selected_object(self) -> str | None:
        alarm = self.selected_alarm()
        return None if alarm is None else str(alarm["object"])

    def selected_execution_id(self) -> str | None:
        ex = self.selected_execution()
        return None if ex is None else str(ex["execution_id"])

    def execution_label(self) -> str:
        ex = self.selected_execution()
        return "" if ex is None else f"{ex.get('name')}/{ex['execution_id']}"

    def pin_selection(self) -> None:
        """An action on the selected row makes it the operator's choice: the cursor
        holds that object while its row moves or is briefly missing (after a re-arm,
        a retry)."""
        focused = self.focused
        if isinstance(focused, ConsoleTable):
            focused.pin()

    def chosen_execution(self) -> tuple[str, str] | None:
        """(id, label) of the selected execution, read when the key is pressed."""
        self.pin_selection()
        eid = self.selected_execution_id()
        return None if eid is None else (eid, self.execution_label())

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in OPERATOR_ACTIONS and self.console.read_only:
            return False
        if action in OPERATOR_ACTIONS:
            return applies(action, self.selected_alarm(), self.selected_execution())
        return super().check_action(action, parameters)

    def why_not(self, action: str) -> str:
        if action in OPERATOR_ACTIONS:
            return refusal(action, self.selected_alarm(), self.selected_execution())
        return super().why_not(action)

    async def confirmed(self, question: str, yes: str) -> bool:
        return bool(await self.app.push_screen_wait(ConfirmDialog(question, yes)))

    # Each action reads its target when its key is pressed (in the key's handler, not in
    # the worker that runs it later): a redraw in between must not change what it acts on.

    def action_rearm(self) -> None:
        self.pin_selection()
        ref = self.selected_object()
        if ref is not None:
            self._rearm(ref)

    @work(group="actions")
    async def _rearm(self, ref: str) -> None:
        if self.console.confirm_actions and not await self.confirmed(
                f"Re-arm {ref}? Its alarm gets a fresh retry ladder, first attempt now.",
                "Re-arm"):
            return
        await self.console.command("rearm", ref, object=ref, reason="re-armed from the console")

    def action_fire_now(self) -> None:
        self.pin_selection()
        ref = self.selected_object()
        if ref is not None:
            self._fire_now(ref)

    @work(group="actions")
    async def _fire_now(self, ref: str) -> None:
        if self.console.confirm_actions and not await self.confirmed(
                f"Fire {ref}'s alarm now? Its next attempt runs at once.", "Fire now"):
            return
        await self.console.command("fire_now", ref, object=ref)

    def action_clear_dead_letter(self) -> None:
        self.pin_selection()
        ref = self.selected_object()
        if ref is not None:
            self._clear_dead_letter(ref)

    @work(group="actions")
    async def _clear_dead_letter(self, ref: str) -> None:
        if await self.confirmed(f"Drop the dead letter of {ref}? Its attempts stay in the "
                                "event log only.", "Drop"):
            await self.console.command("clear_dead_letter", ref, object=ref)

    def action_inject_fault(self) -> None:
        self.pin_selection()
        target = self.selected_object() or self.selected_execution_id()
        if target:
            self._inject_fault(target)

    @work(group="actions")
    async def _inject_fault(self, target: str) -> None:
        steps = []
        aws = False
        if "/" not in target:
            detail = await self.console.fetch("execution", execution_id=target)
            steps = [s["step"] for s in (detail or {}).get("saga", []) if s.get("step")]
            aws = (detail or {}).get("kind") == "aws"  # its faults are at the checkpoints
        fields: dict[str, str] | None = None
        problem = ""
        while True:  # a refused fault opens the form again, as it was typed
            answer = await self.app.push_screen_wait(FaultDialog(target, steps, fields,
                                                                 problem, aws=aws))
            if not answer:
                return
            fields = answer["fields"]
            ok, problem = await self.console.try_command("inject_fault", target,
                                                         **answer["args"])
            if ok:
                return

    def action_send_callback(self) -> None:
        self.answer_callback(None)

    def answer_callback(self, chosen: str | None) -> None:
        """Complete, fail or heartbeat a waiting callback (`chosen`, or one picked in the
        form) of the selected execution, by hand."""
        execution = self.chosen_execution()
        if execution is not None:
            self._answer_callback(*execution, chosen)

    @work(group="actions")
    async def _answer_callback(self, eid: str, label: str, chosen: str | None) -> None:
        detail = await self.console.fetch("execution", execution_id=eid)
        pending = [c for c in (detail or {}).get("callbacks", [])
                   if c["status"] == "started" and c.get("kind") == "Callback"]
        if not pending:
            self.say(f"no callback is waiting in {label}", "warning")
            self.notify(f"no callback is waiting in {label}", severity="warning")
            return
        dialog = CallbackDialog(label, pending, chosen)
        args = await self.app.push_screen_wait(dialog)
        if not args:
            return
        op, outcome = args.pop("op"), args["outcome"]
        target = f"callback '{dialog.name_of(args['callback_id'])}' of {label}"
        said = {"success": f"completed {target} by hand",
                "failure": f"failed {target} by hand",
                "heartbeat": f"sent a heartbeat to {target}"}[outcome]
        await self.console.perform(op, target, args, said=lambda _: said)

    def action_retry_compensation(self) -> None:
        execution = self.chosen_execution()
        if execution is not None:
            self._retry_compensation(*execution)

    @work(group="actions")
    async def _retry_compensation(self, eid: str, label: str) -> None:
        await self.console.command("retry_compensation", label, execution_id=eid)

    def action_resolve(self) -> None:
        execution = self.chosen_execution()
        if execution is not None:
            self._resolve(*execution)

    @work(group="actions")
    async def _resolve(self, eid: str, label: str) -> None:
        note = await self.app.push_screen_wait(TextDialog(
            f"Resolve {label} by hand: what was done?", "e.g. closed the viewing page by hand"))
        if note:
            await self.console.command("resolve", label, execution_id=eid, note=note)

    def action_abort(self) -> None:
        execution = self.chosen_execution()
        if execution is not None:
            self._abort(*execution)

    @work(group="actions")
    async def _abort(self, eid: str, label: str) -> None:
        reason = await self.app.push_screen_wait(TextDialog(
            f"Abort {label}? It ends as aborted and runs nothing more. Why?", "reason"))
        if reason:
            await self.console.command("abort", label, execution_id=eid, reason=reason)

    def action_hand_to_human(self) -> None:
        execution = self.chosen_execution()
        if execution is not None:
            self._hand_to_human(*execution)

    @work(group="actions")
    async def _hand_to_human(self, eid: str, label: str) -> None:
        reason = await self.app.push_screen_wait(TextDialog(
            f"Hold {label} for a human: why?", "reason"))
        if reason:
            await self.console.command("hand_to_human", label, execution_id=eid,
                                       reason=reason)
