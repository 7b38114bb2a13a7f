"""The in-memory part of the alarm index: only the alarms due soonest.

All alarms live in the storage's alarm index; the window holds those due at or
before `horizon_ms` (all of them when `horizon_ms` is infinite) so the scheduler
can pick the next due alarm without a query. Pure bookkeeping: no I/O.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Callable, Iterable

from alarmtop.core.model.alarm_policy import AlarmKey, AlarmRecord, AlarmState


class DueWindow:
    """Alarms due up to `horizon_ms`, ordered by their next attempt."""

    def __init__(self, capacity: int = 10_000) -> None:
        if capacity < 4:
            raise ValueError("DueWindow capacity must be at least 4")
        self.capacity = capacity
        self.records: dict[AlarmKey, AlarmRecord] = {}
        self.horizon_ms: float = -math.inf  # nothing loaded yet
        self._heap: list[tuple[int, int, AlarmKey]] = []
        self._entry: dict[AlarmKey, int] = {}
        self._seq = itertools.count()
        self._shrink_at = 2 * capacity  # see shrink()
        # Set when shrink() cut below a tie (see there): the window then holds less than
        # a quarter of its capacity on purpose, and refills only once it runs dry.
        self._cut_below_tie = False

    def __len__(self) -> int:
        return len(self.records)

    def covers(self, due_ms: int | None) -> bool:
        return due_ms is not None and due_ms <= self.horizon_ms

    def put(self, rec: AlarmRecord) -> None:
        """Record the latest state of an alarm; keep it only if the window covers it."""
        key = rec.key
        if rec.state is AlarmState.RUNNING:
            self.records[key] = rec  # in flight: kept, never popped again
            self._entry.pop(key, None)
            return
        if not self.covers(rec.due_ms):
            self.remove(key)
            return
        self.records[key] = rec
        seq = next(self._seq)
        self._entry[key] = seq
        heapq.heappush(self._heap, (rec.due_ms or 0, seq, key))

    def defer(self, rec: AlarmRecord, due_ms: int) -> bool:
        """Pop `rec` again at `due_ms`, its record unchanged: its row did not move, only
        this window looks later (readers of `records` see the row as it is). False when
        the window holds another state of the alarm by now."""
        key = rec.key
        if self.records.get(key) is not rec or rec.state is AlarmState.RUNNING:
            return False
        seq = next(self._seq)
        self._entry[key] = seq
        heapq.heappush(self._heap, (due_ms, seq, key))
        return True

    def remove(self, key: AlarmKey) -> None:
        self.records.pop(key, None)
        self._entry.pop(key, None)

    def _clean_top(self) -> None:
        heap = self._heap
        while heap and self._entry.get(heap[0][2]) != heap[0][1]:
            heapq.heappop(heap)

    def next_due_ms(self) -> int | None:
        self._clean_top()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int, limit: int) -> list[AlarmRecord]:
        """Take up to `limit` alarms due at or before `now_ms`, soonest first."""
        out: list[AlarmRecord] = []
        while len(out) < limit:
            rec = self.pop_one(now_ms)
            if rec is None:
                break
            out.append(rec)
        return out

    def pop_one(self, now_ms: int) -> AlarmRecord | None:
        """Take the soonest alarm if it is due at or before `now_ms`."""
        heap, entry = self._heap, self._entry
        while heap:
            due, seq, key = heap[0]
            if entry.get(key) != seq:
                heapq.heappop(heap)  # superseded or removed since it was pushed
                continue
            if due > now_ms:
                return None
            heapq.heappop(heap)
            del entry[key]
            return self.records[key]
        return None

    def drop(self, which: Callable[[AlarmKey], bool]) -> None:
        """Forget the alarms whose key `which` picks (not those in flight)."""
        for key in [k for k, r in self.records.items()
                    if r.state is not AlarmState.RUNNING and which(k)]:
            self.remove(key)

    def unload(self) -> None:
        """Forget what was loaded (not what is in flight): the next refill starts over."""
        self.drop(lambda key: True)
        self.horizon_ms = -math.inf

    def needs_refill(self) -> bool:
        return (self.horizon_ms != math.inf and not self._cut_below_tie
                and len(self.records) < self.capacity // 4)

    def load(self, rows: Iterable[AlarmRecord], complete: bool, skip: set[AlarmKey]) -> None:
        """Add a page read from the index (rows due after the horizon, soonest first).

        `complete` says the page reached the end of the index. Keys in `skip` changed
        while the page was read; their in-memory state is newer and is kept.
        """
        last: int | None = None
        self._cut_below_tie = False
        rows = list(rows)
        if rows:
            last = rows[-1].due_ms
        self.horizon_ms = math.inf if complete or last is None else last
        for rec in rows:
            if rec.key not in skip:
                self.put(rec)

    def shrink(self) -> None:
        """Forget far-future alarms when the window grew past twice its capacity."""
        n = len(self.records)
        if n <= 2 * self.capacity:
            self._shrink_at = 2 * self.capacity
            return
        if n <= self._shrink_at:
            # A pass at a smaller size could not shrink (the alarms tie on one due time,
            # say, as in a burst): sorting again on every call would cost O(n log n)
            # per fired alarm. Try again once the window has doubled.
            return
        dues = sorted(r.due_ms for r in self.records.values()
                      if r.due_ms is not None and r.state is not AlarmState.RUNNING)
        if len(dues) > self.capacity:
            cut = dues[self.capacity - 1]
            below = bisect.bisect_left(dues, cut)
            if below and bisect.bisect_right(dues, cut) - below > self.capacity:
                # Many alarms tie on the cut (a bulk re-arm to one time, say): keeping
                # them would keep the window as large as the tie. Keep only what is due
                # before it; those tied are read again when the window runs dry.
                cut -= 1
                self._cut_below_tie = True
            self.horizon_ms = cut
            for key in [k for k, r in self.records.items()
                        if r.state is not AlarmState.RUNNING and (r.due_ms or 0) > cut]:
                self.remove(key)
        self._shrink_at = max(2 * self.capacity, 2 * len(self.records))
