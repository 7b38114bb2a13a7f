"""Execution logs, history, the ledger and the audit log on PostgreSQL.

The same shape as the SQLite store: checkpoints ride the alarm index's group
commit (so a log and the alarm that acts on it can share one transaction), reads
take connections from the pool.
"""

from __future__ import annotations

import asyncio
import builtins
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from alarmtop.core.durable.operations import ExecutionRecord, OperationRecord
from alarmtop.core.errors import ChainBroken
from alarmtop.core.storage.interface import LogChain
from alarmtop.core.storage.postgres.index import PgAlarmIndex, PgWrite
from alarmtop.core.storage.postgres.schema import SCHEMA

if TYPE_CHECKING:

    from alarmtop.core.storage.postgres.index import PgConn

_dumps = json.JSONEncoder(separators=(",", ":")).encode


class PgChainedWrite:
    """A write of the runtime database that belongs to a `LogChain` (see SQLite's)."""

    __slots__ = ("chain", "fn")

    def __init__(self, fn: PgWrite, chain: LogChain) -> None:
        self.fn, self.chain = fn, chain

    async def __call__(self, conn: PgConn) -> None:
        if self.chain.broken:
            raise ChainBroken("an earlier checkpoint of this invocation was not written; "
                              "the invocation runs again from what was")
        await self.fn(conn)

    def refused(self) -> None:
        self.chain.broken = True


class PgExecutionStore:
    def __init__(self, db: PgAlarmIndex, node_id: str | None = None) -> None:
        self._db = db
        self.node_id = node_id

    def checkpoint(self, execution_id: str, record: ExecutionRecord | None = None,
                   ops: Sequence[OperationRecord] = (),
                   events: Sequence[dict[str, Any]] = (),
                   chain: LogChain | None = None) -> asyncio.Future[None]:
        return self._db.submit(extra=self.checkpoint_write(execution_id, record, ops, events,
                                                           chain))

    @staticmethod
    def checkpoint_write(execution_id: str, record: ExecutionRecord | None = None,
                         ops: Sequence[OperationRecord] = (),
                         events: Sequence[dict[str, Any]] = (),
                         chain: LogChain | None = None) -> PgWrite:
        rec_row = None if record is None else (
            record.id, record.name, record.version, record.status.value, record.created_ms,
            record.updated_ms, _dumps(record.to_dict()))
        op_rows = [(execution_id, op.id, _dumps(op.to_dict())) for op in ops]
        ev_rows = [(execution_id, ev["EventId"], _dumps(ev)) for ev in events]

        async def write(conn: PgConn) -> None:
            if rec_row is not None:
                await conn.execute(
                    f"INSERT INTO {SCHEMA}.executions (id, name, version, status, created_ms, "
                    "updated_ms, data) VALUES ($1,$2,$3,$4,$5,$6,$7) ON CONFLICT (id) DO UPDATE "
                    "SET name = EXCLUDED.name, version = EXCLUDED.version, status = "
                    "EXCLUDED.status, created_ms = EXCLUDED.created_ms, updated_ms = "
                    "EXCLUDED.updated_ms, data = EXCLUDED.data", *rec_row)
            if op_rows:
                await conn.executemany(
                    f"INSERT INTO {SCHEMA}.operations (execution_id, op_id, data) VALUES "
                    "($1,$2,$3) ON CONFLICT (execution_id, op_id) DO UPDATE SET data = "
                    "EXCLUDED.data", op_rows)
            if ev_rows:
                await conn.executemany(f"INSERT INTO {SCHEMA}.history (execution_id, event_id, "
                                       "data) VALUES ($1,$2,$3)", ev_rows)

        return write if chain is None else PgChainedWrite(write, chain)

    def submit(self, write: PgWrite) -> asyncio.Future[None]:
        return self._db.submit(extra=write)

    async def flush(self) -> None:
        await self._db.submit()

    async def get(self, execution_id: str) -> ExecutionRecord | None:
        rows = await self._db._fetch(f"SELECT data FROM {SCHEMA}.executions WHERE id = $1",
                                     execution_id)
        return ExecutionRecord.from_dict(json.loads(rows[0][0])) if rows else None

    async def operations(self, execution_id: str) -> builtins.list[OperationRecord]:
        rows = await self._db._fetch(f"SELECT data FROM {SCHEMA}.operations WHERE "
                                     "execution_id = $1", execution_id)
        return [OperationRecord.from_dict(json.loads(r[0])) for r in rows]

    async def max_event_id(self, execution_id: str) -> int:
        rows = await self._db._fetch(f"SELECT max(event_id) FROM {SCHEMA}.history WHERE "
                                     "execution_id = $1", execution_id)
        return int(rows[0][0] or 0)

    async def history(self, execution_id: str, after: int = 0,
                      limit: int = -1) -> builtins.list[dict[str, Any]]:
        rows = await self._db._fetch(
            f"SELECT data FROM {SCHEMA}.history WHERE execution_id = $1 AND event_id > $2 "
            "ORDER BY event_id LIMIT $3", execution_id, after, None if limit < 0 else limit)
        return [json.loads(r[0]) for r in rows]

    async def list(self, status: str | None = None, limit: int = 100,
                   offset: int = 0) -> builtins.list[ExecutionRecord]:
        where, params = ("WHERE status = $3", [status]) if status else ("", [])
        rows = await self._db._fetch(
            f"SELECT data FROM {SCHEMA}.executions {where} ORDER BY CASE status "
            "WHEN 'needs_human' THEN 0 WHEN 'failed' THEN 1 WHEN 'running' THEN 2 "
            "WHEN 'suspended' THEN 3 ELSE 4 END, updated_ms DESC LIMIT $1 OFFSET $2",
            limit, offset, *params)
        return [ExecutionRecord.from_dict(json.loads(r[0])) for r in rows]

    async def counts(self) -> dict[str, int]:
        rows = await self._db._fetch(f"SELECT status, count(*) FROM {SCHEMA}.executions "
                                     "GROUP BY status")
        return {r[0]: int(r[1]) for r in rows}

    # -- the idempotency ledger -----------------------------------------------------------

    async def ledger_deliver(self, key: str, value: Any, at_ms: int,
                             honour_key: bool = True) -> bool:
        """True the first time `key` is delivered: decided inside the write."""
        seen: builtins.list[int] = []

        async def write(conn: PgConn) -> None:
            n = await conn.fetchval(
                f"INSERT INTO {SCHEMA}.ledger (key, value, at_ms, deliveries) VALUES "
                "($1,$2,$3,1) ON CONFLICT (key) DO UPDATE SET deliveries = "
                f"{SCHEMA}.ledger.deliveries + 1 RETURNING deliveries", key, _dumps(value),
                at_ms)
            seen.append(int(n))
        await self._db.submit(extra=write)
        return seen[-1] == 1 or not honour_key

    async def ledger_get(self, key: str) -> dict[str, Any] | None:
        rows = await self._db._fetch(f"SELECT value, at_ms, deliveries FROM {SCHEMA}.ledger "
                                     "WHERE key = $1", key)
        if not rows:
            return None
        return {"value": json.loads(rows[0][0]), "at_ms": rows[0][1], "deliveries": rows[0][2]}

    # -- audit log ------------------------------------------------------------------------

    async def audit_append(self, entry: dict[str, Any]) -> None:
        row = (entry["at_ms"], entry["actor"], entry.get("role"), entry["action"],
               entry.get("target"), entry.get("reason"), bool(entry.get("ok", True)),
               _dumps(entry.get("detail")), self.node_id)

        async def write(conn: PgConn) -> None:
            await conn.execute(f"INSERT INTO {SCHEMA}.audit (at_ms, actor, role, action, target, "
                               "reason, ok, detail, node) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)",
                               *row)
        await self._db.submit(extra=write)

    async def audit_list(self, limit: int = 100,
                         offset: int = 0) -> builtins.list[dict[str, Any]]:
        rows = await self._db._fetch(
            f"SELECT seq, at_ms, actor, role, action, target, reason, ok, detail, node FROM "
            f"{SCHEMA}.audit ORDER BY seq DESC LIMIT $1 OFFSET $2", limit, offset)
        keys = ("seq", "at_ms", "actor", "role", "action", "target", "reason", "ok", "detail",
                "node")
        out = [dict(zip(keys, r, strict=True)) for r in rows]
        for d in out:
            d["ok"], d["detail"] = bool(d["ok"]), json.loads(d["detail"])
        return out
