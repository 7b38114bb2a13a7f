"""A batch's counts, what is in flight, and when to say so (pure).

Progress is announced coalesced: a `bulk.progress` event after every `every` items
(about 50 over a whole batch, never fewer items than the throttle) or `min_gap_ms`
of the runtime's clock, whichever comes first, and once more at the end; never one
event per item, so 100,000 items make about fifty events. Each carries the recent
failures with their reasons.
"""

from __future__ import annotations

import collections
from typing import Any

RECENT_FAILURES = 10
MIN_GAP_MS = 250
EVENTS_PER_BATCH = 50


class Progress:
    """Counts of one batch as its runner sees them."""

    def __init__(self, total: int, throttle: int, *, done: int = 0, failed: int = 0,
                 cancelled: int = 0, now_ms: int = 0) -> None:
        self.total = total
        self.throttle = throttle
        self.done, self.failed, self.cancelled = done, failed, cancelled
        self.in_flight = 0
        self.max_in_flight = 0
        self.recent: collections.deque[dict[str, str]] = collections.deque(
            maxlen=RECENT_FAILURES)
        self.every = max(throttle, total // EVENTS_PER_BATCH, 1)
        self._since = 0  # items ended since the last announcement
        self._last_ms = now_ms

    @property
    def left(self) -> int:
        return max(0, self.total - self.done - self.failed - self.cancelled)

    def began(self, n: int) -> None:
        """`n` items are now in flight (the throttle bounds this, `max_in_flight` shows it)."""
        self.in_flight += n
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def ended(self, ok: int = 0, failures: list[tuple[str, str]] | None = None,
              started: int | None = None) -> None:
        """Items that were in flight ended: `ok` of them done, `failures` (key, reason)
        failed; `started` is how many of those had been counted in flight (all of them
        when None)."""
        failures = failures or []
        n = ok + len(failures)
        self.in_flight = max(0, self.in_flight - (n if started is None else started))
        self.done += ok
        self.failed += len(failures)
        for key, error in failures:
            self.recent.append({"key": key, "error": error})
        self._since += n

    def due(self, now_ms: int) -> bool:
        """Whether a progress event is due now."""
        return self._since > 0 and (self._since >= self.every
                                    or now_ms - self._last_ms >= MIN_GAP_MS)

    def announced(self, now_ms: int) -> None:
        self._since, self._last_ms = 0, now_ms

    def counts(self) -> dict[str, Any]:
        return {"total": self.total, "done": self.done, "failed": self.failed,
                "cancelled": self.cancelled, "left": self.left, "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight, "throttle": self.throttle}

    def event(self, batch_id: str, action: str, kind: str) -> dict[str, Any]:
        """The data of a `bulk.progress` event."""
        return {"batch_id": batch_id, "action": action, "kind": kind, **self.counts(),
                "recent_failures": list(self.recent)}


def finished_status(failed: int, cancelled: bool) -> str:
    """How a batch ended: `cancelled` by an operator; `failed` when it ran through and
    some items failed (each with its reason); `done` when every item worked."""
    if cancelled:
        return "cancelled"
    return "failed" if failed else "done"
