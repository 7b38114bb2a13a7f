"""Operator actions on alarms and executions, shared by the views that list them.

Bindings document themselves (footer label, tooltip, id); actions that do not
apply (read-only mode, nothing selected) are hidden through `check_action`.
"""

from __future__ import annotations

from typing import Any

from textual import work
from textual.binding import Binding

from alarmtop.tui.screens.base import ConsoleScreen
from alarmtop.tui.screens.dialogs import CallbackDialog, ConfirmDialog, FaultDialog, TextDialog

OPERATOR_ACTIONS = {"rearm", "fire_now", "inject_fault", "clear_dead_letter", "send_callback",
                    "retry_compensation", "resolve", "abort", "hand_to_human", "clear_fault"}


class ActionsMixin(ConsoleScreen):
    """Subclasses say what is selected: `selected_object()` / `selected_execution()`."""

    ALARM_BINDINGS = [
        Binding("r", "rearm", "Re-arm", tooltip="Give the selected alarm a fresh retry ladder",
                id="rearm"),
        Binding("n", "fire_now", "Fire now", tooltip="Run the selected alarm's next attempt now",
                id="fire-now"),
        Binding("f", "inject_fault", "Inject fault",
                tooltip="Make the selected object or execution misbehave", id="inject-fault"),
        Binding("x", "clear_dead_letter", "Clear dead", tooltip="Drop the selected dead letter",
                id="clear-dead"),
    ]
    EXECUTION_BINDINGS = [
        Binding("c", "send_callback", "Callback", tooltip="Send a result to a pending callback",
                id="callback"),
        Binding("R", "retry_compensation", "Retry comp.",
                tooltip="Re-run the compensation that failed", id="retry-comp"),
        Binding("h", "resolve", "Resolve", tooltip="Record the failed step as done by hand",
                id="resolve"),
        Binding("a", "abort", "Abort", tooltip="End the execution as aborted", id="abort"),
        Binding("H", "hand_to_human", "To human", tooltip="Hold the execution for a human",
                id="hand-to-human"),
    ]

    def selected_object(self) -> str | None:
        return None

    def selected_execution(self) -> str | None:
        return None

    def selected_row(self, kind: str) -> dict[str, Any] | None:
        state = self.console.state
        if kind == "alarm":
            ref = self.selected_object()
            return state.alarms.get(ref) if ref else None
        eid = self.selected_execution()
        return state.executions.get(eid) if eid else None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in OPERATOR_ACTIONS and self.console.read_only:
            return False
        if action in ("rearm", "fire_now", "clear_dead_letter"):
            return self.selected_object() is not None
        if action in ("send_callback", "retry_compensation", "resolve", "abort",
                      "hand_to_human"):
            return self.selected_execution() is not None
        if action == "inject_fault":
            return (self.selected_object() or self.selected_execution()) is not None
        return True

    @work(group="actions")
    async def action_rearm(self) -> None:
        ref = self.selected_object()
        if ref:
            await self.console.command("rearm", object=ref, reason="re-armed from the console")

    @work(group="actions")
    async def action_fire_now(self) -> None:
        ref = self.selected_object()
        if ref:
            await self.console.command("fire_now", object=ref)

    @work(group="actions")
    async def action_clear_dead_letter(self) -> None:
        ref = self.selected_object()
        if ref and await self.app.push_screen_wait(ConfirmDialog(
                f"Drop the dead letter of {ref}? Its attempts stay in the event log only.")):
            await self.console.command("clear_dead_letter", object=ref)

    @work(group="actions")
    async def action_inject_fault(self) -> None:
        target = self.selected_object() or self.selected_execution()
        if not target:
            return
        steps = []
        if "/" not in target:
            detail = await self.console.fetch("execution", execution_id=target)
            steps = [s["step"] for s in (detail or {}).get("saga", [])]
        args = await self.app.push_screen_wait(FaultDialog(target, steps))
        if args:
            await self.console.command("inject_fault", **args)

    @work(group="actions")
    async def action_send_callback(self) -> None:
        eid = self.selected_execution()
        detail = await self.console.fetch("execution", execution_id=eid) if eid else None
        pending = [c for c in (detail or {}).get("callbacks", [])
                   if c["status"] == "started" and c.get("kind") == "Callback"]
        if not pending:
            self.notify("no callback is waiting in this execution", severity="warning")
            return
        args = await self.app.push_screen_wait(CallbackDialog(pending))
        if args:
            await self.console.command("send_callback", **args)

    @work(group="actions")
    async def action_retry_compensation(self) -> None:
        eid = self.selected_execution()
        if eid:
            await self.console.command("retry_compensation", execution_id=eid)

    @work(group="actions")
    async def action_resolve(self) -> None:
        eid = self.selected_execution()
        if not eid:
            return
        note = await self.app.push_screen_wait(TextDialog(
            f"Resolve {eid} by hand: what was done?", "e.g. closed the viewing page by hand"))
        if note:
            await self.console.command("resolve", execution_id=eid, note=note)

    @work(group="actions")
    async def action_abort(self) -> None:
        eid = self.selected_execution()
        if not eid:
            return
        reason = await self.app.push_screen_wait(TextDialog(
            f"Abort {eid}? It ends as aborted and runs nothing more. Why?", "reason"))
        if reason:
            await self.console.command("abort", execution_id=eid, reason=reason)

    @work(group="actions")
    async def action_hand_to_human(self) -> None:
        eid = self.selected_execution()
        if not eid:
            return
        reason = await self.app.push_screen_wait(TextDialog(
            f"Hold {eid} for a human: why?", "reason"))
        if reason:
            await self.console.command("hand_to_human", execution_id=eid, reason=reason)
