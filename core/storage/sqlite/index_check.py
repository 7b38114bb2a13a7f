"""The alarm index checked against the objects' own files after an unclean stop.

Every object's file holds its alarm intent; the index (runtime.sqlite) is derived
from the intents. A commit of runtime.sqlite is durable in its write-ahead log
until a checkpoint copies it into the file: a lost or damaged `runtime.sqlite-wal`
(a backup that copied only `*.sqlite`, a disk that dropped it) silently drops
those commits, alarm rows among them, while the objects' files still ask for the
alarms. SQLite cannot tell: it starts from what it has.

So the runtime database records whether it was closed cleanly (`runtime_state`:
`clean` is '0' from the start, written into the file itself by a checkpoint, '1'
once a stop has closed it). A start that finds '0' (a crash, a copy taken while
running, a lost log) reads every object's file and restores each alarm the index
lost, or holds later than the file asks (`alarm_intent.index_behind`), from the
file's intent, and says so in the log: damage is reported, not absorbed. Objects
also check their row whenever their database opens (`kernel.objects.storage`).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from alarmtop.core.model import alarm_intent
from alarmtop.core.model.alarm_policy import AlarmKey, AlarmRecord
from alarmtop.core.model.log_records import log_event
from alarmtop.core.model.object_names import name_of_file
from alarmtop.core.storage.faultpoints import FAULT_POINTS
from alarmtop.core.storage.sqlite.alarm_rows import COLUMNS, SqliteAlarmRows, record_of_row
from alarmtop.core.storage.sqlite.database import SqliteDatabase
from alarmtop.core.storage.sqlite.quarantine import STORAGE_LOG, wall_ms

NAMES_SHOWN = 20
FileIntent = tuple[AlarmKey, alarm_intent.Intent, str]


def was_clean(conn: sqlite3.Connection) -> bool:
    row = conn.execute("SELECT value FROM runtime_state WHERE key = 'clean'").fetchone()
    return row is not None and row[0] == "1"


def mark(conn: sqlite3.Connection, clean: bool) -> None:
    """Record whether the database is closed cleanly, and copy the log into the file
    (so that the file itself says it, whatever becomes of the log)."""
    if FAULT_POINTS.active:
        FAULT_POINTS.hit("index.state.before", clean=clean)
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("INSERT INTO runtime_state (key, value) VALUES ('clean', ?) "
                     "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                     ("1" if clean else "0",))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    if FAULT_POINTS.active:
        FAULT_POINTS.hit("index.state.after", clean=clean)


def object_files(data_dir: Path) -> Iterator[Path]:
    root = data_dir / "objects"
    if not root.is_dir():
        return
    for cls_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for entry in sorted(cls_dir.iterdir()):
            if entry.name.endswith(".sqlite"):
                yield entry


def read_intent(path: Path) -> FileIntent | None:
    """The object's key and intent from its file (None: it holds none: written before
    intents lived in the files). Raises `sqlite3.Error` for a file that cannot be read."""
    conn = sqlite3.connect(path, timeout=1.0)
    try:
        try:
            row = conn.execute("SELECT gen, at_ms FROM _alarmtop_alarm").fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return None
            raise
        if row is None:
            return None
        meta = dict(conn.execute("SELECT key, value FROM _alarmtop_meta").fetchall())
    finally:
        conn.close()
    name = meta.get("name") or name_of_file(path.name[:-len(".sqlite")])
    if name is None:
        return None
    key = (meta.get("class") or path.parent.name, name)
    return key, alarm_intent.Intent(int(row[0]), row[1]), path.name


def _read_all(data_dir: Path) -> tuple[list[FileIntent], list[str]]:
    found: list[FileIntent] = []
    unreadable: list[str] = []
    for path in object_files(data_dir):
        try:
            got = read_intent(path)
        except sqlite3.Error as exc:
            unreadable.append(f"{path} ({exc})")
            continue
        if got is not None:
            found.append(got)
    return found, unreadable


def _rows(conn: sqlite3.Connection, keys: list[AlarmKey]) -> dict[AlarmKey, AlarmRecord]:
    out: dict[AlarmKey, AlarmRecord] = {}
    for key in keys:
        row = conn.execute(f"SELECT {COLUMNS} FROM alarms WHERE object_class = ? AND "
                           "object_name = ?", key).fetchone()
        if row is not None:
            out[key] = record_of_row(row)
    return out


async def restore_lost(db: SqliteDatabase, data_dir: Path) -> dict[str, Any]:
    """Read every object's file and restore what the index lost (see the module's docs);
    what was found, for the log."""
    found, unreadable = await asyncio.to_thread(_read_all, data_dir)
    rows = await db.read(lambda conn: _rows(conn, [k for k, _, _ in found]))
    restored: list[AlarmRecord] = []
    listed = []
    now = wall_ms()
    for key, intent, file in found:
        rec = rows.get(key)
        if alarm_intent.index_behind(intent, rec):
            fresh = alarm_intent.restore(key, intent, rec).record
            assert fresh is not None
            restored.append(fresh)
            listed.append(SqliteAlarmRows.object_write(key, file, now))

    def list_objects(conn: sqlite3.Connection) -> None:
        for write in listed:
            write(conn)
    if restored:
        await db.write(restored, (), list_objects)
    names = [f"{r.object_class}/{r.object_name}" for r in restored]
    report = {"files": len(found), "restored": len(restored), "unreadable": len(unreadable)}
    if restored:
        shown = ", ".join(names[:NAMES_SHOWN]) + (" ..." if len(names) > NAMES_SHOWN else "")
        log_event(STORAGE_LOG, logging.ERROR,
                  f"the runtime database was not closed cleanly and had lost {len(restored)} "
                  f"alarm(s) that the objects' own files still ask for ({shown}); they were "
                  f"restored from the files ({len(found)} read). Its write-ahead log "
                  f"({db.file.name}-wal) was lost or damaged: a backup must copy it with "
                  "runtime.sqlite, or be taken while alarmtop is stopped",
                  event="storage.index_restored", **report)
    elif found:
        log_event(STORAGE_LOG, logging.INFO, f"the runtime database was not closed cleanly: "
                  f"{len(found)} object files checked against the alarm index, nothing lost",
                  event="storage.index_checked", **report)
    if unreadable:
        log_event(STORAGE_LOG, logging.WARNING, f"{len(unreadable)} object file(s) could not be "
                  f"read to check the alarm index: {'; '.join(unreadable[:NAMES_SHOWN])}; each "
                  "is checked (or quarantined) when its object wakes",
                  event="storage.index_unchecked", **report)
    return report
