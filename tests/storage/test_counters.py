"""The counters kept with the writes equal a recount from the rows: after a random
workload, after a restart, after SIGKILL in the middle of a batch or of a running
runtime, and after the migration that introduced them."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import sqlite3
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

from alarmtop.core import AlarmInfo, DurableObject, RetryPolicy, Runtime, VirtualClock
from alarmtop.core.model.alarm_policy import AlarmRecord, AlarmState
from alarmtop.core.storage.sqlite.counters import tally
from alarmtop.core.storage.sqlite.schema import RUNTIME_MIGRATIONS, migrate
from tests.conftest import START_MS, RuntimeFactory
from tests.storage.counters_worker import random_round
from tests.storage.runtime_db import RuntimeDb

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.storage.counters_worker", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


async def assert_counted(index: RuntimeDb, where: str = "") -> None:
    """The counters equal a recount. A runtime may commit while the recount reads (a
    write its clock does not wait for): a comparison counts only when no commit came
    between reading the counters before and after the recount, and is tried again
    otherwise; a real difference stays and fails."""
    for _ in range(50):
        before, counted = index.counters(), await index.recount()
        if index.counters() is before and before == counted:
            return
        await asyncio.sleep(0.02)
    assert index.counters() == await index.recount(), where


def checked(data: Path) -> dict[str, Any]:
    out = run("check", str(data))
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


async def test_counters_equal_a_recount_after_a_random_workload(tmp_path: Path) -> None:
    index = RuntimeDb(tmp_path / "runtime.sqlite")
    await index.open()
    store = index.log
    rng = random.Random(11)
    try:
        for round_ in range(60):
            await asyncio.gather(*random_round(index, store, rng))
            assert index.counters() == await index.recount(), f"round {round_}"
        counts = index.counters()
        assert counts.alarms and counts.executions and counts.retries  # the workload covers them
        assert counts.stored and counts.known > counts.stored
    finally:
        await index.close()
    again = RuntimeDb(tmp_path / "runtime.sqlite")  # a restart loads them
    await again.open()
    try:
        assert again.counters() == counts == await again.recount()
    finally:
        await again.close()


class Flaky(DurableObject):
    async def arm(self, delay_ms: int) -> None:
        await self.ctx.storage.set_alarm(self.ctx.now_ms() + delay_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        if zlib.crc32(f"{self.ctx.id}/{info.retry_count}".encode()) % 3:
            raise RuntimeError("flaky")


async def test_counters_follow_a_runtime_through_retries_dead_letters_and_rearms(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    """Through the runtime's own paths (attempts, retries, dead letters, re-arms,
    clears), the runtime's counts are the rows' counts at every step."""
    rt = await make_runtime(Flaky, policies={"Flaky": RetryPolicy(max_retries=2,
                                                                  initial_delay_s=1)})
    index = rt.backend.alarm_rows
    for i in range(40):
        await rt.get(Flaky, f"f{i}").arm(100 * (i % 7))
    for second in range(12):
        await clock.advance(1)
        await assert_counted(index, f"at {second + 1} s")
        for dead in await rt.dead_letters(limit=2):
            await rt.rearm(dead.object_class, dead.object_name)
        for dead in (await rt.dead_letters())[:1]:
            await rt.clear_dead_letter(dead.object_class, dead.object_name)
    await assert_counted(index, "at the end")
    near = index.counters().near_exhaustion(lambda cls: rt.policy_for(cls).max_retries)
    assert await rt.near_exhaustion_count() == near


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_counters_survive_a_kill_in_the_middle_of_a_batch(tmp_path: Path, seed: int) -> None:
    """The process dies inside a transaction whose rows are written and not committed:
    after a restart the counters are the recount (the batch left nothing)."""
    data = tmp_path / "data"
    before = run("batches", str(data), str(seed), "25")
    assert before.returncode == -signal.SIGKILL, before.stderr
    state = checked(data)
    assert state["counters"] == state["recount"]
    assert state["rows"] > 0


def test_counters_survive_a_kill_of_a_running_runtime(tmp_path: Path) -> None:
    """Chaos-style: a runtime firing, failing, retrying, dying, re-arming and deleting
    alarms is killed at a random moment, three times over the same data."""
    data = tmp_path / "data"
    rng = random.Random(5)
    for life in range(3):
        proc = subprocess.Popen([sys.executable, "-m", "tests.storage.counters_worker",
                                 "runtime", str(data), str(life)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "started"
        time.sleep(rng.uniform(0.3, 1.2))
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL, err
        state = checked(data)
        assert state["counters"] == state["recount"], f"life {life}"
    assert state["rows"] > 0


def old_database(path: Path) -> None:
    """A runtime database as version 3 left it, with rows of every kind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, RUNTIME_MIGRATIONS[:3])
    conn.executemany(
        "INSERT INTO alarms (object_class, object_name, scheduled_ms, state, retry_count, "
        "next_attempt_ms, due_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [("A", "p1", START_MS, "pending", 0, START_MS + 5, START_MS + 5),
         ("A", "r1", START_MS, "retrying", 3, START_MS + 9, START_MS + 9),
         ("B", "d1", START_MS, "dead", 6, None, None),
         ("B", "s1", START_MS, "pending", 0, START_MS + 1, START_MS + 1)])
    conn.execute("INSERT INTO objects VALUES ('B', 's1', 's1.sqlite', 0), "
                 "('C', 'only-file', 'o.sqlite', 0)")
    conn.execute("INSERT INTO executions (id, name, version, status, created_ms, updated_ms, "
                 "data) VALUES ('e1', 'job', '1', 'needs_human', 0, 0, '{}')")
    conn.close()


async def test_the_migration_counts_what_an_older_file_holds(tmp_path: Path) -> None:
    path = tmp_path / "runtime.sqlite"
    old_database(path)
    index = RuntimeDb(path)
    await index.open()
    try:
        counts = index.counters()
        assert counts == await index.recount()
        assert counts.alarms == {"pending": 2, "retrying": 1, "running": 0, "dead": 1}
        assert dict(counts.retries) == {("A", 3): 1}
        assert dict(counts.executions) == {"needs_human": 1}
        assert (counts.stored, counts.known) == (2, 6)  # 4 alarms + 1 file only + e1
        first = await index.alarm_page(None, 10)
        assert [r.object_name for r in first] == ["d1", "r1", "s1", "p1"]
        await index.write([AlarmRecord("A", "p1", START_MS, AlarmState.RUNNING,
                                       next_attempt_ms=START_MS + 5)])
        assert index.counters() == await index.recount()
    finally:
        await index.close()


async def test_a_runtime_started_twice_keeps_its_counts(data_dir: Path,
                                                        clock: VirtualClock) -> None:
    for life in range(2):
        rt = Runtime(data_dir, clock=clock)
        rt.register(Flaky)
        await rt.start()
        await rt.get(Flaky, f"f{life}").arm(60_000)
        counts = rt.backend.alarm_rows.counters()
        assert counts == await rt.backend.alarm_rows.recount()
        await rt.stop()
    assert counts.alarms["pending"] == 2


async def test_rows_salvaged_from_an_older_file_are_counted_and_ordered(
        tmp_path: Path) -> None:
    """A salvage copies rows in behind the writer's counting (and from a file that had
    no urgency column): the counts and the order are made again from the rows."""
    old = tmp_path / "old.sqlite"
    old_database(old)
    index = RuntimeDb(tmp_path / "runtime.sqlite")
    await index.open()
    try:
        await index.write([AlarmRecord("A", "p1", START_MS, AlarmState.RUNNING,
                                       next_attempt_ms=START_MS)])  # cached, then replaced
        kept = await index.salvage_from(old)
        assert kept["alarms"] == 4
        assert index.counters() == await index.recount()
        assert index.counters().alarms["running"] == 1  # p1 was there: the copy was ignored
        assert [r.object_name for r in await index.alarm_page(None, 10)] == [
            "d1", "r1", "p1", "s1"]
        await index.write([AlarmRecord("A", "p1", START_MS, AlarmState.DEAD, 6)])
        assert index.counters() == await index.recount()
    finally:
        await index.close()


# -- the tally of a batch (pure) -----------------------------------------------------------------


def test_a_batch_tally_adds_what_each_row_became_and_takes_what_it_was() -> None:
    old: dict[tuple[str, str], Any] = {
        ("A", "new"): None, ("A", "up"): ("pending", 0), ("A", "retry"): ("running", 2),
        ("A", "gone"): ("retrying", 3), ("A", "same"): ("dead", 6)}
    new: dict[tuple[str, str], Any] = {
        ("A", "new"): ("pending", 0), ("A", "up"): ("running", 0),
        ("A", "retry"): ("retrying", 3), ("A", "gone"): None, ("A", "same"): ("dead", 6)}
    rows, gained, lost = tally(old, new)
    # pending +1 -1, running +1 -1, retrying +1 -1, (A, 3) +1 -1: only (A, 2) is left
    assert rows == [("retries", "A", 2, -1)]
    assert gained == [("A", "new")] and lost == [("A", "gone")]
    rows, gained, lost = tally({}, {("B", "x"): ("retrying", 1), ("B", "y"): ("dead", 6)})
    assert sorted(rows) == [("alarms", "dead", 0, 1), ("alarms", "retrying", 0, 1),
                            ("retries", "B", 1, 1)]
    assert gained == [("B", "x"), ("B", "y")] and lost == []
