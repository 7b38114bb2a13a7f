"""One event, one commit: what an event writes and the alarm it sets land together,
and nothing the event produces leaves before that commit.

Each test names the observation of the first round it reproduces; each failed on the
code before the alarm intent moved into the object's own commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from alarmtop.core import AlarmInfo, DurableObject, Runtime, VirtualClock
from alarmtop.core.model.errors import InvalidArgument, InvalidObjectName, StorageError
from alarmtop.core.model.object_names import legacy_object_file_name, object_file_name
from alarmtop.core.storage.faultpoints import FAULT_POINTS, locked, when
from alarmtop.core.storage.sqlite.backend import SqliteBackend
from tests.conftest import START_MS, RuntimeFactory

FIRED: list[tuple[str, int]] = []


class Lease(DurableObject):
    """Sets its alarm the way the README's lease ledger does: only when none is set."""

    async def grant(self, ttl_ms: int, value: str = "x") -> int | None:
        await self.ctx.storage.put("lease", value)
        if await self.ctx.storage.get_alarm() is None:
            await self.ctx.storage.set_alarm(self.ctx.now_ms() + ttl_ms)
        return await self.ctx.storage.get_alarm()

    async def arm(self, ttl_ms: int) -> int | None:
        """Touches only the alarm: an object with no database keeps it in its row."""
        if await self.ctx.storage.get_alarm() is None:
            await self.ctx.storage.set_alarm(self.ctx.now_ms() + ttl_ms)
        return await self.ctx.storage.get_alarm()

    async def alarm_at(self) -> int | None:
        return await self.ctx.storage.get_alarm()

    async def value(self) -> Any:
        return await self.ctx.storage.get("lease")

    async def unset(self) -> None:
        await self.ctx.storage.delete_alarm()

    async def move(self, at_ms: int) -> None:
        await self.ctx.storage.set_alarm(at_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        FIRED.append((self.ctx.id, self.ctx.now_ms() - START_MS))


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    FIRED.clear()
    yield
    FAULT_POINTS.disarm()


@contextlib.contextmanager
def write_lock(db: Path) -> Iterator[None]:
    """Another connection holding the write lock (a backup, a stray `sqlite3` shell)."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


async def short_lock_runtime(make_runtime: RuntimeFactory, data_dir: Path) -> Runtime:
    backend = SqliteBackend(data_dir, busy_timeout_s=0.05)
    return await make_runtime(Lease, backend=backend)


@pytest.mark.parametrize("method", ["grant", "arm"])
async def test_a_locked_index_fails_the_call_and_leaves_nothing_cached(
        make_runtime: RuntimeFactory, data_dir: Path, clock: VirtualClock, method: str) -> None:
    """Observation 1: a write lock held past the busy timeout failed the call, but the
    object's get_alarm() still returned the time while the runtime had no alarm; the
    next call then skipped set_alarm and the acknowledged alarm never fired."""
    rt = await short_lock_runtime(make_runtime, data_dir)
    lease = rt.get(Lease, "l1")
    with write_lock(data_dir / "runtime.sqlite"), pytest.raises(StorageError):
        await getattr(lease, method)(1000)
    assert await lease.alarm_at() is None, "the failed call's alarm is still shown"
    if method == "grant":
        assert await lease.value() is None, "the failed call's write was kept"
    assert await getattr(lease, method)(1000) == START_MS + 1000  # acknowledged now
    await clock.advance(2)
    assert FIRED == [("l1", 1000)]


class Slow(DurableObject):
    async def arm(self) -> None:
        await self.ctx.storage.set_alarm(self.ctx.now_ms())

    async def alarm(self, info: AlarmInfo) -> None:
        FIRED.append((self.ctx.id, info.retry_count))
        await self.ctx.sleep(1)


async def test_a_locked_index_at_the_end_of_an_attempt_is_a_crashed_attempt(
        make_runtime: RuntimeFactory, data_dir: Path, clock: VirtualClock) -> None:
    """Observation 2: the same lock while an attempt finished left its alarm 'running'
    for good (the sweeper skipped it; nothing retried it until a restart). Now the end
    that could not be recorded counts as a crashed attempt, retried once it can be."""
    backend = SqliteBackend(data_dir, busy_timeout_s=0.05)
    rt = await make_runtime(Slow, backend=backend)
    await rt.get(Slow, "s").arm()
    await clock.advance(0.5)  # the handler is sleeping
    with write_lock(data_dir / "runtime.sqlite"):
        await clock.advance(1)  # it ends; its end cannot be written
        status = await rt.alarm(Slow, "s")
        assert status is not None and status.state == "running"
    await clock.advance(5)  # the repair lands, the retry runs and succeeds
    assert FIRED == [("s", 0), ("s", 1)]
    assert await rt.alarm(Slow, "s") is None


class Talker(DurableObject):
    """Stores what a socket says and answers 'stored ...'."""

    async def web_socket_connect(self, ws: Any, request: dict[str, Any]) -> None:
        self.ctx.accept_web_socket(ws)

    async def web_socket_message(self, ws: Any, message: str) -> None:
        await self.ctx.storage.put("said", message)
        await ws.send(f"stored {message}")

    async def said(self) -> Any:
        return await self.ctx.storage.get("said")


class Transport:
    """A socket whose sends record what was on disk at that moment."""

    address = "127.0.0.1:1"

    def __init__(self, db: Path) -> None:
        self.db = db
        self.sent: list[tuple[str, Any]] = []

    async def send(self, message: str) -> None:
        with contextlib.closing(sqlite3.connect(self.db)) as conn:
            row = conn.execute("SELECT value FROM _alarmtop_kv WHERE key = 'said'").fetchone()
        self.sent.append((message, row[0] if row else None))

    async def close(self, code: int, reason: str) -> None:
        pass


@pytest.mark.sqlite_only  # reads the SQLite files themselves
async def test_a_socket_send_leaves_only_after_its_event_commits(
        make_runtime: RuntimeFactory, data_dir: Path) -> None:
    """Observation 4: the object's send left before the event's writes were durable (a
    client saw "stored A", the server died, the value was gone). Now the client hears it
    only once it is on disk, and not at all when the commit fails."""
    rt = await make_runtime(Talker)
    db = rt.backend.object_path("Talker", "t")  # type: ignore[attr-defined]
    transport = Transport(db)
    ws = rt.sockets.connect(("Talker", "t"), transport)
    await rt.socket_event("Talker", "t", "web_socket_connect", ws, {})
    await rt.socket_event("Talker", "t", "web_socket_message", ws, "A")
    assert transport.sent == [("stored A", '"A"')], "sent before the write was durable"
    FAULT_POINTS.arm("object.commit.before", locked)
    with pytest.raises(StorageError):
        await rt.socket_event("Talker", "t", "web_socket_message", ws, "B")
    FAULT_POINTS.disarm()
    assert transport.sent == [("stored A", '"A"')], "a failed event's send went out"
    assert await rt.get(Talker, "t").said() == "A"


async def test_concurrent_first_deliveries_of_one_key_have_one_first(
        make_runtime: RuntimeFactory) -> None:
    """Observation 5: five concurrent first deliveries of one key through the ledger all
    returned "first" (a check, then a write)."""
    rt = await make_runtime()
    firsts = await asyncio.gather(*(rt.ledger.deliver("charge:42", i) for i in range(5)))
    assert sorted(firsts) == [False, False, False, False, True]
    entry = await rt.ledger.get("charge:42")
    assert entry is not None and entry["deliveries"] == 5


class Box(DurableObject):
    async def put(self, value: Any) -> None:
        await self.ctx.storage.put("v", value)

    async def get(self) -> Any:
        return await self.ctx.storage.get("v")


async def test_two_names_never_share_a_file(make_runtime: RuntimeFactory) -> None:
    """Observation 8: a long name's file ends in '~' and a digest; a short name of that
    very shape mapped to the same file, so the two objects shared one database."""
    long_name = "a" * 200
    twin = legacy_object_file_name(long_name)[:-len(".sqlite")]
    assert legacy_object_file_name(twin) == legacy_object_file_name(long_name)  # the old bug
    assert object_file_name(twin) != object_file_name(long_name)
    rt = await make_runtime(Box)
    await rt.get(Box, long_name).put("long")
    await rt.get(Box, twin).put("twin")
    assert await rt.get(Box, long_name).get() == "long"
    assert await rt.get(Box, twin).get() == "twin"
    assert sorted(await rt.backend.list_objects(10)) == sorted(
        [("Box", long_name), ("Box", twin)])  # listed by their real names


async def test_class_names_are_identifiers_and_names_are_text(
        make_runtime: RuntimeFactory, data_dir: Path) -> None:
    """Observation 8: a class whose __name__ was '..' reached runtime.sqlite (its objects'
    files went to the data dir itself, and delete_all() dropped the alarm index); a lone
    surrogate in a name raised UnicodeEncodeError instead of InvalidObjectName."""
    rt = await make_runtime(Box)
    dotted = type("..", (DurableObject,), {})
    with pytest.raises(InvalidArgument, match="identifiers"):
        rt.register(dotted)
    with pytest.raises(InvalidObjectName, match="surrogate"):
        rt.get(Box, "bad\ud800name")


# -- a failed write on each side of the commit ----------------------------------------


def hint_for(name: str) -> Any:
    return lambda info: ("Lease", name) in info.get("keys", ())


async def test_a_failed_wake_hint_fails_the_event_and_keeps_nothing(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    """The index write that must come first fails: the call fails, its storage write is
    undone, no alarm exists."""
    rt = await make_runtime(Lease)
    lease = rt.get(Lease, "l1")
    FAULT_POINTS.arm("index.commit.before", when(hint_for("l1"), locked))
    with pytest.raises(StorageError):
        await lease.grant(1000, "lost")
    FAULT_POINTS.disarm()
    assert await lease.value() is None
    assert await rt.alarm(Lease, "l1") is None
    await clock.advance(5)
    assert FIRED == []


async def test_a_failed_object_commit_takes_its_wake_hint_back(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    """The object's own commit fails after the index learned of the alarm: the call
    fails, and the early record is taken back (it would have been reconciled anyway)."""
    rt = await make_runtime(Lease)
    lease = rt.get(Lease, "l1")
    await lease.grant(1000, "first")  # the database exists
    await clock.advance(2)
    FAULT_POINTS.arm("object.commit.before", locked)
    with pytest.raises(StorageError):
        await lease.grant(1000, "lost")
    FAULT_POINTS.disarm()
    assert await lease.value() == "first"
    assert await rt.alarm(Lease, "l1") is None
    assert await lease.alarm_at() is None
    await clock.advance(5)
    assert FIRED == [("l1", 1000)]


def cut_off_after_commit(info: dict[str, Any]) -> None:
    """An action: the event is cancelled just as its commit returns (a forwarded call
    whose caller's node went away: the commit landed, the event does not learn it)."""
    raise asyncio.CancelledError


async def test_an_event_cut_off_during_its_commit_keeps_the_alarm_row_it_wrote_first(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    """A commit cut off may have landed: the row the index was told first stays. Taking
    it back left the committed alarm with no row, never to fire (the fleet chaos run,
    seed 20260601: "final row null, the object sees ...", after an unacknowledged set
    whose caller's node was killed)."""
    rt = await make_runtime(Lease)
    lease = rt.get(Lease, "l1")
    await lease.grant(1000, "first")  # the database exists
    await clock.advance(2)  # fired: no alarm left, so the next one is a fresh row first
    assert FIRED == [("l1", 1000)]
    FAULT_POINTS.arm("object.commit.after", when(lambda info: info["key"] == ("Lease", "l1"),
                                                 cut_off_after_commit))
    call = asyncio.ensure_future(lease.grant(1000, "landed"))
    with pytest.raises(asyncio.CancelledError):
        await call
    FAULT_POINTS.disarm()
    # Looked at before the object wakes (a wake would restore a lost row from its intent).
    status = await rt.alarm(Lease, "l1")
    assert status is not None and status.scheduled_ms == START_MS + 3000
    assert await lease.value() == "landed"
    assert await lease.alarm_at() == START_MS + 3000
    await clock.advance(2)
    assert FIRED == [("l1", 1000), ("l1", 3000)]


async def test_a_failed_index_write_after_the_commit_leaves_the_event_standing(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    """Moving an alarm later reaches the index only after the object commits; when that
    write fails the call still succeeds, and the early record left behind is corrected
    when it falls due: the handler runs once, at the later time."""
    rt = await make_runtime(Lease)
    lease = rt.get(Lease, "l1")
    await lease.grant(1000)
    FAULT_POINTS.arm("index.commit.before", when(hint_for("l1"), locked))
    await lease.move(START_MS + 5000)
    FAULT_POINTS.disarm()
    assert await lease.alarm_at() == START_MS + 5000  # the object's truth
    events = rt.events.subscribe("alarm.")
    await clock.advance(2)
    assert FIRED == []  # the early record was corrected, no handler ran
    assert [e.data.get("action") for e in events.drain() if e.type == "alarm.reconciled"] == [
        "moved"]
    await clock.advance(5)
    assert FIRED == [("l1", 5000)]


async def test_a_deleted_alarm_never_runs_its_handler(make_runtime: RuntimeFactory,
                                                      clock: VirtualClock) -> None:
    """A delete whose index write fails after the commit: the old record falls due, the
    dispatcher reads the intent and drops it without running the handler."""
    rt = await make_runtime(Lease)
    lease = rt.get(Lease, "l1")
    await lease.grant(1000)
    FAULT_POINTS.arm("index.commit.before", when(hint_for("l1"), locked))
    await lease.unset()
    FAULT_POINTS.disarm()
    assert await lease.alarm_at() is None
    await clock.advance(5)
    assert FIRED == []
    assert await rt.alarm(Lease, "l1") is None
