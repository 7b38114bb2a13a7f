"""Found by the chaos harness (seed 3, 200 kills): an index row left by an event that
never committed takes the generation of the next event that does, and then fires as
if it were that event's alarm; the acknowledged alarm is lost.

An event that sets an alarm where none is writes the fresh record to the index
first (generation = the committed intent's + 1), then commits the object. When the
object's commit does not land and the record is not taken back (a death between
the two writes, or a failed undo), the row is left with generation g+1 while the
intent stays at g: `intent.reconcile` drops it as "never committed" because its
generation is newer. But the next event that changes the alarm also takes g+1.
If that event moves the alarm later, its index write comes after its commit; when
that write fails (a lock, a death), the index keeps the stale row with the same
generation as the intent, `reconcile` takes it for the intent's own record, runs
the handler at the stale time with the stale `scheduled_ms`, and its success
deletes the row: the alarm the object committed (and the caller was told was set)
never fires.

In the chaos run: round 165 set ChaosAlarm/a1 for T+896 and died before the
object's commit (the fresh row had landed); round 167 set it for T+968, acknowledged,
while a lock on runtime.sqlite failed the index write after the commit; the row for
T+896 fired (three times: the rounds kept dying), and T+968 never did.

The test below makes the same two events with fault points instead of a death and
a lock: a failed object commit whose undo also fails, then a later set whose index
write after the commit fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from alarmtop.core import AlarmInfo, DurableObject, VirtualClock
from alarmtop.core.model.errors import StorageError
from alarmtop.core.storage.faultpoints import FAULT_POINTS, locked, when
from tests.conftest import START_MS, RuntimeFactory

RUNS: list[tuple[int, int]] = []  # (ms after START_MS when it ran, info.scheduled_ms)
KEY = ("Timer", "t1")
STALE_AT, LATER_AT = 10_000, 20_000


class Timer(DurableObject):
    async def touch(self) -> None:
        await self.ctx.storage.put("v", 1)  # the object has a database: its intent is there

    async def set_at(self, at: int) -> None:
        await self.ctx.storage.set_alarm(START_MS + at)

    async def alarm(self, info: AlarmInfo) -> None:
        RUNS.append((self.ctx.now_ms() - START_MS, info.scheduled_ms - START_MS))


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    RUNS.clear()
    yield
    FAULT_POINTS.disarm()


def for_key(info: dict[str, Any]) -> bool:
    return KEY in info.get("keys", [info.get("key")])


async def test_a_row_never_committed_does_not_pass_for_the_next_intent(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    rt = await make_runtime(Timer)
    timer = rt.get(Timer, "t1")
    await timer.touch()

    # 1. Set where none is: the fresh row (generation 1) is written first; the object's
    #    commit fails and so does the undo of the row, so it stays; the intent stays 0.
    index_hits = [0]

    def second_index_write(info: dict[str, Any]) -> None:
        if for_key(info):
            index_hits[0] += 1
            if index_hits[0] == 2:  # the first is the fresh row, the second its undo
                locked(info)

    FAULT_POINTS.arm("object.commit.before", when(for_key, locked))
    FAULT_POINTS.arm("index.commit.before", second_index_write)
    with pytest.raises(StorageError):
        await timer.set_at(STALE_AT)
    FAULT_POINTS.disarm()
    stale = await rt.alarm("Timer", "t1")
    assert stale is not None and stale.scheduled_ms == START_MS + STALE_AT  # the setup holds

    # 2. Set later: committed (generation 1 again), acknowledged; the index write after
    #    the commit fails, so the stale row stays (early, to be reconciled when due).
    FAULT_POINTS.arm("index.commit.before", when(for_key, locked))
    await timer.set_at(LATER_AT)
    FAULT_POINTS.disarm()

    await clock.advance(60)
    # The committed alarm runs once, for its own time; nothing runs for the stale one.
    assert RUNS == [(LATER_AT, LATER_AT)]
