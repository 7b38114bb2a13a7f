"""Small modal forms: confirm, a note, a fault, a callback result.

Every form names its target. A form whose command the server refuses is opened
again by its caller with what was typed and the server's reason (`problem`).
"""

from __future__ import annotations

import math
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select

from alarmtop.core.model.faults import FAULT_KINDS, STEP_KINDS, kinds_for, needs_seconds

# The kinds, their descriptions and which target takes which are the model's (one list).


class Dialog(ModalScreen[Any]):
    BINDINGS = [Binding("escape", "cancel", "Cancel", tooltip="Close without doing anything")]

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmDialog(Dialog):
    """Yes/no before an action; the question names the target, `yes` says the action."""

    def __init__(self, question: str, yes: str = "Yes") -> None:
        super().__init__()
        self.question, self.yes = question, yes

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question, classes="question")
            with Horizontal(classes="buttons"):
                yield Button(self.yes, variant="error", id="yes")
                yield Button("No", id="no")

    def on_mount(self) -> None:
        self.query_one("#yes", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class TextDialog(Dialog):
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


def fault_args(target: str, kind: str, times: str, seconds: str, step: str,
               point: str) -> dict[str, Any]:
    """The `inject_fault` arguments of the form's fields, or ValueError saying which field
    is wrong and how (pure: the form's rules, tested without a screen)."""
    args: dict[str, Any] = {"target": target, "kind": kind}
    times, seconds, step = times.strip(), seconds.strip(), step.strip()
    if times:
        try:
            args["times"] = int(times)
        except ValueError:
            raise ValueError(f"times is a whole number of times, e.g. 3, not {times!r} "
                             "(empty: always)") from None
        if args["times"] < 1:
            raise ValueError("times is 1 or more (empty: always)")
    else:
        args["always"] = True
    if seconds:
        try:
            secs = float(seconds)
        except ValueError:
            secs = math.nan
        if not math.isfinite(secs) or secs <= 0:
            raise ValueError(f"seconds is a number of seconds above 0, e.g. 2.5, not "
                             f"{seconds!r}")
        args["seconds"] = secs
    elif needs_seconds(kind):
        what = "alarm" if kind.startswith("alarm_") else "checkpoint's answer"
        raise ValueError(f"{kind} needs seconds: how long each {what} waits")
    if kind in STEP_KINDS:
        if not step:
            raise ValueError(f"{kind} needs the step's name, e.g. compensate_open_viewing_page")
        args["step"] = step
    if kind == "step_crash":
        args["point"] = point
    return args


class FaultDialog(Dialog):
    """Choose a fault kind and its parameters for a target: an object's alarm kinds, a
    native execution's step kinds, or (`aws`) the checkpoint kinds of an execution of
    the AWS SDK's handlers; the chosen kind's description is shown. `values` fills the
    fields (the form opened again after a refusal) and `problem` says what was wrong."""

    def __init__(self, target: str, steps: list[str] | None = None,
                 values: dict[str, str] | None = None, problem: str = "", *,
                 aws: bool = False) -> None:
        super().__init__()
        self.target = target
        self.steps = steps or []
        self.values = values or {}
        self.problem = problem
        self.kinds = kinds_for("object" if "/" in target else "aws" if aws else "execution")

    def compose(self) -> ComposeResult:
        kinds = self.kinds
        v = self.values
        kind = v.get("kind") or ""
        kind = kind if kind in kinds else kinds[0]  # a kind typed before, if it still applies
        with Vertical(classes="dialog"):
            yield Label(f"Inject a fault on {self.target}", classes="question")
            yield Select([(k, k) for k in kinds], value=kind, id="kind", allow_blank=False)
            yield Label(FAULT_KINDS[kind], id="about")
            yield Input(v.get("times", ""), placeholder="times (empty: always)", id="times")
            yield Input(v.get("seconds", ""), placeholder="seconds (the *_delay kinds)",
                        id="seconds")
            yield Input(v.get("step", self.steps[0] if self.steps else ""),
                        placeholder="step name (step kinds), e.g. compensate_open_viewing_page",
                        id="step")
            yield Select([(p, p) for p in ("A", "B", "C")], value=v.get("point", "B"),
                         id="point", allow_blank=False)
            yield Label(self.problem, id="problem", classes="problem")
            with Horizontal(classes="buttons"):
                yield Button("Inject", variant="warning", id="ok")
                yield Button("Cancel", id="cancel")

    @on(Select.Changed, "#kind")
    def _kind_changed(self, event: Select.Changed) -> None:
        self.query_one("#about", Label).update(FAULT_KINDS.get(str(event.value), ""))

    def fields(self) -> dict[str, str]:
        """What the form holds now, as typed."""
        return {"kind": str(self.query_one("#kind", Select).value),
                "times": self.query_one("#times", Input).value,
                "seconds": self.query_one("#seconds", Input).value,
                "step": self.query_one("#step", Input).value,
                "point": str(self.query_one("#point", Select).value)}

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id != "ok":
            self.dismiss(None)
            return
        self.submit()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.submit()

    def submit(self) -> None:
        f = self.fields()
        try:
            args = fault_args(self.target, f["kind"], f["times"], f["seconds"], f["step"],
                              f["point"])
        except ValueError as exc:
            self.query_one("#problem", Label).update(str(exc))  # the fields keep their text
            return
        self.dismiss({"args": args, "fields": f})


def callback_option(callback: dict[str, Any]) -> str:
    """A waiting callback as the form lists it: its name and its whole id."""
    return f"{callback.get('name') or '?'}  {callback['callback_id']}"


class CallbackDialog(Dialog):
    """Complete or fail a waiting callback of an execution by hand (both named in the
    title), or send it a heartbeat. The answer says which op carries it: a success or
    a failure is `complete_callback` (audited by the runtime, with the reason), a
    heartbeat `send_callback`."""

    def __init__(self, execution: str, callbacks: list[dict[str, Any]],
                 chosen: str | None = None) -> None:
        super().__init__()
        self.execution = execution
        self.callbacks = callbacks
        ids = [c["callback_id"] for c in callbacks]
        self.chosen = chosen if chosen in ids else ids[0]

    def compose(self) -> ComposeResult:
        options = [(callback_option(c), c["callback_id"]) for c in self.callbacks]
        with Vertical(classes="dialog"):
            yield Label(f"Complete a callback of {self.execution} by hand", classes="question")
            yield Select(options, value=self.chosen, id="callback", allow_blank=False)
            yield Select([("success: complete it with the payload", "success"),
                          ("failure: fail it with the message", "failure"),
                          ("heartbeat: it is still being worked on", "heartbeat")],
                         value="success", id="outcome", allow_blank=False)
            yield Input(placeholder='payload or message, e.g. go  or  cancel  or  {"ok": true}',
                        id="payload")
            yield Input(placeholder="why (for the audit log; optional)", id="reason")
            with Horizontal(classes="buttons"):
                yield Button("Send", variant="primary", id="ok")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#payload", Input).focus()

    def name_of(self, callback_id: str) -> str:
        return next((str(c.get("name")) for c in self.callbacks
                     if c["callback_id"] == callback_id), callback_id)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        if event.button.id != "ok":
            self.dismiss(None)
            return
        self.submit()

    @on(Input.Submitted)
    def _entered(self, event: Input.Submitted) -> None:
        self.submit()  # Enter in a field sends, as the Send button does

    def submit(self) -> None:
        self.dismiss(callback_args(str(self.query_one("#callback", Select).value),
                                   str(self.query_one("#outcome", Select).value),
                                   self.query_one("#payload", Input).value,
                                   self.query_one("#reason", Input).value))


def callback_args(callback_id: str, outcome: str, text: str, reason: str) -> dict[str, Any]:
    """The op and its arguments for what the callback form holds (pure)."""
    args: dict[str, Any] = {"callback_id": callback_id, "outcome": outcome}
    if outcome == "success":
        args["payload"] = text
    elif outcome == "failure":
        args["error_type"], args["message"] = "OperatorRejected", text
    if outcome == "heartbeat":
        return {"op": "send_callback", **args}
    if reason.strip():
        args["reason"] = reason.strip()
    return {"op": "complete_callback", **args}
