"""A node's id: what one may be, and whether another running process is that node."""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse
from typing import TYPE_CHECKING

from alarmtop.core.model.errors import InvalidArgument
from alarmtop.core.storage.postgres.schema import SCHEMA

if TYPE_CHECKING:
    from alarmtop.core.storage.postgres.database import PgConn

PROBE_S = 1.0  # how long a start waits for a node that may still run under its id
MAX_NODE_ID = 100


def good_node_id(node_id: object) -> bool:
    return isinstance(node_id, str) and 0 < len(node_id) <= MAX_NODE_ID and \
        node_id.isprintable() and not any(c.isspace() for c in node_id)


async def answers(address: str) -> bool:
    """Whether something accepts connections at a node's recorded address."""
    parts = urllib.parse.urlsplit(address)
    if not parts.hostname or not parts.port:
        return False
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(parts.hostname, parts.port),
                                           PROBE_S)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()
    return True


async def check_node_id(conn: PgConn, node_id: str, incarnation: str, address: str | None,
                        lease_ms: int, now_ms: int) -> None:
    """Refuse to start as a node another running process is: one that renewed the
    node's row within a lease and still answers at the address it recorded. A node
    that crashed and restarts at once finds nothing listening there, and goes on
    as itself (its shards free to take at once)."""
    row = await conn.fetchrow(f"SELECT address, renewed_ms, stopped_ms, incarnation FROM "
                              f"{SCHEMA}.nodes WHERE node_id = $1", node_id)
    if row is None or row[2] is not None or row[3] == incarnation:
        return
    age_ms = now_ms - int(row[1])
    recorded = row[0]
    if age_ms >= lease_ms or not recorded or recorded == address:
        return  # gone for a lease, or its port is this process's own now
    if await answers(recorded):
        raise InvalidArgument(
            f"node id {node_id!r} is in use: a node by that name renewed its "
            f"leases {max(age_ms, 0) / 1000:.1f} s ago and answers at {recorded}. Give "
            "this node a node id of its own (alarmtop serve --node-id, or "
            "PostgresBackend(node_id=...)), or stop that one first")
