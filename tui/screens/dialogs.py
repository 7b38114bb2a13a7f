"""Small modal forms: confirm, a note, a fault, a callback result."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select

FAULT_KINDS = ["alarm_raise", "alarm_delay", "step_raise", "step_crash", "compensation_fail",
               "idempotency_off"]


class _Dialog(ModalScreen[Any]):
    BINDINGS = [Binding("escape", "cancel", "Cancel", tooltip="Close without doing anything")]

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmDialog(_Dialog):
    """Yes/no before a destructive action."""

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question, classes="question")
            with Horizontal(classes="buttons"):
                yield Button("Yes", variant="error", id="yes")
                yield Button("No", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class TextDialog(_Dialog):
    """One line of text (a note, a reason, a filter)."""

    def __init__(self, title: str, placeholder: str = "", value: str = "",
                 required: bool = True) -> None:
        super().__init__()
        self.title_text, self.placeholder, self.value, self.required = (
            title, placeholder, value, required)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="question")
            yield Input(self.value, placeholder=self.placeholder, id="text")
            yield Label("", id="problem", classes="problem")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if self.required and not event.value.strip():
            self.query_one("#problem", Label).update("please write something (Esc cancels)")
            return
        self.dismiss(event.value.strip())


class FaultDialog(_Dialog):
    """Choose a fault kind and its parameters for a target."""

    def __init__(self, target: str, steps: list[str] | None = None) -> None:
        super().__init__()
        self.target = target
        self.steps = steps or []

    def compose(self) -> ComposeResult:
        object_target = "/" in self.target
        kinds = [k for k in FAULT_KINDS if k.startswith("alarm_") == object_target]
        with Vertical(classes="dialog"):
            yield Label(f"Inject a fault on {self.target}", classes="question")
            yield Select([(k, k) for k in kinds], value=kinds[0], id="kind", allow_blank=False)
            yield Input(placeholder="times (empty: always)", id="times")
            yield Input(placeholder="seconds (alarm_delay)", id="seconds")
            yield Input(placeholder="step name (step kinds), e.g. compensate_open_viewing_page",
                        id="step", value=self.steps[0] if self.steps else "")
            yield Select([(p, p) for p in ("A", "B", "C")], value="B", id="point",
                         allow_blank=False)
            yield Label("", id="problem", classes="problem")
            with Horizontal(classes="buttons"):
                yield Button("Inject", variant="warning", id="ok")
                yield Button("Cancel", id="cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id != "ok":
            self.dismiss(None)
            return
        args: dict[str, Any] = {"target": self.target,
                                "kind": str(self.query_one("#kind", Select).value)}
        times = self.query_one("#times", Input).value.strip()
        seconds = self.query_one("#seconds", Input).value.strip()
        step = self.query_one("#step", Input).value.strip()
        try:
            if times:
                args["times"] = int(times)
            else:
                args["always"] = True
            if seconds:
                args["seconds"] = float(seconds)
        except ValueError:
            self.query_one("#problem", Label).update("times and seconds are numbers")
            return
        if step:
            args["step"] = step
        if args["kind"] == "step_crash":
            args["point"] = str(self.query_one("#point", Select).value)
        self.dismiss(args)


class CallbackDialog(_Dialog):
    """Send a callback result: which callback, which outcome, what payload."""

    def __init__(self, callbacks: list[dict[str, Any]]) -> None:
        super().__init__()
        self.callbacks = callbacks

    def compose(self) -> ComposeResult:
        options = [(f"{c.get('name') or '?'} ({c['callback_id'][:18]}…)", c["callback_id"])
                   for c in self.callbacks]
        with Vertical(classes="dialog"):
            yield Label("Send a callback result", classes="question")
            yield Select(options, value=options[0][1], id="callback", allow_blank=False)
            yield Select([(o, o) for o in ("success", "failure", "heartbeat")],
                         value="success", id="outcome", allow_blank=False)
            yield Input(placeholder='payload, e.g. go  or  cancel  or  {"ok": true}',
                        id="payload")
            with Horizontal(classes="buttons"):
                yield Button("Send", variant="primary", id="ok")
                yield Button("Cancel", id="cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id != "ok":
            self.dismiss(None)
            return
        outcome = str(self.query_one("#outcome", Select).value)
        text = self.query_one("#payload", Input).value
        args: dict[str, Any] = {"callback_id": str(self.query_one("#callback", Select).value),
                                "outcome": outcome}
        if outcome == "success":
            args["payload"] = text
        elif outcome == "failure":
            args["error_type"], args["message"] = "OperatorRejected", text
        self.dismiss(args)
