"""A lease ledger: leases expire by alarm, and the table is the truth.

The alarm always points at the earliest expiry and only ever moves earlier. On
alarm the ledger runs the side effect first, then deletes the row, then re-arms
for the next expiry, so a failing side effect is retried and never lost. After a
restart (or a dead letter) the constructor re-arms from the table.
"""

from __future__ import annotations

from typing import Any, Protocol

from alarmtop.core import AlarmInfo, DurableObject, ObjectContext


class ExpirySink(Protocol):
    async def lease_expired(self, ledger: str, lease_id: str, expires_ms: int) -> None: ...


class LeaseLedger(DurableObject):
    def __init__(self, ctx: ObjectContext, env: Any) -> None:
        super().__init__(ctx, env)
        ctx.block_concurrency_while(self._setup)

    async def _setup(self) -> None:
        await self.ctx.storage.sql.exec(
            "CREATE TABLE IF NOT EXISTS leases ("
            " lease_id TEXT PRIMARY KEY, expires_ms BIGINT NOT NULL)")
        row = (await self.ctx.storage.sql.exec(
            "SELECT min(expires_ms) AS earliest FROM leases")).one()
        if row["earliest"] is not None:
            await self._arm_no_later_than(row["earliest"])

    async def _arm_no_later_than(self, at_ms: int) -> None:
        current = await self.ctx.storage.get_alarm()
        if current is None or at_ms < current:
            await self.ctx.storage.set_alarm(at_ms)

    async def grant(self, lease_id: str, ttl_ms: int) -> int:
        """Grant (or extend) a lease; returns when it expires."""
        expires = self.ctx.now_ms() + int(ttl_ms)
        await self.ctx.storage.sql.exec(
            "INSERT INTO leases (lease_id, expires_ms) VALUES (?, ?) "
            "ON CONFLICT (lease_id) DO UPDATE SET expires_ms = excluded.expires_ms",
            lease_id, expires)
        await self._arm_no_later_than(expires)
        return expires

    async def release(self, lease_id: str) -> bool:
        cur = await self.ctx.storage.sql.exec("DELETE FROM leases WHERE lease_id = ?", lease_id)
        return cur.rows_written > 0

    async def leases(self) -> dict[str, int]:
        rows = await self.ctx.storage.sql.exec(
            "SELECT lease_id, expires_ms FROM leases ORDER BY expires_ms")
        return {r["lease_id"]: r["expires_ms"] for r in rows}

    async def alarm(self, info: AlarmInfo) -> None:
        now = self.ctx.now_ms()
        expired = await self.ctx.storage.sql.exec(
            "SELECT lease_id, expires_ms FROM leases WHERE expires_ms <= ? "
            "ORDER BY expires_ms", now)
        for row in expired:
            sink: ExpirySink | None = getattr(self.env, "expiry_sink", None)
            if sink is not None:
                await sink.lease_expired(self.ctx.id, row["lease_id"], row["expires_ms"])
            await self.ctx.storage.sql.exec("DELETE FROM leases WHERE lease_id = ?",
                                            row["lease_id"])
        nxt = (await self.ctx.storage.sql.exec(
            "SELECT min(expires_ms) AS earliest FROM leases")).one()["earliest"]
        if nxt is not None:
            await self.ctx.storage.set_alarm(nxt)
