"""Damaged files and full disks, on real SQLite files.

A damaged object database (garbage, truncated, emptied, pages overwritten) gives
a clear error naming the file, goes to `<data>/quarantine/` with a note, a log
record and an event, and the object refuses events instead of starting empty;
every other object keeps working. A damaged or missing runtime.sqlite stops
`start()` with a `CorruptDatabase` that says how to recover, unless the operator
chose `on_corrupt_index="quarantine"`. A full disk fails the event that hit it
with `DiskFull`, keeps the runtime up and loses no acknowledged write: once on a
real size-limited tmpfs (root only), and always by failing writes in SQLite.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sqlite3
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from alarmtop.core import AlarmInfo, DurableObject, Runtime, VirtualClock
from alarmtop.core.model.errors import CorruptDatabase, DiskFull, ObjectQuarantined, StorageError
from alarmtop.core.storage.faultpoints import FAULT_POINTS
from alarmtop.core.storage.sqlite.backend import MARKER, SqliteBackend
from tests.conftest import RuntimeFactory


class Box(DurableObject):
    """Stores values; its alarm counts its fires in storage."""

    async def put(self, key: str, value: Any) -> None:
        await self.ctx.storage.put(key, value)

    async def fill(self, n: int, size: int) -> None:
        await self.ctx.storage.put({f"fill{i}": "x" * size for i in range(n)})

    async def get(self, key: str) -> Any:
        return await self.ctx.storage.get(key)

    async def arm(self, delay_ms: int) -> None:
        await self.ctx.storage.set_alarm(self.ctx.now_ms() + delay_ms)

    async def put_and_arm(self, key: str, value: Any, delay_ms: int) -> None:
        await self.ctx.storage.put(key, value)
        await self.ctx.storage.set_alarm(self.ctx.now_ms() + delay_ms)

    async def touch(self) -> None:
        """An event that writes nothing and sets nothing."""

    async def alarm(self, info: AlarmInfo) -> None:
        await self.ctx.storage.put("fired", int(await self.ctx.storage.get("fired") or 0) + 1)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_bytes(path: Path) -> bytes:
    return path.read_bytes()


def note_of(moved: Path) -> dict[str, Any]:
    """The JSON note left next to a quarantined file."""
    assert moved.exists(), moved
    note: dict[str, Any] = json.loads(Path(f"{moved}.json").read_text())
    return note


def drop_note(moved: str | None) -> None:
    Path(f"{moved}.json").unlink()


def box_path(rt: Runtime, name: str) -> Path:
    return rt.backend.object_path("Box", name)  # type: ignore[attr-defined,no-any-return]


# -- ways to damage a file -------------------------------------------------------------------

def garbage(path: Path) -> None:
    path.write_bytes(os.urandom(path.stat().st_size))


def truncated_half(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def truncated_header(path: Path) -> None:
    os.truncate(path, 100)


def zero_length(path: Path) -> None:
    os.truncate(path, 0)


def pages_overwritten(path: Path) -> None:
    """A valid header, garbage everywhere after the first page."""
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.seek(4096)
        f.write(os.urandom(size - 4096))


DAMAGE: list[Callable[[Path], None]] = [garbage, truncated_half, truncated_header, zero_length,
                                        pages_overwritten]


async def filled_boxes(make_runtime: RuntimeFactory) -> Runtime:
    """Two boxes with data (several pages each), then stopped: the files are final."""
    rt = await make_runtime(Box)
    for name in ("victim", "bystander"):
        await rt.get(Box, name).fill(60, 500)
        await rt.get(Box, name).put("v", f"value of {name}")
    await rt.stop()
    return rt


# -- a damaged object database ---------------------------------------------------------------

@pytest.mark.parametrize("damage", DAMAGE, ids=[d.__name__ for d in DAMAGE])
async def test_damaged_object_file_is_quarantined_and_others_keep_working(
        make_runtime: RuntimeFactory, damage: Callable[[Path], None],
        caplog: pytest.LogCaptureFixture) -> None:
    old = await filled_boxes(make_runtime)
    victim_file = box_path(old, "victim")
    backup = victim_file.with_name("backup")
    shutil.copy(victim_file, backup)
    damage(victim_file)

    rt = await make_runtime(Box)
    events = rt.events.subscribe("storage.")
    with caplog.at_level(logging.ERROR, logger="alarmtop.storage"), \
            pytest.raises(CorruptDatabase) as err:
        await rt.get(Box, "victim").get("v")
    # The error names the file and where it went; the file is in quarantine with a note.
    assert str(victim_file) in str(err.value) and err.value.path == str(victim_file)
    moved = Path(err.value.quarantined_to or "")
    assert moved.parent == rt.data_dir / "quarantine" / "objects" / "Box"
    assert moved.name.startswith(victim_file.name + ".")
    note = note_of(moved)
    assert note["file"] == str(victim_file) and note["reason"]
    assert not victim_file.exists()
    # Announced: a log record and an event.
    assert any(getattr(r, "alarmtop", {}).get("event") == "storage.quarantined"
               for r in caplog.records)
    [event] = [e for e in events.drain() if e.type == "storage.quarantined"]
    assert event.data["object"] == "Box/victim" and event.data["quarantined_to"] == str(moved)

    # Every other object works as before.
    bystander = rt.get(Box, "bystander")
    assert await bystander.get("v") == "value of bystander"
    await bystander.put("after", 1)
    assert await bystander.get("after") == 1

    # The victim refuses events rather than starting empty over its lost data...
    with pytest.raises(ObjectQuarantined, match="Restore a good copy"):
        await rt.get(Box, "victim").put("v", "overwrite")
    assert not victim_file.exists()
    # ...until an operator restores a good copy: the object is back with its data.
    shutil.copy(backup, victim_file)
    assert await rt.get(Box, "victim").get("v") == "value of victim"


async def test_deleting_the_note_lets_the_object_start_empty(make_runtime: RuntimeFactory) -> None:
    """The operator's other choice: accept the loss explicitly."""
    old = await filled_boxes(make_runtime)
    garbage(box_path(old, "victim"))
    rt = await make_runtime(Box)
    with pytest.raises(CorruptDatabase) as err:
        await rt.get(Box, "victim").get("v")
    drop_note(err.value.quarantined_to)
    assert await rt.get(Box, "victim").get("v") is None
    await rt.get(Box, "victim").put("v", "fresh")
    assert await rt.get(Box, "victim").get("v") == "fresh"


async def test_damage_found_mid_event_is_quarantined_too(make_runtime: RuntimeFactory) -> None:
    """Damage appearing under an open database: the next read finds it, the object stops."""
    rt = await make_runtime(Box, hibernate_after=3600)
    victim = rt.get(Box, "victim")
    await victim.fill(60, 500)
    path = box_path(rt, "victim")
    conn = sqlite3.connect(path)  # checkpoint the WAL so the data lives in the main file
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    pages_overwritten(path)
    with pytest.raises(CorruptDatabase, match="moved to"):
        await victim.get("fill7")
    with pytest.raises(ObjectQuarantined):
        await victim.get("fill8")  # it does not limp on: it refuses, saying why
    assert rt.backend.quarantine.records[-1]["file"] == str(path)  # type: ignore[attr-defined]


async def test_alarm_of_a_damaged_object_becomes_a_dead_letter_naming_the_file(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    """The alarm is not lost and not silently dropped: its attempts say why they failed,
    and the neighbours' alarms fire as usual."""
    rt = await make_runtime(Box)
    for name in ("victim", "bystander"):
        await rt.get(Box, name).fill(10, 100)
        await rt.get(Box, name).arm(60_000)
    await rt.stop()
    path = box_path(rt, "victim")
    garbage(path)
    rt = await make_runtime(Box)
    await clock.advance(60 + 200)  # the whole default retry ladder (126 s)
    status = await rt.alarm(Box, "victim")
    assert status is not None and status.state == "dead"
    assert len(status.attempts) == status.max_retries + 1
    assert str(path) in (status.attempts[0].error or "")  # the first attempt quarantined it
    assert "refuses events" in (status.last_error or "")
    assert await rt.alarm(Box, "bystander") is None
    assert await rt.get(Box, "bystander").get("fired") == 1


async def test_a_new_object_file_is_never_left_half_made(make_runtime: RuntimeFactory) -> None:
    """New databases are created aside and renamed into place: the path holds either
    nothing or an initialised database, so an empty file always means damage."""
    rt = await make_runtime(Box)
    await rt.get(Box, "fresh").touch()  # wakes without touching storage: no file
    assert not box_path(rt, "fresh").exists()
    await rt.get(Box, "fresh").put("k", 1)
    path = box_path(rt, "fresh")
    assert path.stat().st_size > 0
    assert not list(path.parent.glob("*.new*"))
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


# -- a damaged or missing runtime.sqlite ------------------------------------------------------

async def runtime_with_alarms(make_runtime: RuntimeFactory, n: int = 40) -> Runtime:
    rt = await make_runtime(Box)
    for i in range(n):
        await rt.get(Box, f"b{i}").put_and_arm("v", i, 60_000 + i)
    await rt.stop()
    return rt


async def refused_start(data_dir: Path, clock: VirtualClock) -> CorruptDatabase:
    rt = Runtime(data_dir, clock=clock)
    rt.register(Box)
    try:
        with pytest.raises(CorruptDatabase) as err:
            await rt.start()
    finally:
        await rt.backend.close()
    assert not rt.running
    return err.value


INDEX_DAMAGE = [garbage, truncated_half, truncated_header, pages_overwritten, zero_length]


@pytest.mark.parametrize("damage", INDEX_DAMAGE, ids=[d.__name__ for d in INDEX_DAMAGE])
async def test_damaged_runtime_database_stops_start_and_changes_nothing(
        make_runtime: RuntimeFactory, clock: VirtualClock, damage: Callable[[Path], None]) -> None:
    old = await runtime_with_alarms(make_runtime)
    index = old.data_dir / "runtime.sqlite"
    damage(index)
    before = sha(index)
    objects_before = {p: sha(p) for p in (old.data_dir / "objects").rglob("*.sqlite")}
    err = await refused_start(old.data_dir, clock)
    assert err.path == str(index) and str(index) in str(err)
    assert "on_corrupt_index='quarantine'" in str(err) and "backup" in str(err)
    assert sha(index) == before  # not "repaired", not recreated empty
    assert {p: sha(p) for p in (old.data_dir / "objects").rglob("*.sqlite")} == objects_before
    assert not (old.data_dir / "quarantine").exists()


async def test_missing_runtime_database_over_existing_data_stops_start(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    """Deleted by mistake: the marker (and the object files) say data lived here."""
    old = await runtime_with_alarms(make_runtime, 3)
    assert (old.data_dir / MARKER).exists()
    for suffix in ("", "-wal", "-shm"):
        (old.data_dir / f"runtime.sqlite{suffix}").unlink(missing_ok=True)
    err = await refused_start(old.data_dir, clock)
    assert "missing" in str(err) and not (old.data_dir / "runtime.sqlite").exists()


async def test_missing_runtime_database_of_executions_only_is_noticed(
        tmp_path: Path, clock: VirtualClock) -> None:
    """No object files at all (executions keep everything in runtime.sqlite): the marker
    alone stops a start over the lost database."""
    data = tmp_path / "execs-only"
    rt = Runtime(data, clock=clock)
    await rt.start()
    await rt.stop()
    assert not (data / "objects").exists() and (data / MARKER).exists()
    (data / "runtime.sqlite").unlink()
    err = await refused_start(data, clock)
    assert "missing" in str(err)


async def test_a_fresh_folder_starts_and_is_marked(tmp_path: Path, clock: VirtualClock) -> None:
    rt = Runtime(tmp_path / "new", clock=clock)
    await rt.start()
    await rt.stop()
    assert (tmp_path / "new" / MARKER).exists()
    assert (tmp_path / "new" / "runtime.sqlite").stat().st_size > 0


@pytest.mark.parametrize("damage", [truncated_half, garbage], ids=["truncated_half", "garbage"])
async def test_quarantine_and_continue_is_an_explicit_choice_that_salvages(
        make_runtime: RuntimeFactory, clock: VirtualClock, damage: Callable[[Path], None],
        caplog: pytest.LogCaptureFixture) -> None:
    old = await runtime_with_alarms(make_runtime)
    index = old.data_dir / "runtime.sqlite"
    damage(index)
    damaged_bytes = read_bytes(index)
    backend = SqliteBackend(old.data_dir, on_corrupt_index="quarantine")
    with caplog.at_level(logging.WARNING, logger="alarmtop.storage"):
        rt = await make_runtime(Box, backend=backend)
    [record] = backend.quarantine.records
    moved = Path(record["quarantined_to"])
    assert record["file"] == str(index) and moved.parent == old.data_dir / "quarantine"
    assert read_bytes(moved) == damaged_bytes  # kept as it was, for forensics
    events = {getattr(r, "alarmtop", {}).get("event") for r in caplog.records}
    assert {"storage.quarantined", "storage.salvaged"} <= events
    # What could be read was kept; the alarms it could not read come back from the
    # objects' own files, which hold their intents (and kept all their data).
    assert backend.salvaged is not None and backend.restored is not None
    kept = backend.salvaged["alarms"]
    assert kept + backend.restored["restored"] == 40
    assert sum((await rt.alarm_counts()).values()) == 40
    assert "storage.index_restored" in events or kept == 40
    if damage is garbage:
        assert kept == 0
    for i in range(40):
        assert await rt.get(Box, f"b{i}").get("v") == i
    await rt.get(Box, "b0").arm(1000)
    await clock.advance(1)
    assert await rt.get(Box, "b0").get("fired") == 1


def test_on_corrupt_index_takes_only_known_modes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="on_corrupt_index"):
        SqliteBackend(tmp_path, on_corrupt_index="ignore")


# -- full disk, simulated by failing writes --------------------------------------------------

def disk_full_error() -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError("database or disk is full")
    exc.sqlite_errorcode = 13  # type: ignore[attr-defined]
    exc.sqlite_errorname = "SQLITE_FULL"  # type: ignore[attr-defined]
    return exc


class FailingWrites:
    """Makes one object's commits fail as SQLite does on a full disk (through the fault
    point before every object commit, so a reopened database fails alike)."""

    def __init__(self) -> None:
        self.on = False

    def install(self, key: tuple[str, str]) -> None:
        def full(info: dict[str, Any]) -> None:
            if self.on and info.get("key") == key:
                raise disk_full_error()
        FAULT_POINTS.arm("object.commit.before", full)


@pytest.fixture(autouse=True)
def _disarm() -> Iterator[None]:
    yield
    FAULT_POINTS.disarm()


async def test_full_disk_on_an_object_fails_the_event_not_the_runtime(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    rt = await make_runtime(Box, hibernate_after=3600)
    box, other = rt.get(Box, "box"), rt.get(Box, "other")
    for i in range(5):
        await box.put(f"k{i}", i)
    failing = FailingWrites()
    failing.install(("Box", "box"))
    failing.on = True
    with pytest.raises(DiskFull) as err:
        await box.put_and_arm("lost", "never acknowledged", 1000)
    assert err.value.path == str(box_path(rt, "box")) and "disk is full" in str(err.value)
    assert rt.running
    await other.put("k", "fine")  # another object is not affected
    with pytest.raises(DiskFull):
        await box.put("k9", 9)
    failing.on = False  # space freed
    await box.put("k5", 5)
    await rt.stop()
    rt = await make_runtime(Box)
    box = rt.get(Box, "box")
    assert [await box.get(f"k{i}") for i in range(6)] == [0, 1, 2, 3, 4, 5]
    assert await box.get("lost") is None and await box.get("k9") is None
    assert await rt.get(Box, "other").get("k") == "fine"


async def test_a_failed_event_does_not_leave_its_alarm_behind(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    rt = await make_runtime(Box, hibernate_after=3600)
    box = rt.get(Box, "box")
    await box.put("k", 0)
    failing = FailingWrites()
    failing.install(("Box", "box"))
    failing.on = True
    with pytest.raises(DiskFull):
        await box.put_and_arm("k", 1, 1000)
    failing.on = False
    await box.touch()  # an unrelated, successful event
    assert await rt.alarm(Box, "box") is None  # the failed event's alarm must not appear


class FullOnCommit:
    """The alarm index's connection, whose COMMIT fails as on a full disk (SQLite has
    then already rolled the transaction back)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT":
            self._conn.execute("ROLLBACK")
            raise disk_full_error()
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


async def test_full_disk_on_the_runtime_database_fails_the_call_cleanly(
        make_runtime: RuntimeFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The alarm write fails: the caller gets DiskFull naming runtime.sqlite (not a
    confusing "cannot rollback"), the runtime stays up, and later writes work."""
    rt = await make_runtime(Box)
    db = rt.backend.database
    await rt.get(Box, "a").arm(60_000)
    monkeypatch.setattr(db, "_conn", FullOnCommit(db.conn))  # type: ignore[attr-defined]
    with pytest.raises(DiskFull) as err:
        await rt.get(Box, "b").arm(1000)
    assert err.value.path == str(rt.data_dir / "runtime.sqlite")
    assert "cannot rollback" not in str(err.value)
    assert rt.running
    monkeypatch.undo()
    await rt.get(Box, "b").arm(2000)
    a, b = await rt.alarm(Box, "a"), await rt.alarm(Box, "b")
    assert a is not None and b is not None and a.scheduled_ms < b.scheduled_ms + 60_000


async def test_alarm_whose_start_could_not_be_recorded_fires_once_space_is_back(
        make_runtime: RuntimeFactory, clock: VirtualClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    rt = await make_runtime(Box)
    await rt.get(Box, "a").arm(1000)
    db = rt.backend.database
    real = db._apply  # type: ignore[attr-defined]
    full = {"on": True}

    def apply(batch: Any) -> None:
        if full["on"]:
            raise disk_full_error()
        real(batch)

    monkeypatch.setattr(db, "_apply", apply)
    await clock.advance(1)  # the attempt's start cannot be recorded (logged, not raised)
    full["on"] = False  # space is back
    await rt.sweep()
    await clock.advance(300)
    assert await rt.get(Box, "a").get("fired") == 1


# -- full disk, for real: a 1 MiB tmpfs ------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (needs root and mount); skipped where that is not possible."""
    mount = shutil.which("mount")
    if os.geteuid() != 0 or mount is None:
        pytest.skip("a size-limited tmpfs needs root and mount(8)")
    where = tmp_path / "small"
    where.mkdir()
    done = subprocess.run([mount, "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


async def test_full_tmpfs_fails_events_keeps_runtime_and_acknowledged_writes(
        small_disk: Path, clock: VirtualClock) -> None:
    data = small_disk / "data"
    rt = Runtime(data, clock=clock, hibernate_after=3600)
    rt.register(Box)
    await rt.start()
    acked: dict[str, str] = {}
    filler = data.parent / "filler"
    try:
        box, other = rt.get(Box, "box"), rt.get(Box, "other")
        await other.put("k", "before")
        filler.write_bytes(b"\0" * 300_000)  # space an operator can free later
        failure: StorageError | None = None
        for i in range(400):
            value = uuid.uuid4().hex * 64  # 2 KiB
            try:
                await box.put(f"k{i}", value)
            except StorageError as exc:
                failure = exc
                break
            acked[f"k{i}"] = value
        assert isinstance(failure, DiskFull), failure
        assert failure.path is not None and "disk is full" in str(failure)
        assert len(acked) > 10 and rt.running
        # Reads still work; the runtime did not crash.
        assert await other.get("k") == "before"
        assert await box.get("k0") == acked["k0"]
        filler.unlink()  # the operator frees space
        await box.put("after", "space is back")
        acked["after"] = "space is back"
    finally:
        await rt.stop()
    rt = Runtime(data, clock=clock)
    rt.register(Box)
    await rt.start()
    try:
        box = rt.get(Box, "box")
        for key, value in acked.items():
            assert await box.get(key) == value, key
    finally:
        await rt.stop()
