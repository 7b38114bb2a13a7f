"""`<data>/quarantine/`: damaged databases moved aside, each with a JSON note.

Damage is never papered over: a damaged file is moved here (with its -wal and
-shm files), a note says what, why and when, and a log record tells the operator
what to do about it.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from alarmtop.core.model.log_records import log_event
from alarmtop.core.storage.sqlite.files import create_private, fsync_dir, make_dirs

STORAGE_LOG = logging.getLogger("alarmtop.storage")


def wall_ms() -> int:
    # Quarantine file names are read by people next to `ls -l` and the logs, so they
    # carry wall-clock time unless the runtime passes its own clock.
    return time.time_ns() // 1_000_000


class Quarantine:
    """`<data>/quarantine/`: damaged databases moved aside, each with a JSON note.

    `records` lists what this process quarantined; `listeners` are called with each
    record (the runtime can turn them into events)."""

    def __init__(self, data_dir: Path, now_ms: Callable[[], int] = wall_ms) -> None:
        self.data_dir = data_dir
        self.root = data_dir / "quarantine"
        self._now_ms = now_ms
        self.records: list[dict[str, Any]] = []
        self.listeners: list[Callable[[dict[str, Any]], None]] = []

    def _place(self, path: Path) -> Path:
        try:
            rel = path.relative_to(self.data_dir)
        except ValueError:
            rel = Path(path.name)
        return self.root / rel

    def move(self, path: Path, reason: str, what: str) -> Path:
        """Move `path` (and its -wal/-shm files) into quarantine; returns the new path."""
        now = self._now_ms()
        stamp = datetime.fromtimestamp(now / 1000, UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        base = self._place(path)
        dest, n = base.with_name(f"{base.name}.{stamp}"), 1
        while dest.exists() or Path(f"{dest}.json").exists():
            dest, n = base.with_name(f"{base.name}.{stamp}-{n}"), n + 1
        make_dirs(dest.parent)
        for suffix in ("", "-wal", "-shm"):
            src = Path(f"{path}{suffix}")
            if src.exists():
                os.replace(src, f"{dest}{suffix}")
        info = {"event": "storage.quarantined", "what": what, "file": str(path),
                "quarantined_to": str(dest), "reason": reason, "at_ms": now}
        note = Path(f"{dest}.json")
        create_private(note)
        with note.open("w") as f:
            json.dump(info, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(dest.parent)
        fsync_dir(path.parent)
        self.records.append(info)
        # The caller's error says what to do, but only to the caller: the log line is
        # what an operator sees, so it says it too.
        obj = what.startswith("object")
        then = (f"; the object refuses events until a good copy is restored to {path} (or "
                f"the note {dest}.json is deleted to let it start empty)" if obj else "")
        log_event(STORAGE_LOG, logging.ERROR, f"the {'database of ' if obj else ''}{what} is "
                  f"damaged ({reason}): {path} moved to {dest}{then}", **info)
        for listener in list(self.listeners):
            try:
                listener(info)
            except Exception:  # a broken listener must not hide the quarantine
                STORAGE_LOG.exception("quarantine listener failed")
        return dest

    def notes_for(self, path: Path) -> list[Path]:
        """The quarantine notes left for the database that lived at `path`."""
        place = self._place(path)
        if not place.parent.is_dir():
            return []
        return sorted(place.parent.glob(glob.escape(place.name) + ".*.json"))
