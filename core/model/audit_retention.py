"""How long the audit log keeps its rows (pure): by age and by count, whichever
prunes more. Defaults: 90 days, and at most a million rows (about 1.6 GB at the
size of a refused command's row): a flood of commands cannot fill the disk, and
what an operator did in the last quarter stays."""

from __future__ import annotations

import math
from dataclasses import dataclass

from alarmtop.core.model.errors import InvalidArgument

DEFAULT_DAYS = 90.0
DEFAULT_ROWS = 1_000_000
PRUNE_EVERY_S = 3600.0  # and once at start
PRUNE_CHUNK = 5_000  # rows per write: the runtime's own commits pass in between
DAY_MS = 86_400_000


@dataclass(frozen=True)
class AuditRetention:
    """`days`: rows older than this go (None: kept whatever their age); `rows`: the
    newest this many stay, older ones go (None: no cap)."""

    days: float | None = DEFAULT_DAYS
    rows: int | None = DEFAULT_ROWS

    def __post_init__(self) -> None:
        days, rows = self.days, self.rows
        if days is not None and (isinstance(days, bool) or not isinstance(days, (int, float))
                                 or not math.isfinite(days) or days <= 0):
            raise InvalidArgument(f"audit retention days is a positive number (or None: "
                                  f"keep rows whatever their age), not {days!r}")
        if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int)
                                 or rows < 1):
            raise InvalidArgument(f"audit retention rows is a whole number of at least 1 "
                                  f"(or None: no cap), not {rows!r}")

    def cutoff_ms(self, now_ms: int) -> int | None:
        """Rows written before this go (None: none go for their age)."""
        return None if self.days is None else now_ms - round(self.days * DAY_MS)

    def over(self, count: int) -> int:
        """How many of the oldest rows go for the cap, with `count` rows held."""
        return 0 if self.rows is None else max(0, count - self.rows)
