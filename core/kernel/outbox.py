"""What an event produces for the outside, held until the event's commit has landed.

While an object's event runs, socket sends and closes and events for the bus are
queued in the event's outbox (found through a context variable, so a blocker the
event started queues into it too). Once the commit is durable they leave, in
order; if it fails they are dropped, exactly as if the event had never happened.
Anything sent outside an event, or after its outbox was flushed, leaves at once.

Lifecycle hooks that report what an event made durable wait here too (`after`):
each is called with True once the commit has landed, or False if it failed.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("alarmtop.runtime")
Send = Callable[[], Awaitable[None]]
After = Callable[[bool], None]


Emit = Callable[[str, dict[str, Any]], None]


class Outbox:
    __slots__ = ("after", "closed", "events", "sends")

    def __init__(self) -> None:
        self.sends: list[Send] = []
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.closed = False
        self.after: list[After] | None = None  # made by the first hook that waits

    def hold(self, fn: After) -> None:
        """Call `fn(landed)` once the event's commit landed (True) or failed (False)."""
        if self.after is None:
            self.after = []
        self.after.append(fn)

    def run_after(self, landed: bool) -> None:
        after, self.after = self.after, None
        for fn in after or ():
            try:
                fn(landed)
            except Exception:  # hooks swallow their own errors; this is a last guard
                log.exception("a hook held for an event's commit failed")

    def announce(self, emit: Emit) -> None:
        """The commit landed: announce the event's bus events (it sent nothing)."""
        self.closed = True
        if self.events:
            for type_, data in self.events:
                emit(type_, data)
            self.events.clear()

    async def release(self, emit: Emit) -> None:
        """The commit landed: announce and send what the event produced."""
        self.announce(emit)
        for send in self.sends:
            try:
                await send()
            except Exception:  # one broken client must not keep the rest from theirs
                log.exception("a socket send after an event's commit failed")
        self.sends.clear()

    def drop(self) -> None:
        """The event kept nothing: neither does the outside learn of it."""
        self.closed = True
        self.sends.clear()
        self.events.clear()
        if self.after is not None:
            self.run_after(False)


CURRENT: contextvars.ContextVar[Outbox | None] = contextvars.ContextVar(
    "alarmtop_outbox", default=None)


def current() -> Outbox | None:
    """The outbox of the event this task runs in, if it is still collecting."""
    box = CURRENT.get()
    return box if box is not None and not box.closed else None
