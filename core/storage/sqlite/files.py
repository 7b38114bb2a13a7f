"""Files and folders of a data dir: private to their owner, durable once created."""

from __future__ import annotations

import os
from pathlib import Path

FILE_MODE = 0o600  # databases hold user data, execution inputs, the audit log
DIR_MODE = 0o700


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: Path) -> None:
    """Create `path` and its missing parents (mode 0700), each made durable in its
    parent: a power loss must not drop a folder a new object's file went into."""
    missing: list[Path] = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue
        fsync_dir(d.parent)


def create_private(path: Path) -> None:
    """Create an empty file only its owner can read, if none is there: SQLite then
    gives its -wal and -shm files the same mode."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, FILE_MODE)
    os.close(fd)
