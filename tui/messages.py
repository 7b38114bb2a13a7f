"""Messages from the app to the view shown: data flows down, coalesced.

The feed merges frames into `ConsoleState` and the pacer decides when the view
should draw; the app then posts `StateChanged` to the view shown. Frames come
faster than a busy view draws, so a `StateChanged` waiting in the queue is
replaced by the next one (`can_replace`): the view draws once, from the newest
state, which it reads from the message.
"""

from __future__ import annotations

from textual.message import Message

from alarmtop.tui.bulk import Batch
from alarmtop.tui.state import ConsoleState


class StateChanged(Message):
    """The console state changed (or the clock moved): draw from it."""

    def __init__(self, state: ConsoleState) -> None:
        super().__init__()
        self.state = state

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, StateChanged)


class Reload(Message):
    """What the view shows may have changed on the server (an operator action just
    went through): fetch it again now, not on the next frame."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, Reload)


class BulkChanged(Message):
    """A bulk batch moved on (an event of the feed): its progress view shows it."""

    def __init__(self, batch: Batch) -> None:
        super().__init__()
        self.batch = batch

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, BulkChanged) and message.batch.batch_id == \
            self.batch.batch_id
