"""Runs the fleet does once, whichever node asks first (a cron fire, say)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from alarmtop.core.storage.postgres.schema import SCHEMA

if TYPE_CHECKING:  # the driver is the postgres extra's: never needed to import this
    import asyncpg

KEEP_MS = 86_400_000  # a day's worth is plenty to tell the nodes apart
PRUNE_EVERY = 256  # claims between two prunes of what is older than that


async def claim(pool: asyncpg.Pool, node_id: str, name: str, at_ms: int, prune: bool) -> bool:
    """Whether `node_id` runs the fleet's one `name` at `at_ms`: the first node to ask
    wins it, the others skip it. A node that wins and dies before running it loses that
    one run (as a process that is down misses a fire)."""
    async with pool.acquire() as conn:
        won = await conn.fetchval(
            f"INSERT INTO {SCHEMA}.fleet_once (name, at_ms, node_id) VALUES ($1, $2, $3) "
            "ON CONFLICT DO NOTHING RETURNING 1", name, at_ms, node_id)
        if prune:
            await conn.execute(f"DELETE FROM {SCHEMA}.fleet_once WHERE at_ms < $1",
                               at_ms - KEEP_MS)
    return won is not None
