"""On both backends: the runtime database refuses the writes that would correct an
early alarm row, at the time it falls due and while its object wakes again. The
alarm the object replaced never runs; the one it asked for runs once the writes land.

Found by the chaos harness (seed 266014): a row looked at again a second later was
kept in memory with that later time, so the object's next wake took it for a row
behind its intent; the restore that followed was refused too, and the attempt went
ahead on the row as if the object's own database were unreadable.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from alarmtop.core import AlarmInfo, DurableObject, VirtualClock
from alarmtop.core.model.alarm_policy import AlarmRecord, AlarmState
from alarmtop.core.model.due_window import DueWindow
from alarmtop.core.model.object_names import object_file_name
from alarmtop.core.storage.faultpoints import FAULT_POINTS, locked, when
from tests.conftest import START_MS, RuntimeFactory

FIRED: list[int] = []
KEY = ("Mover", "m")


class Mover(DurableObject):
    async def arm(self, at_ms: int) -> None:
        await self.ctx.storage.put("armed", at_ms)
        await self.ctx.storage.set_alarm(at_ms)

    async def alarm_at(self) -> int | None:
        return await self.ctx.storage.get_alarm()

    async def alarm(self, info: AlarmInfo) -> None:
        FIRED.append(info.scheduled_ms - START_MS)


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    FIRED.clear()
    yield
    FAULT_POINTS.disarm()


def writes_row(info: dict[str, Any]) -> bool:
    return KEY in info.get("keys", ())


async def test_a_replaced_alarm_never_runs_while_its_corrections_are_refused(
        make_runtime: RuntimeFactory, clock: VirtualClock,
        caplog: pytest.LogCaptureFixture) -> None:
    rt = await make_runtime(Mover)
    m = rt.get(Mover, "m")
    await m.arm(START_MS + 1000)
    # Moved later; the index write after the object's commit is refused: the row
    # stays early (at 1000), the object's own database says 1500.
    FAULT_POINTS.arm("index.commit.before", when(writes_row, locked))
    await m.arm(START_MS + 1500)
    assert await m.alarm_at() == START_MS + 1500
    await rt.host.hibernate(KEY)
    # Another process holds the runtime database for a while: the correction at 1000
    # is refused and looked at again a second later, when the object wakes afresh
    # from its database; its next write of the row is refused too.
    FAULT_POINTS.arm("index.commit.before", when(writes_row, locked, times=2))
    caplog.set_level(logging.ERROR, logger="alarmtop.runtime")
    for _ in range(4):
        await clock.advance(1.0)
        await rt.host.hibernate(KEY)
    # The alarm at 1000 was replaced: it never runs. The one the object asked for
    # runs once, when the index agrees. And nothing says the index lost writes.
    assert FIRED == [1500]
    assert await rt.alarm(Mover, "m") is None
    assert not any("index had" in r.getMessage() for r in caplog.records), caplog.text


def record(due: int) -> AlarmRecord:
    return AlarmRecord(*KEY, scheduled_ms=due, state=AlarmState.PENDING,
                       next_attempt_ms=due, gen=1, in_file=True)


def test_a_deferred_record_pops_later_unchanged() -> None:
    w = DueWindow()
    w.load([record(100)], True, set())
    rec = w.pop_one(100)
    assert rec is not None
    assert w.defer(rec, 1100)
    assert w.records[KEY] is rec  # readers see the row as it is: due at 100
    assert w.pop_one(1099) is None
    assert w.pop_one(1100) is rec
    w.put(record(200))  # the alarm changed meanwhile: the old state is not deferred
    assert not w.defer(rec, 2000)
    assert w.pop_one(200) is not None


@pytest.mark.sqlite_only  # damages the object's SQLite file by hand
async def test_a_row_behind_its_intent_that_cannot_be_restored_runs_nothing(
        make_runtime: RuntimeFactory, clock: VirtualClock, data_dir: Path) -> None:
    """The index row is later than the object's own intent (damage: the runtime
    database lost a write) and, when it falls due, the restore is refused: the
    object's database is sound, so the row's alarm is not run in its place. The
    restore lands a second later and the alarm the object asked for runs."""
    rt = await make_runtime(Mover)
    await rt.get(Mover, "m").arm(START_MS + 1000)
    await rt.host.hibernate(KEY)
    with sqlite3.connect(data_dir / "objects" / "Mover" / object_file_name("m")) as conn:
        conn.execute("UPDATE _alarmtop_alarm SET gen = 5, at_ms = ?", (START_MS + 500,))
    FAULT_POINTS.arm("index.commit.before", when(writes_row, locked))
    for _ in range(3):
        await clock.advance(1.0)
    assert FIRED == [500]
    assert await rt.alarm(Mover, "m") is None
