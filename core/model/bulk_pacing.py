"""How many alarm items a bulk batch writes next, so that it fits between alarms.

A batch shares the runtime's one writer with the alarms it does not touch: an
alarm that falls due while a group's transaction is being written waits for that
transaction before its attempt is recorded. So the runner sizes each group to the
gap before the next due alarm, from how long its groups have taken per item, and
waits (boundedly) while alarms run or no useful gap is open. Pure: the service
feeds it the scheduler's state and its own timings.
"""

from __future__ import annotations

MIN_GROUP = 20  # a smaller group costs more per item than the gap it would fill
MAX_WAIT_MS = 10.0  # a steady stream of alarms delays a group no longer than this
# How long a group may take after waiting MAX_WAIT_MS for a gap: under a steady
# stream of alarms (no gap ever fits) the batch keeps about a quarter of the writer,
# and an alarm waits for at most one such group.
STEADY_GROUP_MS = 6.0
FIRST_PER_ITEM_MS = 0.05  # a guess until a group has been timed
SAFETY = 0.7  # of the gap, leaving room for the alarm's own commit
SMOOTH = 0.3  # weight of the newest timing


class GapPacer:
    """Group sizes for one batch runner (see the module docstring)."""

    def __init__(self, largest: int) -> None:
        self.largest = max(1, largest)
        self.per_item_ms = FIRST_PER_ITEM_MS

    def size(self, now_ms: float, next_due_ms: float | None, running: int,
             waited_ms: float) -> int | None:
        """The next group's size, or None to wait a little and ask again."""
        smallest = min(MIN_GROUP, self.largest)
        if waited_ms >= MAX_WAIT_MS:
            if not running and next_due_ms is None:
                return self.largest
            return min(self.largest, max(smallest, int(STEADY_GROUP_MS / self.per_item_ms)))
        if running:
            return None
        if next_due_ms is None:
            return self.largest
        gap = next_due_ms - now_ms
        fits = int(gap * SAFETY / self.per_item_ms)
        if fits < smallest:
            return None
        return min(fits, self.largest)

    def observe(self, items: int, took_ms: float) -> None:
        """A group of `items` took `took_ms` from its first read to its commit."""
        if items > 0 and took_ms >= 0:
            self.per_item_ms += SMOOTH * (took_ms / items - self.per_item_ms)
