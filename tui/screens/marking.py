"""Marking rows and acting on many at once, as keys of every list view.

`space` marks or unmarks the row under the cursor (by its identity: the mark stays
on its object while rows move and page away) and moves down; `u` clears every
mark. `b` acts on the marked rows of one kind (alarms or executions), `m`
selects by query, shows how many match and acts on them; both ask first and
then show the batch's progress, which `B` opens again. The marked count shows in
the view's title and the footer. A viewer may mark and watch, not act.
"""

from __future__ import annotations

from typing import Any, ClassVar

from textual import work
from textual.binding import Binding

from alarmtop.tui.bulk import action_of, batch_id_of
from alarmtop.tui.marks import TooManyMarks, counted
from alarmtop.tui.screens.base import ConsoleScreen
from alarmtop.tui.screens.bulk_dialogs import BulkDialog, BulkProgressScreen, SelectionDialog

MARK_ACTIONS = frozenset({"mark", "unmark_all", "bulk", "select_query", "batches"})


class MarkingMixin(ConsoleScreen):
    MARK_BINDINGS: ClassVar[list[Binding]] = [
        Binding("space", "mark", "Mark", tooltip="Mark or unmark the row (by identity) for "
                "a bulk action", id="mark"),
        Binding("u", "unmark_all", "Unmark", tooltip="Clear every mark", id="unmark",
                show=False),
        Binding("b", "bulk", "Bulk", tooltip="Act on the marked rows (asks first, then "
                "shows progress)", id="bulk"),
        Binding("m", "select_query", "Select", tooltip="Select rows by query: see how many "
                "match, then act on them", id="select-query"),
        Binding("B", "batches", "Batches", tooltip="The progress of the latest bulk action",
                id="batches", show=False),
    ]

    def mark_kind(self) -> str | None:
        """What a mark in this view marks (alarms or executions); None: no marks here."""
        return None

    def mark_target(self) -> tuple[str, str] | None:
        """(kind, key) of the row under the cursor."""
        return None

    def marks_badge(self) -> str:
        return self.console.marks.summary()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in MARK_ACTIONS:
            marks = self.console.marks
            if action == "mark":
                return self.mark_target() is not None
            if action == "unmark_all":
                return len(marks) > 0
            if action == "bulk":
                return not self.console.read_only and len(marks) > 0
            if action == "select_query":
                return not self.console.read_only and self.mark_kind() is not None
            return True
        return super().check_action(action, parameters)

    def why_not(self, action: str) -> str:
        if action == "bulk" and not self.console.marks:
            return "nothing is marked: mark rows with space first, or select by query (m)"
        if action == "select_query" and self.mark_kind() is None:
            return "select by query works on alarms and executions (views 1-5 and 9)"
        return super().why_not(action)

    def action_mark(self) -> None:
        target = self.mark_target()
        if target is None:
            return
        kind, key = target
        try:
            on = self.console.marks.toggle(kind, key)
        except TooManyMarks as exc:
            self.say(str(exc), "warning")
            return
        self.say(f"{'marked' if on else 'unmarked'} {key} ({self.marks_badge() or 'none marked'})")
        self.after_mark()
        self.redraw()

    def after_mark(self) -> None:
        """Move on after a mark (list views: the cursor goes down a row)."""

    def action_unmark_all(self) -> None:
        n = self.console.marks.clear()
        self.say(f"unmarked {n:,}")
        self.redraw()

    @work(group="actions")
    async def action_bulk(self) -> None:
        marks = self.console.marks
        mine = self.mark_kind()
        kinds = marks.kinds()
        kind = mine if mine in kinds else (kinds[0] if kinds else None)
        if kind is None:
            self.say("mark rows with space first, or select by query (m)", "warning")
            return
        keys = marks.keys(kind)
        answer = await self.app.push_screen_wait(BulkDialog(kind, keys))
        if answer:
            if await self.start_bulk(answer, counted(len(keys), kind) + " marked"):
                marks.discard(kind, keys)
                self.redraw()

    @work(group="actions")
    async def action_select_query(self) -> None:
        kind = self.mark_kind()
        if kind is None:
            return
        answer = await self.app.push_screen_wait(SelectionDialog(kind,
                                                                 self.console.state.now_ms))
        if answer:
            matched = answer.pop("matched")
            await self.start_bulk(answer, f"{counted(matched, kind)} selected by query")

    async def start_bulk(self, args: dict[str, Any], what: str) -> bool:
        """Start a batch (`bulk_start`) and show its progress; whether it started.

        Each start carries a client token. When no answer came (the connection dropped,
        or the deadline passed while the server went on), the batch may have started:
        the same start sent again carries the same token, and the server answers with
        that batch instead of starting a second one over the same items."""
        action = action_of(args["kind"] if "kind" in args else args["selection"]["kind"],
                           args["action"])
        token = self.console.bulks.start_token(args)
        outcome = await self.console.perform(
            "bulk_start", what, {**args, "token": token},
            said=lambda d: f"started {action.label.lower()} on {what}" + (
                f" as batch {bid}" if (bid := batch_id_of(d)) else ""))
        if outcome.ok or outcome.refused:
            self.console.bulks.start_answered(args)
        if not outcome.ok:
            return False
        data = dict(outcome.data or {})
        data.setdefault("action", args["action"])
        data.setdefault("kind", action_kind(args))
        batch = self.console.bulks.apply(data)
        if batch is not None:
            self.app.push_screen(BulkProgressScreen(batch))
        return True

    @work(group="actions")
    async def action_batches(self) -> None:
        batch = self.console.bulks.latest()
        if batch is None:
            answer = await self.console.fetch("bulks", limit=1)
            rows = (answer or {}).get("rows") or (answer if isinstance(answer, list) else [])
            batch = self.console.bulks.apply(rows[0]) if rows else None
        if batch is None:
            self.say("no bulk action yet: mark rows (space) and press b, or select by "
                     "query (m)", "warning")
            return
        self.app.push_screen(BulkProgressScreen(batch))


def action_kind(args: dict[str, Any]) -> str:
    return str(args.get("kind") or (args.get("selection") or {}).get("kind") or "?")
