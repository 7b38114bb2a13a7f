"""The time of shard leases: PostgreSQL's clock, and no node's.

Every lease time is written and compared in the database's own time
(`clock_timestamp()`): a lease's expiry, a node's last renewal, the moment a
node stopped. So a node whose clock runs fast does not hold its shards longer
than its lease, and one whose clock runs slow does not take shards whose
lease has not run out, nor have its own taken early.

What a node may still run, it tells by its own monotonic clock (which no one
sets): a lease round that started at local time `t0` wrote an expiry of at least
`t0 + lease` in the database's time, since its statements ran after `t0`. So
until `t0 + lease`, less a margin, the lease has not run out anywhere, whatever
the machine's wall clock says (`LocalDeadlines`). Past that, with no renewal
landed, the node runs nothing of the shard: it has lapsed here, and a later
renewal of the same lease (nobody took it meanwhile) brings it back.

The wall clock of the node's machine still times what its objects do (alarms,
`ctx.now_ms()`): keep the nodes' clocks in step (NTP) for alarms to fire on time
across nodes; leases and fencing do not depend on it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from alarmtop.core.storage.postgres.database import PgConn

# PostgreSQL's clock in epoch milliseconds, as SQL (the moment the statement runs).
NOW_MS = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
MAX_MARGIN_S = 1.0


async def db_now_ms(conn: PgConn, timeout_ms: int | None = None) -> int:
    """The database's clock now, in epoch milliseconds; with `timeout_ms`, the rest of
    the transaction's statements give up after that long (`statement_timeout`)."""
    if timeout_ms is None:
        return int(await conn.fetchval(f"SELECT {NOW_MS}"))
    now = await conn.fetchval(f"SELECT {NOW_MS} FROM set_config('statement_timeout', $1, "
                              "true)", str(max(1, timeout_ms)))
    return int(now)


def local_now() -> float:
    """This node's monotonic clock (seconds): never set, never skewed by NTP."""
    return time.monotonic()


class LocalDeadlines:
    """Until when (on this node's monotonic clock) it may run each shard it holds."""

    def __init__(self, lease_s: float) -> None:
        self.lease_s = lease_s
        self._until: dict[int, float] = {}
        self.lapsed: set[int] = set()  # held in the table, not run here until renewed

    @property
    def margin_s(self) -> float:
        # An event takes a moment to reach its commit, and the keeper to notice: stop
        # running a shard a bit before its lease can have run out.
        return min(MAX_MARGIN_S, self.lease_s / 5)

    def renewed(self, shards: Iterable[int], started: float) -> None:
        """`shards` were renewed (or claimed) by statements that ran after `started`."""
        for shard in shards:
            self._until[shard] = started + self.lease_s
            self.lapsed.discard(shard)

    def set_all(self, shards: Iterable[int], started: float) -> None:
        """After a lease round: exactly `shards` are held, from `started` on."""
        self._until = dict.fromkeys(shards, started + self.lease_s)
        self.lapsed.clear()

    def may_run(self, shard: int, now: float | None = None) -> bool:
        until = self._until.get(shard)
        return until is not None and (local_now() if now is None else now) < \
            until - self.margin_s

    def next_lapse(self) -> float | None:
        """When the soonest held shard stops being runnable (None: none held)."""
        if not self._until:
            return None
        return min(self._until.values()) - self.margin_s

    def lapse(self, now: float | None = None) -> set[int]:
        """The held shards whose time ran out with no renewal: they lapse (runnable
        again only once a renewal lands)."""
        now = local_now() if now is None else now
        gone = {s for s, until in self._until.items() if now >= until - self.margin_s}
        for shard in gone:
            del self._until[shard]
        self.lapsed |= gone
        return gone

    def forget(self, shards: Iterable[int]) -> None:
        for shard in shards:
            self._until.pop(shard, None)
            self.lapsed.discard(shard)

    def clear(self) -> None:
        self._until.clear()
        self.lapsed.clear()
