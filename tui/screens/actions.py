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


def applies(action: str, alarm: Row | None, execution: Row | None) -> bool:
    """Whether `action` applies to the selected alarm or execution row (pure)."""
    if action in ALARM_ACTIONS:
        if alarm is None:
            return False
        return action != "clear_dead_letter" or alarm.get("state") == "dead"
    if action in EXECUTION_ACTIONS:
        if execution is None:
            return False
        statuses, status = EXECUTION_ACTIONS[action], str(execution.get("status"))
        return status not in FINISHED if statuses is None else status in statuses
    if action == "inject_fault":
        return (alarm or execution) is not None
    return True


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
        stays on that object as its row moves (after a re-arm, a retry)."""
        focused = self.focused
        if isinstance(focused, ConsoleTable):
            focused.pin()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in OPERATOR_ACTIONS and self.console.read_only:
            return False
        if action in OPERATOR_ACTIONS:
            return applies(action, self.selected_alarm(), self.selected_execution())
        return super().check_action(action, parameters)

    async def confirmed(self, question: str, yes: str) -> bool:
        return bool(await self.app.push_screen_wait(ConfirmDialog(question, yes)))

    @work(group="actions")
    async def action_rearm(self) -> None:
        self.pin_selection()
        ref = self.selected_object()
        if ref is None or (self.console.confirm_actions and not await self.confirmed(
                f"Re-arm {ref}? Its alarm gets a fresh retry ladder, first attempt now.",
                "Re-arm")):
            return
        await self.console.command("rearm", ref, object=ref, reason="re-armed from the console")

    @work(group="actions")
    async def action_fire_now(self) -> None:
        self.pin_selection()
        ref = self.selected_object()
        if ref is None or (self.console.confirm_actions and not await self.confirmed(
                f"Fire {ref}'s alarm now? Its next attempt runs at once.", "Fire now")):
            return
        await self.console.command("fire_now", ref, object=ref)

    @work(group="actions")
    async def action_clear_dead_letter(self) -> None:
        self.pin_selection()
        ref = self.selected_object()
        if ref and await self.confirmed(f"Drop the dead letter of {ref}? Its attempts stay "
                                        "in the event log only.", "Drop"):
            await self.console.command("clear_dead_letter", ref, object=ref)

    @work(group="actions")
    async def action_inject_fault(self) -> None:
        self.pin_selection()
        target = self.selected_object() or self.selected_execution_id()
        if not target:
            return
        steps = []
        if "/" not in target:
            detail = await self.console.fetch("execution", execution_id=target)
            steps = [s["step"] for s in (detail or {}).get("saga", []) if s.get("step")]
        fields: dict[str, str] | None = None
        problem = ""
        while True:  # a refused fault opens the form again, as it was typed
            answer = await self.app.push_screen_wait(FaultDialog(target, steps, fields,
                                                                 problem))
            if not answer:
                return
            fields = answer["fields"]
            ok, problem = await self.console.try_command("inject_fault", target,
                                                         **answer["args"])
            if ok:
                return

    def action_send_callback(self) -> None:
        self.answer_callback(None)

    @work(group="actions")
    async def answer_callback(self, chosen: str | None) -> None:
        """Complete, fail or heartbeat a waiting callback (`chosen`, or one picked in the
        form) of the selected execution, by hand."""
        self.pin_selection()
        eid, label = self.selected_execution_id(), self.execution_label()
        detail = await self.console.fetch("execution", execution_id=eid) if eid else None
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

    @work(group="actions")
    async def action_retry_compensation(self) -> None:
        self.pin_selection()
        eid = self.selected_execution_id()
        if eid:
            await self.console.command("retry_compensation", self.execution_label(),
                                       execution_id=eid)

    @work(group="actions")
    async def action_resolve(self) -> None:
        self.pin_selection()
        eid, label = self.selected_execution_id(), self.execution_label()
        if not eid:
            return
        note = await self.app.push_screen_wait(TextDialog(
            f"Resolve {label} by hand: what was done?", "e.g. closed the viewing page by hand"))
        if note:
            await self.console.command("resolve", label, execution_id=eid, note=note)

    @work(group="actions")
    async def action_abort(self) -> None:
        self.pin_selection()
        eid, label = self.selected_execution_id(), self.execution_label()
        if not eid:
            return
        reason = await self.app.push_screen_wait(TextDialog(
            f"Abort {label}? It ends as aborted and runs nothing more. Why?", "reason"))
        if reason:
            await self.console.command("abort", label, execution_id=eid, reason=reason)

    @work(group="actions")
    async def action_hand_to_human(self) -> None:
        self.pin_selection()
        eid, label = self.selected_execution_id(), self.execution_label()
        if not eid:
            return
        reason = await self.app.push_screen_wait(TextDialog(
            f"Hold {label} for a human: why?", "reason"))
        if reason:
            await self.console.command("hand_to_human", label, execution_id=eid,
                                       reason=reason)
