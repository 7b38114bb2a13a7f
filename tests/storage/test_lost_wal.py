"""Losing or damaging runtime.sqlite-wal (a backup that copied only `*.sqlite`) no
longer drops acknowledged alarms: the start after an unclean stop checks the index
against the objects' own files and restores what it lost, saying so; an alarm that
was carried out, or a dead letter an operator cleared, stays gone. An object whose
index row was lost gets it back when it wakes, and `get_alarm()` agrees with its
file."""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from alarmtop.core import VirtualClock
from tests.conftest import START_MS, RuntimeFactory
from tests.storage.wal_worker import ALARMS, LATER_MS, Keeper, build

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.sqlite_only  # the runtime database's own files


def crashed_with_alarms_in_the_log(data: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "tests.storage.wal_worker", str(data)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert "READY" in done.stdout, done.stderr
    assert (data / "runtime.sqlite-wal").stat().st_size > 0


async def after_restart(data: Path, caplog: pytest.LogCaptureFixture) -> list[int]:
    clock = VirtualClock(START_MS + 3000)
    rt = build(str(data), clock)
    caplog.set_level(logging.INFO, logger="alarmtop.storage")
    async with rt:
        assert rt.backend.restored is not None  # type: ignore[attr-defined]
        assert rt.backend.restored["restored"] == ALARMS  # type: ignore[attr-defined]
        for i in range(ALARMS):
            assert await rt.get(Keeper, f"k{i:02d}").alarm_at() == LATER_MS
        assert await rt.get(Keeper, "k18").alarm_at() is None  # carried out before
        assert await rt.get(Keeper, "k19").alarm_at() is None  # cleared by an operator
        await clock.advance(3600)
        fired = [await rt.get(Keeper, f"k{i:02d}").fired() for i in range(20)]
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(f"had lost {ALARMS} alarm(s)" in m and "restored from the files" in m
               for m in logged), logged
    return fired


async def test_a_lost_wal_file_loses_no_alarm(tmp_path: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "data"
    crashed_with_alarms_in_the_log(data)
    for suffix in ("-wal", "-shm"):  # the backup copied only *.sqlite
        (data / f"runtime.sqlite{suffix}").unlink()
    fired = await after_restart(data, caplog)
    assert fired == [1] * ALARMS + [1, 0], fired


async def test_a_damaged_wal_file_loses_no_alarm(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "data"
    crashed_with_alarms_in_the_log(data)
    wal = data / "runtime.sqlite-wal"
    raw = bytearray(wal.read_bytes())
    for i in range(40, len(raw), 512):  # every frame's header and data, past the file's
        raw[i] ^= 0xFF
    wal.write_bytes(bytes(raw))
    fired = await after_restart(data, caplog)
    assert fired == [1] * ALARMS + [1, 0], fired


async def test_a_clean_stop_is_not_checked_again(make_runtime: RuntimeFactory,
                                                 data_dir: Path) -> None:
    rt = await make_runtime(Keeper)
    await rt.get(Keeper, "k00").arm(LATER_MS)
    await rt.stop()
    rt2 = await make_runtime(Keeper)
    assert rt2.backend.restored is None  # type: ignore[attr-defined]
    assert await rt2.get(Keeper, "k00").alarm_at() == LATER_MS


async def test_a_row_lost_alone_comes_back_when_the_object_wakes(
        make_runtime: RuntimeFactory, data_dir: Path, clock: VirtualClock,
        caplog: pytest.LogCaptureFixture) -> None:
    rt = await make_runtime(Keeper)
    await rt.get(Keeper, "k00").arm(START_MS + 60_000)
    await rt.stop()
    with sqlite3.connect(data_dir / "runtime.sqlite") as conn:  # the index loses the row
        conn.execute("DELETE FROM alarms")
    rt2 = await make_runtime(Keeper)
    assert rt2.backend.restored is None  # type: ignore[attr-defined]  # a clean stop
    assert await rt2.alarm(Keeper, "k00") is None
    caplog.set_level(logging.ERROR, logger="alarmtop.runtime")
    assert await rt2.get(Keeper, "k00").alarm_at() == START_MS + 60_000  # as its file says
    assert any("the alarm index had lost Keeper/k00's alarm" in r.getMessage()
               for r in caplog.records), caplog.text
    status = await rt2.alarm(Keeper, "k00")
    assert status is not None and status.next_attempt_ms == START_MS + 60_000
    await clock.advance(61)
    assert await rt2.get(Keeper, "k00").fired() == 1


async def test_an_alarm_carried_out_is_done_in_the_objects_file(
        make_runtime: RuntimeFactory, data_dir: Path, clock: VirtualClock) -> None:
    rt = await make_runtime(Keeper)
    await rt.get(Keeper, "k00").arm(START_MS + 1000)
    await clock.advance(2)
    assert await rt.get(Keeper, "k00").fired() == 1
    await rt.stop()
    path = next((data_dir / "objects" / "Keeper").glob("*.sqlite"))
    with sqlite3.connect(path) as conn:
        gen, at_ms = conn.execute("SELECT gen, at_ms FROM _alarmtop_alarm").fetchone()
    assert at_ms is None and gen >= 2
