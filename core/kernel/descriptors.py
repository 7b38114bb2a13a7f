"""File descriptors: what the runtime will need, and what the process may have.

Each open object database holds three descriptors (the file, its -wal and its
-shm; aiosqlite adds a thread, not a descriptor), the runtime database three
more, and a server one per socket it may hold open. At start the runtime adds
those up for `max_resident` objects and the sockets its server reserved, and
compares the sum with `RLIMIT_NOFILE`: when the soft limit is short it is raised
to the hard one (allowed without privileges), and when even that is short the
start fails with a message saying what to change. Starting anyway would fail
object events one by one once the descriptors ran out, long after anyone was
watching the start.

`plan()` is the pure decision; `fit()` applies it. `out_of_descriptors()` tells
an open that failed for want of descriptors (EMFILE) from other failures, so the
event it failed says so.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from typing import NamedTuple

from alarmtop.core.model.errors import DescriptorBudget, InvalidArgument

FDS_PER_DATABASE = 3  # the file, its -wal, its -shm
# What the process uses beside databases and sockets, and is not open yet at start:
# the event loop's selector and self-pipe, log files, a thread's pipe in `to_thread`,
# the short-lived files of a database being created, handshakes. A started runtime
# with its server holds 4 beyond its object databases (runtime.sqlite and its two, the
# listening socket); the rest is room to spare.
SLACK = 32


@dataclass(frozen=True)
class Need:
    """What one runtime needs: `databases` open at once (the resident objects and the
    runtime's own), `sockets` its server may hold, and `in_use` already open."""

    databases: int
    sockets: int
    in_use: int
    max_resident: int
    sockets_what: str = ""

    @property
    def total(self) -> int:
        return self.databases * FDS_PER_DATABASE + self.sockets + self.in_use + SLACK


class Plan(NamedTuple):
    """`soft`: the soft limit to set (unchanged when it fits); `fits`: whether it does."""

    soft: int
    fits: bool


def plan(need: int, soft: int, hard: int) -> Plan:
    """Whether `need` descriptors fit under (`soft`, `hard`), raising the soft limit to
    the hard one when that is what it takes. A hard limit of -1 is unlimited."""
    if need <= soft:
        return Plan(soft, True)
    ceiling = hard if hard >= 0 else max(need, soft)
    return Plan(max(soft, ceiling), need <= ceiling)


def shortfall(need: Need, limit: int, hard: int) -> str:
    """The message of a budget that does not fit: the sum, the limit, what to change."""
    per = FDS_PER_DATABASE
    room = limit - need.total + need.max_resident * per
    fits_resident = max(0, room // per)
    sockets = f", {need.sockets:,} for {need.sockets_what or 'the server'}" if need.sockets \
        else ""
    hard_text = "unlimited" if hard < 0 else f"{hard:,}"
    raise_it = (f"ulimit -n {need.total:,} in the shell that starts alarmtop (LimitNOFILE= in "
                "a systemd unit)")
    if fits_resident >= 1:
        fix = (f"Lower max_resident to {fits_resident:,} or less (Runtime(max_resident=...)), "
               f"or raise the limit: {raise_it}")
    else:
        fix = (f"Raise the limit: {raise_it}; even one resident object does not fit beside "
               "the rest" + (" (or lower the server's socket caps)" if need.sockets else ""))
    return (f"not enough file descriptors: max_resident={need.max_resident:,} objects need "
            f"about {need.total:,} ({per} per open database: the file, its -wal and -shm"
            f"{sockets}, {need.in_use:,} already open, {SLACK} spare), but this process may "
            f"open {limit:,} (ulimit -n; hard limit {hard_text}). {fix}")


def in_use() -> int:
    """Descriptors this process has open now (an estimate where /proc is missing)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return max(0, len(os.listdir(folder)) - 1)  # the listing's own descriptor
        except OSError:
            continue
    return 16


def limits() -> tuple[int, int]:
    """(soft, hard) RLIMIT_NOFILE; (-1, -1) where the platform has none."""
    try:
        import resource
    except ImportError:  # not on this platform: nothing to compare with
        return -1, -1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    inf = resource.RLIM_INFINITY
    return (-1 if soft == inf else soft), (-1 if hard == inf else hard)


def fit(need: Need) -> int:
    """Make room for `need` or raise `DescriptorBudget`; returns the soft limit in force
    (-1: unlimited)."""
    soft, hard = limits()
    if soft < 0:
        return soft
    decided = plan(need.total, soft, hard)
    if decided.soft != soft:
        import resource
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (decided.soft, resource.getrlimit(
                resource.RLIMIT_NOFILE)[1]))
            soft = decided.soft
        except (ValueError, OSError):  # a platform cap below the hard limit: stay
            decided = Plan(soft, need.total <= soft)
    if not decided.fits:
        raise DescriptorBudget(shortfall(need, soft, hard), need.total, soft)
    return soft


def out_of_descriptors(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) is the process running out of descriptors.

    SQLite reports a failed open() as "unable to open database file", without the
    errno: then the process is asked whether it can still open a descriptor."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.EMFILE, errno.ENFILE):
            return True
        seen = seen.__cause__ or seen.__context__
    if "unable to open database file" not in str(exc):
        return False
    try:
        fd = os.open(os.devnull, os.O_RDONLY)
    except OSError as probe:
        return probe.errno in (errno.EMFILE, errno.ENFILE)
    os.close(fd)
    return False


class Reservations:
    """The descriptors a runtime counts on: `max_resident` object databases, its own,
    and the sockets servers reserved (`reserve`). `check()` fits them under the
    process's limit, raising the soft limit to the hard one if need be."""

    def __init__(self, max_resident: int) -> None:
        self.max_resident = max_resident
        self._reserved: dict[str, int] = {}  # who reserved descriptors: how many
        self.limit: int | None = None  # the soft limit checked last

    def reserve(self, what: str, count: int) -> None:
        if count < 0:
            raise InvalidArgument(f"reserve_descriptors: count is >= 0, not {count}")
        self._reserved[what] = count

    def check(self, open_databases: int | None = None) -> int:
        """Fit the budget; the soft limit in force, -1 for none. `open_databases`: how
        many databases a running runtime holds open already (their descriptors are
        counted once, in the budget). Raises `DescriptorBudget` when it cannot fit."""
        open_now = in_use()
        if open_databases is not None:
            open_now = max(0, open_now - FDS_PER_DATABASE * open_databases)
        need = Need(databases=self.max_resident + 1, sockets=sum(self._reserved.values()),
                    in_use=open_now, max_resident=self.max_resident,
                    sockets_what=" and ".join(self._reserved))
        self.limit = fit(need)
        return self.limit
