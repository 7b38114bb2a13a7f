"""Refused commands, coalesced in the audit log: every one counted, not every one a row.

A client refused again and again (a viewer sending operator commands, a script
past its rate limit) would otherwise write one row of about 1.6 KB per frame,
which nothing prunes: 20 connections wrote 757 rows a second. Per client address
and role, the first `full_rows` refusals of a window (`window_ms`, on the
runtime's clock) are rows of their own, as before; the rest of that window are
counted, by command, and written as one row when the window ends: "N refused
commands of kinds ...". So a person's occasional mistake keeps its own row, and
a flood costs one row a window, whatever its pace or number of connections.

Pure: the ledger decides and keeps the counts; `OpsService` writes the rows.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

WINDOW_MS = 60_000
FULL_ROWS = 10
MAX_CLIENTS_NAMED = 5  # connections named in a summary row (the count is whole)

Key = tuple[str, str]  # (client host, role)


@dataclass
class Summary:
    """The refusals of one client and role in one window that have no row of their own."""

    host: str
    role: str
    start_ms: int
    end_ms: int
    ops: Counter[str] = field(default_factory=Counter)
    clients: list[str] = field(default_factory=list)
    last_error: str | None = None

    @property
    def count(self) -> int:
        return sum(self.ops.values())

    def text(self, full_rows: int) -> str:
        kinds = ", ".join(f"{op} x{n}" for op, n in self.ops.most_common())
        seconds = (self.end_ms - self.start_ms) / 1000
        return (f"{self.count} refused commands of kinds {kinds} from {self.host} in "
                f"{seconds:g} s (past the first {full_rows}, counted in this one row)")


@dataclass
class _Window:
    start_ms: int
    written: int = 0
    summary: Summary | None = None


class RefusalLedger:
    """Which refusals get a row of their own, and the counts of the others.

    Args:
        window_ms: how long a window lasts, from a client's first refusal in it.
        full_rows: refusals of a window written one by one before the rest are counted.
    """

    def __init__(self, window_ms: int = WINDOW_MS, full_rows: int = FULL_ROWS) -> None:
        if window_ms <= 0 or full_rows < 0:
            raise ValueError("a refusal window is > 0 ms with >= 0 rows of their own, not "
                             f"{window_ms} ms and {full_rows}")
        self.window_ms, self.full_rows = window_ms, full_rows
        self._windows: dict[Key, _Window] = {}
        self._ended: list[Summary] = []

    def note(self, key: Key, op: str, now_ms: int, client: str, error: str) -> bool:
        """Count a refusal; True if it gets a row of its own (else it is in a summary)."""
        self._end_windows(now_ms, key)
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = _Window(now_ms)
        if window.written < self.full_rows:
            window.written += 1
            return True
        if window.summary is None:
            window.summary = Summary(key[0], key[1], window.start_ms,
                                     window.start_ms + self.window_ms)
        summary = window.summary
        summary.ops[op] += 1
        summary.last_error = error
        if client not in summary.clients and len(summary.clients) < MAX_CLIENTS_NAMED:
            summary.clients.append(client)
        return False

    def take(self, now_ms: int) -> list[Summary]:
        """The summaries of the windows ended by `now_ms`, each given once."""
        self._end_windows(now_ms)
        ended, self._ended = self._ended, []
        return ended

    def take_all(self) -> list[Summary]:
        """Every summary, ended or not (at shutdown), each given once; ends the windows."""
        ended = self._ended + [w.summary for w in self._windows.values() if w.summary]
        self._ended, self._windows = [], {}
        return ended

    def _end_windows(self, now_ms: int, only: Key | None = None) -> None:
        keys = [only] if only is not None else list(self._windows)
        for key in keys:
            window = self._windows.get(key)
            if window is not None and now_ms >= window.start_ms + self.window_ms:
                del self._windows[key]
                if window.summary is not None:
                    self._ended.append(window.summary)


def host_of(address: str) -> str:
    """`127.0.0.1:50312` -> `127.0.0.1` (`[::1]:5` and `::1:5` -> `::1`)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return address
    return host.strip("[]")


__all__ = ["FULL_ROWS", "WINDOW_MS", "RefusalLedger", "Summary", "host_of"]
