"""SqliteDatabase and the migrations, on real SQLite files in `tmp_path`."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from alarmtop.core.model.alarm_policy import AlarmRecord, AlarmState, Attempt
from alarmtop.core.model.errors import StorageError
from alarmtop.core.storage.sqlite.schema import RUNTIME_MIGRATIONS, migrate
from tests.storage.runtime_db import RuntimeDb


def rec(name: str, due: int | None, state: AlarmState = AlarmState.PENDING,
        retry_count: int = 0, cls: str = "C") -> AlarmRecord:
    """An alarm of object `cls/name` next due at `due`."""
    return AlarmRecord(cls, name, due or 0, state=state, retry_count=retry_count,
                       next_attempt_ms=due)


def names(records: list[AlarmRecord]) -> list[str]:
    return [r.object_name for r in records]


async def spin(rounds: int = 20) -> None:
    """Let the event loop run what is ready, without any timer."""
    for _ in range(rounds):
        await asyncio.sleep(0)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "runtime.sqlite"


@pytest.fixture
async def index(db_path: Path) -> AsyncIterator[RuntimeDb]:
    idx = RuntimeDb(db_path)
    await idx.open()
    yield idx
    await idx.close()


async def reopened(path: Path) -> RuntimeDb:
    idx = RuntimeDb(path)
    await idx.open()
    return idx


def write_garbage(path: Path) -> None:
    """Put bytes that are not an SQLite database where the index expects one."""
    path.parent.mkdir(parents=True)
    path.write_bytes(b"this is not a database, just some garbage bytes\x00\xff" * 200)


def write_schema_version(path: Path, version: int) -> None:
    """Create a database that claims to be at schema `version`."""
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE _alarmtop_schema (version INTEGER NOT NULL)")
    conn.execute("INSERT INTO _alarmtop_schema VALUES (?)", (version,))
    conn.commit()
    conn.close()


def schema_version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT version FROM _alarmtop_schema").fetchone()[0])
    finally:
        conn.close()


# -- opening ---------------------------------------------------------------------------------


async def test_open_creates_the_schema_with_a_version_row(db_path: Path) -> None:
    idx = await reopened(db_path)
    assert await idx.counts() == {"pending": 0, "running": 0, "retrying": 0, "dead": 0}
    await idx.close()
    assert schema_version(db_path) == len(RUNTIME_MIGRATIONS)
    idx = await reopened(db_path)  # a second open migrates nothing
    await idx.close()
    assert schema_version(db_path) == len(RUNTIME_MIGRATIONS)


async def test_corrupt_file_raises_storage_error_naming_it(db_path: Path) -> None:
    write_garbage(db_path)
    idx = RuntimeDb(db_path)
    with pytest.raises(StorageError) as info:
        await idx.open()
    assert info.value.path == str(db_path)
    assert str(db_path) in str(info.value)
    await idx.close()


async def test_newer_schema_is_refused_with_a_clear_error(db_path: Path) -> None:
    write_schema_version(db_path, len(RUNTIME_MIGRATIONS) + 5)
    idx = RuntimeDb(db_path)
    with pytest.raises(StorageError, match="newer") as info:
        await idx.open()
    message = str(info.value)
    assert "upgrade alarmtop" in message and str(db_path) in message
    await idx.close()
    assert schema_version(db_path) == len(RUNTIME_MIGRATIONS) + 5  # left untouched


async def test_using_an_index_that_is_not_open_raises(db_path: Path) -> None:
    idx = RuntimeDb(db_path)
    with pytest.raises(StorageError):
        await idx.write([rec("a", 1)])
    with pytest.raises(StorageError, match="not open"):
        _ = idx.conn
    await idx.close()


# -- migrations ------------------------------------------------------------------------------


def test_migrate_applies_in_order_and_only_once() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    steps = ["CREATE TABLE a (x INTEGER)", "CREATE TABLE b (y INTEGER); INSERT INTO b VALUES (1)"]
    migrate(conn, steps[:1])
    migrate(conn, steps)
    migrate(conn, steps)
    assert conn.execute("SELECT version FROM _alarmtop_schema").fetchall() == [(2,)]
    assert conn.execute("SELECT count(*) FROM b").fetchone() == (1,)
    conn.close()


def test_failing_migration_rolls_back_and_keeps_the_version() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn, ["CREATE TABLE a (x INTEGER)"])
    with pytest.raises(sqlite3.OperationalError):
        migrate(conn, ["CREATE TABLE a (x INTEGER)",
                       "CREATE TABLE b (y INTEGER); INSERT INTO nowhere VALUES (1)"])
    assert conn.execute("SELECT version FROM _alarmtop_schema").fetchone() == (1,)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "b" not in tables
    conn.close()


# -- writes ----------------------------------------------------------------------------------


async def test_writes_are_durable_across_close_and_reopen(db_path: Path) -> None:
    idx = await reopened(db_path)
    attempts = (Attempt(5, 9, "RuntimeError: x"), Attempt(11, None, "crashed"))
    full = AlarmRecord("C", "a", 3, AlarmState.RETRYING, 2, 20, "crashed", attempts, None)
    await idx.write([full, rec("b", 7), rec("c", 8)])
    await idx.write([rec("c", 99)], deletes=[("C", "b")])
    await idx.close()

    idx = await reopened(db_path)
    try:
        assert await idx.get(("C", "a")) == full
        assert await idx.get(("C", "b")) is None
        assert await idx.get(("C", "c")) == rec("c", 99)
        assert await idx.get(("C", "nobody")) is None
    finally:
        await idx.close()


async def test_concurrent_writes_share_commits(index: RuntimeDb) -> None:
    commits: list[str] = []
    index.conn.set_trace_callback(
        lambda sql: commits.append(sql) if sql.strip().upper() == "COMMIT" else None)
    await asyncio.gather(*(index.write([rec(f"k{i:03}", i)]) for i in range(200)))
    index.conn.set_trace_callback(None)
    assert 1 <= len(commits) < 200
    assert (await index.counts())["pending"] == 200


async def test_concurrent_writes_to_one_key_keep_the_last(index: RuntimeDb) -> None:
    await index.write([rec("a", 1)])
    await asyncio.gather(index.write([rec("a", 2)]), index.write((), [("C", "a")]))
    assert await index.get(("C", "a")) is None
    await asyncio.gather(index.write((), [("C", "a")]), index.write([rec("a", 3)]))
    assert await index.get(("C", "a")) == rec("a", 3)


async def test_a_failing_write_fails_alone_and_names_the_file(index: RuntimeDb,
                                                             db_path: Path) -> None:
    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO no_such_table VALUES (1)")

    results = await asyncio.gather(
        index.write([rec("a", 1)]),
        index.write([rec("bad", 2)], extra=broken),
        index.write([rec("b", 3)]),
        return_exceptions=True)
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], StorageError) and str(db_path) in str(results[1])
    assert await index.get(("C", "bad")) is None  # rolled back with its extra
    assert await index.get(("C", "a")) == rec("a", 1)
    await index.write([rec("c", 4)])  # the committer is still alive
    assert await index.get(("C", "c")) == rec("c", 4)


async def test_write_after_close_raises(db_path: Path) -> None:
    idx = await reopened(db_path)
    await idx.close()
    task = asyncio.get_running_loop().create_task(idx.write([rec("a", 1)]))
    await spin()
    try:
        assert task.done(), "write() after close() hangs"
        assert isinstance(task.exception(), StorageError)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_close_during_a_commit_resolves_its_writers(db_path: Path) -> None:
    idx = await reopened(db_path)
    entered, release = threading.Event(), threading.Event()

    def hold_commit(sql: str) -> None:
        if sql.strip().upper() == "COMMIT":
            entered.set()
            release.wait()

    idx.conn.set_trace_callback(hold_commit)
    task = asyncio.get_running_loop().create_task(idx.write([rec("a", 1)]))
    assert await asyncio.to_thread(entered.wait, 30)
    closing = asyncio.get_running_loop().create_task(idx.close())
    await spin()
    release.set()
    await closing
    await spin()
    try:
        assert task.done(), "a write whose commit was under way when close() ran hangs"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# -- reads -----------------------------------------------------------------------------------

LIVE = [rec("a", 10), rec("b", 20), rec("c", 20), rec("d", 20), rec("e", 30),
        rec("run", 35, AlarmState.RUNNING), rec("f", 40)]
DEAD = AlarmRecord("C", "dead", 5, AlarmState.DEAD, 6, None, "boom")


@pytest.fixture
async def filled(index: RuntimeDb) -> RuntimeDb:
    await index.write([*LIVE, DEAD])
    return index


@pytest.mark.parametrize(("after", "limit", "dues", "complete"), [
    (float("-inf"), 2, [10, 20, 20, 20], False),  # all ties of the last row
    (float("-inf"), 1, [10], False),
    (float("-inf"), 100, [10, 20, 20, 20, 30, 35, 40], True),
    (20, 10, [30, 35, 40], True),
    (20, 2, [30, 35], False),
    (40, 5, [], True),
])
async def test_due_after_pages_soonest_first(filled: RuntimeDb, after: float,
                                             limit: int, dues: list[int],
                                             complete: bool) -> None:
    rows, done = await filled.due_after(after, limit)
    assert [r.next_attempt_ms for r in rows] == dues
    assert done is complete
    assert "dead" not in names(rows)
    assert len({r.key for r in rows}) == len(rows)


async def test_due_after_pages_cover_the_index_exactly_once(filled: RuntimeDb) -> None:
    seen: list[AlarmRecord] = []
    after: float = float("-inf")
    complete = False
    while not complete:
        rows, complete = await filled.due_after(after, 2)
        seen += rows
        if rows:
            after = rows[-1].due_ms or after
    assert sorted(names(seen)) == sorted(names(LIVE))


async def test_page_puts_the_most_urgent_first(index: RuntimeDb) -> None:
    await index.write([
        rec("p5", 5), rec("p1", 1), rec("run", 3, AlarmState.RUNNING),
        rec("t1", 50, AlarmState.RETRYING, 1), rec("t3", 100, AlarmState.RETRYING, 3),
        AlarmRecord("C", "d2", 0, AlarmState.DEAD, 2),
        AlarmRecord("C", "d6", 0, AlarmState.DEAD, 6),
    ])
    assert names(await index.page(100)) == ["d6", "d2", "t3", "t1", "run", "p1", "p5"]
    assert names(await index.page(3, offset=2)) == ["t3", "t1", "run"]


async def test_counts_in_state_and_overdue(filled: RuntimeDb) -> None:
    assert await filled.counts() == {"pending": 6, "running": 1, "retrying": 0, "dead": 1}
    assert names(await filled.in_state("pending", 3)) == ["a", "b", "c"]
    assert names(await filled.in_state("pending", 3, offset=4)) == ["e", "f"]
    assert names(await filled.in_state("dead", 10)) == ["dead"]
    overdue = await filled.overdue(30, 10)
    assert [r.next_attempt_ms for r in overdue] == [10, 20, 20, 20]
    assert len(await filled.overdue(30, 2)) == 2
