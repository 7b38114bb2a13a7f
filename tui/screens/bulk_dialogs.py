"""Bulk actions' forms: on the marked rows, on a selection by query (previewed: how
many match before anything runs), and a batch's progress (done / failed / left,
each failure with its reason, cancel).

A batch runs on the server (`bulk_start`) and outlives this console: closing the
progress view leaves it running, `B` opens it again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, DataTable, Input, Label, ProgressBar, Select, Static

from alarmtop.tui.bulk import ACTIONS, STATES, Batch, BulkAction, progress_text, selection
from alarmtop.tui.client import CommandError, Disconnected
from alarmtop.tui.formatting import count, first_line
from alarmtop.tui.marks import counted
from alarmtop.tui.messages import BulkChanged
from alarmtop.tui.screens.dialogs import Dialog
from alarmtop.tui.screens.tool_dialogs import field

if TYPE_CHECKING:
    from alarmtop.tui.console import Console

SHOWN_KEYS = 5
POLL_S = 1.0  # the progress view also asks the server, in case events were missed


def keys_text(keys: list[str], total: int | None = None) -> str:
    """"Flaky/a, Flaky/b, … and 12 more"."""
    total = len(keys) if total is None else total
    shown = ", ".join(keys[:SHOWN_KEYS])
    more = total - min(len(keys), SHOWN_KEYS)
    return shown + (f" … and {count(more)} more" if more > 0 else "")


def bulk_args(action: BulkAction, reason: str, note: str, throttle: str) -> dict[str, Any]:
    """The optional `bulk_start` arguments of a form's fields; ValueError naming the
    field that is wrong (pure)."""
    args: dict[str, Any] = {"action": action.action}
    if reason.strip():
        args["reason"] = reason.strip()
    if action.note:
        if not note.strip():
            raise ValueError(f"{action.label.lower()} needs a note saying what was done")
        args["note"] = note.strip()
    if throttle.strip():
        try:
            args["max_in_flight"] = int(throttle)
        except ValueError:
            raise ValueError(f"throttle is a whole number of items in flight at once, not "
                             f"{throttle.strip()!r}") from None
    return args


class ConsoleDialog(Dialog):
    @property
    def console(self) -> Console:
        return self.app  # type: ignore[return-value]


class _BulkForm(ConsoleDialog):
    """The action, reason, note and throttle fields shared by both bulk forms."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def action_fields(self) -> ComposeResult:
        yield field("action", Select([(a.label, a.action) for a in ACTIONS[self.kind]],
                                     value=ACTIONS[self.kind][0].action, allow_blank=False,
                                     compact=True, id="action"))
        yield field("reason", Input(compact=True, id="reason",
                                    placeholder="why (audited with the batch and each item)"))
        yield field("note", Input(compact=True, id="note",
                                  placeholder="resolve only: what was done by hand"))
        yield field("throttle", Input(compact=True, id="throttle",
                                      placeholder="items in flight at once (default 32)"))

    def chosen(self) -> BulkAction:
        value = str(self.query_one("#action", Select).value)
        return next(a for a in ACTIONS[self.kind] if a.action == value)

    def value(self, name: str) -> str:
        return self.query_one(f"#{name}", Input).value

    def args(self) -> dict[str, Any] | None:
        """The form's arguments, or None with the problem shown."""
        try:
            return bulk_args(self.chosen(), self.value("reason"), self.value("note"),
                             self.value("throttle"))
        except ValueError as exc:
            self.problem(str(exc))
            return None

    def problem(self, text: str) -> None:
        self.query_one("#problem", Label).update(text)


class BulkDialog(_BulkForm):
    """An action on the marked rows of one kind; its button says what and how many."""

    def __init__(self, kind: str, keys: list[str]) -> None:
        super().__init__(kind)
        self.keys = keys

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"Act on the {counted(len(self.keys), self.kind)} marked",
                        classes="question")
            yield Label(keys_text(self.keys), id="bulk-keys", classes="hint")
            yield from self.action_fields()
            yield Label("", id="problem", classes="problem")
            with Horizontal(classes="buttons"):
                yield Button("", variant="error", id="ok")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self._label()
        self.query_one("#action", Select).focus()

    @on(Select.Changed, "#action")
    def _label(self) -> None:
        self.query_one("#ok", Button).label = (
            f"{self.chosen().label} {counted(len(self.keys), self.kind)}")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "cancel":
            self.dismiss(None)
            return
        args = self.args()
        if args is not None:
            self.dismiss({**args, "kind": self.kind, "keys": self.keys})


SELECTION_FIELDS = (("state", "state"), ("class", "class"), ("name", "name has"),
                    ("error", "error has"), ("due_from", "due from"), ("due_to", "due to"),
                    ("updated_from", "updated from"), ("updated_to", "updated to"))


class SelectionDialog(_BulkForm):
    """A selection by query: Preview asks the server how many match (and the first of
    them); Run is offered only for the fields previewed, and says how many."""

    def __init__(self, kind: str, now_ms: int) -> None:
        super().__init__(kind)
        self.now_ms = now_ms
        self.previewed: dict[str, Any] | None = None  # the selection the count is for
        self.matched = 0

    def compose(self) -> ComposeResult:
        states = ", ".join(STATES[self.kind])
        with Vertical(classes="dialog"):
            yield Label(f"Select {self.kind} by query, then act on what matches",
                        classes="question")
            for name, label in SELECTION_FIELDS:
                if name.startswith("due") and self.kind != "alarms":
                    continue
                hint = {"state": states, "class": "exactly, e.g. Flaky",
                        "name": "text in the name or id", "error": "text in the last error"
                        }.get(name, "now, -10m (ago), +2h, or 2027-01-15T08:00")
                yield field(label, Input(compact=True, id=f"sel-{name}", placeholder=hint))
            yield from self.action_fields()
            yield Static("Preview to see how many match; nothing runs before Run.",
                         id="preview", classes="hint")
            yield Label("", id="problem", classes="problem")
            with Horizontal(classes="buttons"):
                yield Button("Preview", variant="primary", id="preview-btn")
                yield Button("Run", variant="error", id="ok")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#ok", Button).display = False
        self.query_one("#sel-state", Input).focus()

    def fields(self) -> dict[str, str]:
        return {str(w.id).removeprefix("sel-"): w.value for w in self.query(Input)
                if str(w.id).startswith("sel-")}

    def current(self) -> dict[str, Any] | None:
        try:
            return selection(self.kind, self.fields(), self.now_ms)
        except ValueError as exc:
            self.problem(str(exc))
            return None

    @on(Input.Changed)
    def _changed(self, event: Input.Changed) -> None:
        if str(event.input.id).startswith("sel-") and self.previewed is not None:
            self.previewed = None  # the count shown is for other fields
            self.query_one("#ok", Button).display = False
            self.query_one("#preview", Static).update("changed: preview again")

    @on(Input.Submitted)
    def _entered(self) -> None:
        self.preview()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "cancel":
            self.dismiss(None)
        elif event.button.id == "preview-btn":
            self.preview()
        else:
            self.run()

    @work(exclusive=True, group="preview")
    async def preview(self) -> None:
        sel = self.current()
        if sel is None:
            return
        self.problem("")
        self.query_one("#preview", Static).update("counting…")
        try:
            answer = await self.console.client.request(
                "bulk_preview", selection=sel)
        except (CommandError, Disconnected, TimeoutError) as exc:
            self.query_one("#preview", Static).update("")
            self.problem(f"preview refused: {exc}")
            return
        if sel != self.current():
            return  # typed on meanwhile: its own preview follows
        self.previewed, self.matched = sel, preview_count(answer)
        sample = [str(k) for k in (answer or {}).get("sample") or
                  (answer or {}).get("keys") or []]
        text = Text(matching(self.matched, self.kind), style="bold")
        if sample:
            text.append(f": {keys_text(sample, self.matched)}", style="dim")
        self.query_one("#preview", Static).update(text)
        ok = self.query_one("#ok", Button)
        ok.display = self.matched > 0
        self._label()

    @on(Select.Changed, "#action")
    def _label(self) -> None:
        self.query_one("#ok", Button).label = (
            f"{self.chosen().label} {counted(self.matched, self.kind)}")

    def run(self) -> None:
        if self.previewed is None or self.previewed != self.current():
            self.problem("preview first: nothing runs before you see how many match")
            return
        args = self.args()
        if args is not None:
            self.dismiss({**args, "selection": self.previewed, "matched": self.matched})


def matching(n: int, kind: str) -> str:
    """"1 alarm matches", "3 executions match"."""
    return f"{counted(n, kind)} {'matches' if n == 1 else 'match'}"


def preview_count(answer: Any) -> int:
    """How many a `bulk_preview` answer says match."""
    for name in ("count", "matched", "total"):
        value = (answer or {}).get(name)
        if isinstance(value, int):
            return value
    return 0


class BulkProgressScreen(ConsoleDialog):
    """One batch as it runs: counts and a bar, the failures with their reasons, cancel.
    Events of the feed move it (`BulkChanged`); it also asks the server each second."""

    BINDINGS = [Binding("escape", "cancel", "Close", tooltip="Close (the batch runs on)")]

    def __init__(self, batch: Batch) -> None:
        super().__init__()
        self.watched = batch
        self._failures_shown = 0

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog bulk-progress"):
            yield Label("", id="bulk-title", classes="question")
            yield ProgressBar(total=max(1, self.watched.total), show_eta=False, id="bulk-bar")
            yield Static("", id="bulk-counts")
            failures: DataTable[str] = DataTable(id="bulk-failures", cursor_type="row")
            failures.add_columns("failed item", "reason")
            failures.border_title = "Failures (each with its reason)"
            yield failures
            with Horizontal(classes="buttons"):
                yield Button("Cancel batch", variant="error", id="cancel-batch")
                yield Button("Close", variant="primary", id="close")

    def on_mount(self) -> None:
        self.show(self.watched)
        self.set_interval(POLL_S, self.poll)

    def on_bulk_changed(self, message: BulkChanged) -> None:
        if message.batch.batch_id == self.watched.batch_id:
            self.show(message.batch)

    @work(exclusive=True, group="bulk-poll")
    async def poll(self) -> None:
        if not self.watched.live:
            return
        try:
            data = await self.console.client.request(
                "bulk", batch_id=self.watched.batch_id)
        except (CommandError, Disconnected, TimeoutError):
            return
        batch = self.console.bulks.apply(data) if isinstance(data, dict) else None
        if batch is not None:
            self.show(batch)

    def show(self, batch: Batch) -> None:
        self.watched = batch
        self.query_one("#bulk-title", Label).update(
            f"Bulk {batch.action} on {counted(batch.total, batch.kind or 'items')}: "
            f"{batch.status}")
        bar = self.query_one("#bulk-bar", ProgressBar)
        bar.update(total=max(1, batch.total), progress=batch.finished_items)
        self.query_one("#bulk-counts", Static).update(progress_text(batch))
        table: DataTable[str] = self.query_one("#bulk-failures", DataTable)
        for key, error in batch.failures[self._failures_shown:]:
            table.add_row(key, first_line(error, 90), key=key)
        self._failures_shown = len(batch.failures)
        cancel = self.query_one("#cancel-batch", Button)
        cancel.display = batch.live and not self.console.read_only
        # Asked already: the items in flight are ending; a second ask changes nothing.
        cancel.disabled = batch.status == "cancelling"
        cancel.label = "Cancelling..." if cancel.disabled else "Cancel batch"

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "close":
            self.dismiss(None)
        else:
            self.cancel_batch()

    @work(group="actions")
    async def cancel_batch(self) -> None:
        b = self.watched
        await self.console.perform(
            "bulk_cancel", f"batch {b.batch_id} ({b.action})", {"batch_id": b.batch_id},
            said=lambda _: f"cancelling batch {b.batch_id} ({b.action}): items in flight "
                           "finish, the rest are not started")
