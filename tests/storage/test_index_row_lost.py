"""On both backends: an index row lost while the object's own storage still holds
its intent comes back when the object wakes, said in the log; `get_alarm()` agrees
with the object's storage and the alarm fires. The decisions themselves are pure."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import asyncpg
import pytest

from alarmtop.core import VirtualClock
from alarmtop.core.model import alarm_intent
from alarmtop.core.model.alarm_intent import Intent
from alarmtop.core.model.alarm_policy import AlarmRecord, AlarmState
from tests.conftest import START_MS, RuntimeFactory
from tests.storage.wal_worker import Keeper

KEY = ("Keeper", "k")


async def lose_the_rows(backend_kind: str, data_dir: Path, request: pytest.FixtureRequest
                        ) -> None:
    if backend_kind == "sqlite":
        with sqlite3.connect(data_dir / "runtime.sqlite") as conn:
            conn.execute("DELETE FROM alarms")
        return
    conn = await asyncpg.connect(request.getfixturevalue("pg_dsn"))
    try:
        await conn.execute("DELETE FROM alarmtop.alarms")
    finally:
        await conn.close()


async def test_the_row_comes_back_when_the_object_wakes(
        make_runtime: RuntimeFactory, backend_kind: str, data_dir: Path, clock: VirtualClock,
        request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture) -> None:
    rt = await make_runtime(Keeper)
    await rt.get(Keeper, "k").arm(START_MS + 60_000)
    await rt.stop()
    await lose_the_rows(backend_kind, data_dir, request)
    rt2 = await make_runtime(Keeper)
    assert await rt2.alarm(Keeper, "k") is None
    caplog.set_level(logging.ERROR, logger="alarmtop.runtime")
    assert await rt2.get(Keeper, "k").alarm_at() == START_MS + 60_000
    assert any("the alarm index had lost Keeper/k's alarm" in r.getMessage()
               for r in caplog.records), caplog.text
    await clock.advance(61)
    assert await rt2.get(Keeper, "k").fired() == 1
    assert await rt2.alarm(Keeper, "k") is None


def rec(gen: int, at: int | None = 100, state: AlarmState = AlarmState.PENDING,
        hint: tuple[int, int] | None = None, paused: int | None = None) -> AlarmRecord:
    r = AlarmRecord(*KEY, scheduled_ms=at or 0, state=state, next_attempt_ms=at, gen=gen,
                    in_file=True, paused_ms=paused)
    if hint is not None:
        r = r._replace(hint_ms=hint[0], hint_gen=hint[1])
    return r


def test_when_the_index_is_behind_the_intent() -> None:
    behind = alarm_intent.index_behind
    assert behind(Intent(3, 100), None)  # lost
    assert not behind(Intent(3, None), None)  # no alarm asked for
    assert not behind(Intent(3, 100), rec(3))  # its own row (a retry, a dead letter...)
    assert not behind(Intent(3, 100), rec(3, state=AlarmState.DEAD))
    assert not behind(Intent(3, 100), rec(4, 500))  # written ahead of a commit
    assert not behind(Intent(3, 100), rec(2, 50))  # early: reconciled when due
    assert not behind(Intent(3, 100), rec(2, 500, hint=(100, 3)))  # the hint wakes it
    assert behind(Intent(3, 100), rec(2, 500))  # it would fire late
    assert behind(Intent(3, 100), rec(2, state=AlarmState.DEAD))  # or never
    assert behind(Intent(3, 100), rec(2, 50, paused=1))


def test_a_restored_row_is_the_intents_and_keeps_a_pause() -> None:
    tr = alarm_intent.restore(KEY, Intent(3, 100), rec(2, paused=7))
    assert tr.record is not None
    assert (tr.record.gen, tr.record.next_attempt_ms, tr.record.paused_ms) == (3, 100, 7)
    assert tr.record.in_file and tr.events[0].type == "alarm.restored"
    assert tr.events[0].data["lost"] is False


def test_a_consumed_intent_takes_a_generation_no_row_has_seen() -> None:
    assert alarm_intent.consumed(Intent(3, None), None) is None
    assert alarm_intent.consumed(Intent(3, 100), None) == Intent(4, None)
    assert alarm_intent.consumed(Intent(3, 100), rec(3, hint=(50, 6))) == Intent(7, None)
