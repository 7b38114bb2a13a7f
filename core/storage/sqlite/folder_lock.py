"""One runtime per data folder: an exclusive lock on `<data>/.alarmtop.lock`.

Two runtimes on one folder would each load the alarm index and both run the same
alarms. The lock is `flock` on a file of the folder, held from `open()` to
`close()`: the system drops it with the process, so a runtime killed with -9
leaves nothing to clean up. It is taken per open file, so a second runtime in the
same process is refused too. The file holds the pid of the holder, for the message.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from alarmtop.core.model.errors import DataDirInUse
from alarmtop.core.storage.sqlite.files import FILE_MODE

LOCK_FILE = ".alarmtop.lock"


class FolderLock:
    """The exclusive lock of a data folder (`take` and `release` are idempotent)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def take(self) -> None:
        """Take the lock, or raise `DataDirInUse` naming who holds it (nothing held)."""
        if self._fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            os.close(fd)
            who = f"process {holder}" if holder else "another process"
            raise DataDirInUse(
                f"the data folder {self.path.parent} is in use by another alarmtop runtime "
                f"({who}{', this one' if holder == str(os.getpid()) else ''}): two runtimes "
                "on one folder would both run its alarms. Stop the other one, or give this "
                "one a data folder of its own", str(self.path)) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:  # the pid is only for the message: a full disk must not stop us
            pass
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the last descriptor of the open file lets the lock go


def _read(fd: int) -> str:
    try:
        return os.pread(fd, 32, 0).decode(errors="replace").strip()
    except OSError:
        return ""
