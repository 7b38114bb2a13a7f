"""The execution tools' forms: redrive and fork (each with its replay check), the
replay check on its own, and snooze.

Every form names its target. A redrive or a fork shows the replay check the
console ran just before it: clean, it offers the action; diverged where it
matters, it offers only "Force", in red. A version typed into the form is
checked before anything runs (the form answers `recheck`). A form the server
refused is opened again by its caller with what was typed and the reason.
"""

from __future__ import annotations

import json
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widget import Widget
from textual.widgets import Button, Input, Label, Select, Static

from alarmtop.tui.bulk import parse_duration
from alarmtop.tui.screens.dialogs import Dialog
from alarmtop.tui.tools import (
    Operation,
    fork_needs_force,
    fork_summary,
    kept_by_fork,
    replay_lines,
)

SNOOZE_PRESETS = (("30s", 30_000), ("1m", 60_000), ("5m", 300_000), ("15m", 900_000),
                  ("1h", 3_600_000), ("1d", 86_400_000))


def field(label: str, widget: Widget) -> Horizontal:
    """One labelled line of a form."""
    return Horizontal(Label(label, classes="field-label"), widget, classes="field")


def replay_text(report: dict[str, Any], note: str = "", kept: str = "") -> Text:
    """The replay check in a form: green when clean, red where it diverges; then what a
    fork keeps (`kept`) and a warning (`note`)."""
    lines = replay_lines(report)
    out = Text("Replay check: ", style="bold")
    out.append(lines[0] + "\n", style="bold green" if report.get("clean") else "bold red")
    for line in lines[1:]:
        out.append(line + "\n", style="red" if line.strip().startswith(
            ("first", "recorded", "handler")) else "dim")
    if kept:
        out.append(kept + ("\n" if note else ""))
    if note:
        out.append(note, style="yellow")
    return out


class ReplayDialog(Dialog):
    """What a replay check found, on demand (`v`); nothing runs."""

    def __init__(self, label: str, report: dict[str, Any]) -> None:
        super().__init__()
        self.label, self.report = label, report

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"Replay check of {self.label}", classes="question")
            yield Static(replay_text(self.report), id="replay")
            yield Label("Nothing ran and nothing was written: the recorded log was replayed "
                        "against the handler.", classes="hint")
            with Horizontal(classes="buttons"):
                yield Button("Close", variant="primary", id="close")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None)


class _CheckedDialog(Dialog):
    """A redrive or fork form: version and reason fields, the check's result, buttons."""

    VERB = ""

    def __init__(self, label: str, report: dict[str, Any],
                 values: dict[str, str] | None = None, problem: str = "") -> None:
        super().__init__()
        self.label, self.report = label, report
        self.values = values or {}
        self.problem = problem

    def fields(self) -> dict[str, str]:
        return {w.id or "": w.value for w in self.query(Input)}

    def needs_force(self) -> bool:
        return not self.report.get("clean")

    def buttons(self) -> ComposeResult:
        with Horizontal(classes="buttons"):
            yield Button(self.VERB, variant="primary", id="ok")
            yield Button(f"Force {self.VERB.lower()}", variant="error", id="force")
            yield Button("Check again", id="recheck")
            yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.show_buttons()
        # The reason first: a form opened on its button dropped what was typed into it.
        self.query_one("#reason", Input).focus()

    def show_buttons(self) -> None:
        force = self.needs_force()
        self.query_one("#ok", Button).display = not force
        self.query_one("#force", Button).display = force

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "cancel":
            self.dismiss(None)
        elif event.button.id == "recheck":
            self.dismiss({"recheck": True, "fields": self.fields()})
        else:
            self.submit(force=event.button.id == "force")

    def checked_version(self, typed: str) -> bool:
        """Whether the replay check shown was run against the version now typed."""
        return not typed.strip() or typed.strip() == str(self.report.get("version"))

    def submit(self, force: bool) -> None:
        raise NotImplementedError


class RedriveDialog(_CheckedDialog):
    VERB = "Redrive"

    def compose(self) -> ComposeResult:
        v = self.values
        with Vertical(classes="dialog"):
            yield Label(f"Redrive {self.label} from its first failed operation?",
                        classes="question")
            yield Label("Every recorded result before it is kept; it and the operations "
                        "after it run again, and the execution timeout starts anew.",
                        classes="hint")
            # The reason first: it has the focus, and a form scrolled down to it on a
            # small terminal would hide what it is about.
            yield field("reason", Input(v.get("reason", ""), compact=True, id="reason",
                                        placeholder="why (for the audit log)"))
            yield Static(replay_text(self.report, "" if self.report.get("clean") else
                                     "Forcing runs it against a log the handler disagrees "
                                     "with."), id="replay")
            yield field("version", Input(v.get("version", ""), compact=True, id="version",
                                         placeholder=f"pinned: {self.report.get('version')}"))
            yield Label(self.problem, id="problem", classes="problem")
            yield from self.buttons()

    @on(Input.Submitted)
    def _entered(self) -> None:
        self.submit(force=False)

    def submit(self, force: bool) -> None:
        f = self.fields()
        if not self.checked_version(f["version"]):
            self.dismiss({"recheck": True, "fields": f})  # check what will run, first
            return
        if self.needs_force() and not force:
            self.query_one("#problem", Label).update("the replay check does not pass: "
                                                     "Force redrive, or Cancel")
            return
        args: dict[str, Any] = {"force": force}
        if f["version"].strip():
            args["version"] = f["version"].strip()
        if f["reason"].strip():
            args["reason"] = f["reason"].strip()
        self.dismiss({"args": args, "fields": f})


class ForkDialog(_CheckedDialog):
    """Fork from an operation (chosen among the execution's own, so a repeated name is
    never ambiguous), with optional input JSON, new id and version."""

    VERB = "Fork"

    def __init__(self, label: str, report: dict[str, Any], ops: list[Operation],
                 start: str, values: dict[str, str] | None = None, problem: str = "") -> None:
        super().__init__(label, report, values, problem)
        self.ops, self.start = ops, start

    def compose(self) -> ComposeResult:
        v = self.values
        with Vertical(classes="dialog"):
            yield Label(f"Fork {self.label}: a new execution that keeps its recorded results "
                        "before the operation chosen, then runs from it", classes="question")
            yield field("reason", Input(v.get("reason", ""), compact=True, id="reason",
                                        placeholder="why (for the audit log)"))
            yield field("from", Select([(op.label(), op.op_id) for op in self.ops],
                                       value=v.get("from_step", self.start), compact=True,
                                       id="from_step", allow_blank=False))
            yield Static(id="replay")
            yield field("input", Input(v.get("input", ""), compact=True, id="input",
                                       placeholder="JSON (empty: the source's input)"))
            yield field("new id", Input(v.get("new_id", ""), compact=True, id="new_id",
                                        placeholder="empty: made up"))
            yield field("version", Input(v.get("version", ""), compact=True, id="version",
                                         placeholder=f"pinned: {self.report.get('version')}"))
            yield Label(self.problem, id="problem", classes="problem")
            yield from self.buttons()

    def from_step(self) -> str:
        return str(self.query_one("#from_step", Select).value)

    def needs_force(self) -> bool:
        return fork_needs_force(self.report, self.from_step())

    def fields(self) -> dict[str, str]:
        return {**super().fields(), "from_step": self.from_step()}

    def on_mount(self) -> None:
        self._show_check()

    @on(Select.Changed, "#from_step")
    def _moved(self) -> None:
        self._show_check()

    def _show_check(self) -> None:
        div = self.report.get("divergence") or {}
        note = ""
        if div and not self.needs_force():
            note = (f"It diverges at operation {div.get('op_id')}, which the fork runs anew: "
                    "its record is not kept.")
        elif div and kept_by_fork(str(div.get("op_id")), self.from_step()):
            note = (f"The fork keeps operation {div.get('op_id')}'s record: forcing runs it "
                    "against a log the handler disagrees with.")
        kept = fork_summary(self.report, self.ops, self.from_step())
        self.query_one("#replay", Static).update(replay_text(self.report, note, kept))
        self.show_buttons()

    @on(Input.Submitted)
    def _entered(self) -> None:
        self.submit(force=False)

    def submit(self, force: bool) -> None:
        f = self.fields()
        if not self.checked_version(f["version"]):
            self.dismiss({"recheck": True, "fields": f})
            return
        try:
            args = fork_args(f, force)
        except ValueError as exc:
            self.query_one("#problem", Label).update(str(exc))  # the fields keep their text
            return
        if self.needs_force() and not force:
            self.query_one("#problem", Label).update("the replay check does not pass for "
                                                     "this operation: Force fork, or Cancel")
            return
        self.dismiss({"args": args, "fields": f})


def fork_args(fields: dict[str, str], force: bool) -> dict[str, Any]:
    """The `fork` arguments of the form's fields; ValueError saying what is wrong."""
    args: dict[str, Any] = {"from_step": fields["from_step"], "force": force}
    text = fields.get("input", "").strip()
    if text:
        try:
            args["input"] = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"input is JSON, e.g. {{\"eventId\": \"e2\"}}: {exc}") from None
    for name, arg in (("new_id", "new_execution_id"), ("version", "version"),
                      ("reason", "reason")):
        if fields.get(name, "").strip():
            args[arg] = fields[name].strip()
    return args


class SnoozeDialog(Dialog):
    """Move a timer or an alarm later: a preset, or a duration typed (e.g. 90s, 2h30m)."""

    def __init__(self, what: str, due: str) -> None:
        super().__init__()
        self.what, self.due = what, due

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"Snooze {self.what} ({self.due}): move it later by", classes="question")
            with Horizontal(classes="buttons presets"):
                for label, ms in SNOOZE_PRESETS:
                    yield Button(label, id=f"by-{ms}", compact=True)
            yield field("or by", Input(compact=True, id="by", placeholder="e.g. 90s, 2h30m"))
            yield Label("", id="problem", classes="problem")

    def on_mount(self) -> None:
        self.query_one("#by-300000", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(int(str(event.button.id).removeprefix("by-")))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            by = parse_duration(event.value)
        except ValueError as exc:
            self.query_one("#problem", Label).update(str(exc))
            return
        if by <= 0:
            self.query_one("#problem", Label).update("snooze by more than nothing")
            return
        self.dismiss(by)
