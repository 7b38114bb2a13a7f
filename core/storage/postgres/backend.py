"""`PostgresBackend`: alarmtop's storage in PostgreSQL, for one node or a fleet.

Everything durable lives in one PostgreSQL database (schema `alarmtop`): alarm
rows, execution logs and history, the ledger, the audit log, object key-values,
intents and schemas. Objects hash to a fixed number of shards; a node owns a shard
through a lease row (owner, epoch, expiry) and fences every write it makes by that
epoch in the same transaction, so a node that lost a lease can never commit over
the new owner. The shard count is stored; a node started with another refuses.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from alarmtop.core.errors import InvalidArgument, StorageError
from alarmtop.core.storage.postgres.executions import PgExecutionStore
from alarmtop.core.storage.postgres.index import LeaseLost, PgAlarmIndex
from alarmtop.core.storage.postgres.objects import PgObjectStore
from alarmtop.core.storage.postgres.schema import MIGRATIONS, SCHEMA, statements

if TYPE_CHECKING:
    import asyncpg

    from alarmtop.core.storage.postgres.index import PgConn

ObjectKey = tuple[str, str]
DEFAULT_POOL = 20


def shard_of(key: ObjectKey, shards: int) -> int:
    """The shard of an object: a stable hash of its class and name."""
    digest = hashlib.blake2b(f"{key[0]}\x00{key[1]}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def _asyncpg() -> Any:
    try:
        import asyncpg
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise InvalidArgument("PostgresBackend needs asyncpg: pip install 'alarmtop[postgres]'"
                              ) from exc
    return asyncpg


class PostgresBackend:
    """Storage on PostgreSQL (asyncpg).

    Args:
        dsn: a libpq connection string or URL; its password may come from `PGPASSFILE`.
        node_id: this node's name in the fleet (default `host-pid`).
        shards: how many shards objects hash to (stored in the database at first start;
            a node started with another count refuses to start).
        lease_s: how long a shard lease lasts unless renewed.
        pool_size: connections for reads and object events.
    """

    def __init__(self, dsn: str, node_id: str | None = None, shards: int = 64,
                 lease_s: float = 10.0, *, pool_size: int = DEFAULT_POOL) -> None:
        if not isinstance(shards, int) or isinstance(shards, bool) or not 1 <= shards <= 4096:
            raise InvalidArgument(f"shards is a whole number from 1 to 4096, not {shards!r}")
        if not lease_s > 0:
            raise InvalidArgument(f"lease_s must be a positive number of seconds, not {lease_s!r}")
        self.dsn = dsn
        self.node_id = node_id or f"{socket.gethostname()}-{os.getpid()}"
        self.shards = shards
        self.lease_s = float(lease_s)
        self.pool_size = pool_size
        self._pool: asyncpg.Pool | None = None
        self.epochs: dict[int, int] = {}  # shards this node holds, with their lease epoch
        self._index = PgAlarmIndex(self._require_pool, self._connect, self.shard_of,
                                   self.fence)
        self._executions = PgExecutionStore(self._index, self.node_id)

    # -- the protocol ---------------------------------------------------------------------

    @property
    def alarm_index(self) -> PgAlarmIndex:
        return self._index

    @property
    def execution_store(self) -> PgExecutionStore:
        return self._executions

    def shard_of(self, key: ObjectKey) -> int:
        return shard_of(key, self.shards)

    def _require_pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StorageError("the PostgreSQL backend is not open", "postgresql")
        return self._pool

    async def _connect(self) -> PgConn:
        conn: PgConn = await _asyncpg().connect(self.dsn)
        return conn

    async def open(self) -> None:
        asyncpg = _asyncpg()
        try:
            self._pool = await asyncpg.create_pool(self.dsn, min_size=1, max_size=self.pool_size)
        except (OSError, asyncpg.PostgresError) as exc:
            raise StorageError(f"cannot connect to PostgreSQL ({exc}); check the DSN, that the "
                               "server runs, and the password (PGPASSFILE)", "postgresql") from exc
        try:
            async with self._pool.acquire() as conn:
                await self._migrate(conn)
                await self._check_shards(conn)
                await self._claim_all(conn)
            await self._index.open()
        except BaseException:
            await self._pool.close()
            self._pool = None
            raise

    async def close(self) -> None:
        await self._index.close()
        if self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                async with pool.acquire() as conn:
                    # A clean stop hands its shards over at once.
                    await conn.execute(f"UPDATE {SCHEMA}.shards SET owner = NULL, expires_ms = 0 "
                                       "WHERE owner = $1", self.node_id)
            except Exception:  # the next owner waits for the leases to run out instead
                pass
            try:
                await asyncio.wait_for(pool.close(), 5.0)
            except (TimeoutError, Exception):
                pool.terminate()
        self.epochs.clear()

    async def open_object(self, object_class: str, object_name: str, create: bool = True,
                          intent: tuple[int, int | None] = (0, None)) -> PgObjectStore | None:
        key = (object_class, object_name)
        return await PgObjectStore.open(self._require_pool(), key, create, intent,
                                        self.shard_of(key), self.fence)

    async def count_objects(self) -> int:
        return await self._index.count_objects()

    async def list_objects(self, limit: int, offset: int = 0,
                           contains: str | None = None) -> list[tuple[str, str]]:
        return await self._index.list_objects(limit, offset, contains)

    # -- schema and shards ----------------------------------------------------------------

    async def _migrate(self, conn: PgConn) -> None:
        async with conn.transaction():
            # One node migrates at a time; the others wait here, then find it done.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('alarmtop-migrate'))")
            await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
            await conn.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA}.meta "
                               "(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            version = int(await conn.fetchval(
                f"SELECT value FROM {SCHEMA}.meta WHERE key = 'schema'") or 0)
            if version > len(MIGRATIONS):
                raise StorageError(f"the database's alarmtop schema is version {version}, newer "
                                   f"than this alarmtop knows ({len(MIGRATIONS)}); upgrade "
                                   "alarmtop on this node", "postgresql")
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                for stmt in statements(script):
                    await conn.execute(stmt)
                await conn.execute(f"INSERT INTO {SCHEMA}.meta (key, value) VALUES ('schema', $1) "
                                   "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                                   str(number))

    async def _check_shards(self, conn: PgConn) -> None:
        async with conn.transaction():
            stored = await conn.fetchval(f"SELECT value FROM {SCHEMA}.meta WHERE key = 'shards'")
            if stored is None:
                await conn.execute(f"INSERT INTO {SCHEMA}.meta (key, value) VALUES ('shards', $1) "
                                   "ON CONFLICT DO NOTHING", str(self.shards))
                await conn.executemany(f"INSERT INTO {SCHEMA}.shards (shard) VALUES ($1) "
                                       "ON CONFLICT DO NOTHING",
                                       [(i,) for i in range(self.shards)])
                stored = await conn.fetchval(
                    f"SELECT value FROM {SCHEMA}.meta WHERE key = 'shards'")
        if int(stored) != self.shards:
            raise InvalidArgument(f"this database was set up with {stored} shards; this node was "
                                  f"started with {self.shards}: start it with shards={stored} "
                                  "(the shard count of a fleet cannot change)")

    async def _claim_all(self, conn: PgConn) -> None:
        """One node alone: it takes every shard (a fleet shares them: see the lease loop)."""
        rows = await conn.fetch(f"UPDATE {SCHEMA}.shards SET owner = $1, epoch = epoch + 1, "
                                "expires_ms = $2 RETURNING shard, epoch", self.node_id,
                                2**62)
        self.epochs = {int(r[0]): int(r[1]) for r in rows}

    async def fence(self, conn: PgConn, shards: set[int]) -> None:
        """In the writer's transaction: proceed only while this node still holds each
        shard's lease at the epoch it claimed it with. The rows are locked for share,
        so a claim by another node waits for this transaction and then wins."""
        wanted = sorted(shards)
        rows = await conn.fetch(f"SELECT shard, owner, epoch FROM {SCHEMA}.shards WHERE "
                                "shard = ANY($1::int[]) FOR SHARE", wanted)
        held = self.epochs
        lost = [int(r[0]) for r in rows if r[1] != self.node_id or held.get(int(r[0])) != r[2]]
        if lost or len(rows) != len(wanted):
            raise LeaseLost(f"this node ({self.node_id}) no longer holds shard(s) "
                            f"{lost or wanted}: nothing of the write was kept; the objects' new "
                            "owner carries on", "postgresql")

    def owned_shards(self) -> Sequence[int]:
        return sorted(self.epochs)
