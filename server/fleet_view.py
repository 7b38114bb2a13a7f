"""The fleet as the ops channel shows it: the `nodes` query and the header's node summary.

`Runtime.nodes()` is a PostgreSQL query on a fleet (the nodes joined with their live
shard leases), and the feed wants the summary with every delta and snapshot. So
the rows are cached here and fetched at most once per `max_age_s` (1 s) whoever
asks: the feed's ticks, every viewer's snapshot and the `nodes` queries share one
fetch, and askers that come while it runs wait for it rather than start their own.

Times are on the wall clock, as the leases are (not the runtime's clock, which a
test may drive): each row carries `renewed_ago_ms`, its last renewal's age when the
answer was made, so the console needs no clock of its own to say "1.2s ago".

A node is up while it renews within its lease; one that stopped cleanly has
`stopped_ms` and is not up either. On SQLite there is one node, always up, and the
summary says `fleet: false` (the console then shows no node count at all).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from alarmtop.core import Runtime
from alarmtop.server.listing import check_sort, contains, sort_rows, window

MAX_AGE_S = 1.0
DEFAULT_PAGE = 100
log = logging.getLogger("alarmtop.server")


def wall_ms() -> int:
    return int(time.time() * 1000)


class FleetView:
    """The fleet's nodes for the ops channel, fetched at most once per `max_age_s`."""

    def __init__(self, runtime: Runtime, max_age_s: float = MAX_AGE_S,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.rt = runtime
        self.max_age_s = max_age_s
        self._monotonic = monotonic
        self._rows: list[dict[str, Any]] = []
        self._at: float | None = None  # when `_rows` was fetched (monotonic s)
        self._error: str | None = None  # why the last fetch failed, if it did
        self._lock = asyncio.Lock()
        self._told: dict[str, Any] | None = None  # the summary the feed last sent
        self.fetches = 0  # how many times the runtime was asked (for tests)

    @property
    def node_id(self) -> str:
        """The id of the node answering: the one this server runs in."""
        return str(getattr(self.rt.backend, "node_id", "local"))

    @property
    def fleet(self) -> bool:
        return self.rt.node is not None

    async def rows(self) -> list[dict[str, Any]]:
        """The nodes as last fetched, fetched again when older than `max_age_s`. A fetch
        that fails keeps the rows before it (and `_error` says why) until the next try,
        one `max_age_s` later: a PostgreSQL outage does not become a query per tick."""
        if self._fresh():
            return self._rows
        async with self._lock:
            if not self._fresh():  # another asker may have fetched while we waited
                await self._fetch()
        return self._rows

    def _fresh(self) -> bool:
        return self._at is not None and self._monotonic() - self._at < self.max_age_s

    async def _fetch(self) -> None:
        self.fetches += 1
        try:
            self._rows, self._error = list(await self.rt.nodes()), None
        except Exception as exc:  # the database is away: say so, keep what we knew
            if self._error is None:
                log.warning("the fleet's nodes could not be read: %s", exc)
            self._error = f"{type(exc).__name__}: {exc}"
        self._at = self._monotonic()

    def _summarize(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {"total": len(rows),
                               "down": sum(1 for r in rows if not r.get("up")),
                               "node_id": self.node_id, "fleet": self.fleet}
        if self._error is not None:
            out["error"] = self._error
        return out

    async def summary(self) -> dict[str, Any]:
        """What the header shows: how many nodes, how many down, which one is this."""
        self._told = self._summarize(await self.rows())
        return self._told

    async def moved(self) -> bool:
        """Whether the summary changed since the last one handed out (a node went down
        or came up with no event to say so): the feed then sends a delta anyway."""
        return self._summarize(await self.rows()) != self._told

    async def query(self, args: dict[str, Any]) -> dict[str, Any]:
        """The `nodes` query: a page of the fleet's nodes (down ones first unless sorted
        otherwise), the wall time of the answer and the node answering."""
        limit, offset = args.get("limit", DEFAULT_PAGE), args.get("offset", 0)
        text = args.get("filter")
        sort, desc = check_sort("nodes", args.get("sort")), bool(args.get("desc"))
        now = wall_ms()
        me = self.node_id
        every = [node_row(r, now, me) for r in await self.rows()
                 if contains(text, r.get("node_id"), r.get("address"))]
        rows = window(sort_rows("nodes", every, sort, desc), offset, limit)
        out: dict[str, Any] = {"rows": rows, "offset": offset, "total": len(every),
                               "now_ms": now, "node_id": me}
        if self._error is not None:
            out["note"] = f"as last read: {self._error}"
        return out


def node_row(row: dict[str, Any], now_ms: int, me: str) -> dict[str, Any]:
    """A node as the wire carries it: the backend's row, its renewal's age, whether it is
    the node answering, and its state in one word (up, down, or stopped cleanly)."""
    renewed = row.get("renewed_ms")
    state = "up" if row.get("up") else ("stopped" if row.get("stopped_ms") else "down")
    return {**row, "renewed_ago_ms": None if renewed is None else max(0, now_ms - renewed),
            "this": row.get("node_id") == me, "state": state}
