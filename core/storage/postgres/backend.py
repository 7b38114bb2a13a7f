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
import functools
import logging
import os
import secrets
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from alarmtop.core.model import leases
from alarmtop.core.model.errors import InvalidArgument, LeaseLost, StorageError
from alarmtop.core.model.node_tls import NodeTls, check_node_host
from alarmtop.core.storage.backend_stores import BackendStores
from alarmtop.core.storage.postgres import fleet_once
from alarmtop.core.storage.postgres.alarm_rows import PgAlarmRows, PgAlarmRowWriter
from alarmtop.core.storage.postgres.audit_rows import PgAuditRows
from alarmtop.core.storage.postgres.database import PgDatabase
from alarmtop.core.storage.postgres.event_pool import (
    EventConnections,
    LeaseConnection,
    asyncpg_module,
)
from alarmtop.core.storage.postgres.execution_log import MERGED, PgExecutionLog
from alarmtop.core.storage.postgres.fault_rows import PgFaultStore
from alarmtop.core.storage.postgres.lease_clock import NOW_MS, LocalDeadlines, db_now_ms, local_now
from alarmtop.core.storage.postgres.node_ids import MAX_NODE_ID, check_node_id, good_node_id
from alarmtop.core.storage.postgres.objects import PgObjectStore
from alarmtop.core.storage.postgres.operator_rows import PgOperatorRows
from alarmtop.core.storage.postgres.schema import (
    SCHEMA,
    check_shards,
    cluster_secret,
    install_id,
    migrate,
)
from alarmtop.core.storage.postgres.shards import counter_slot, shard_of
from alarmtop.core.storage.tasks import TaskOwner

if TYPE_CHECKING:
    import asyncpg

    from alarmtop.core.ports import FaultMirror
    from alarmtop.core.storage.postgres.database import PgConn

ObjectKey = tuple[str, str]
DEFAULT_POOL = 20
RUNTIME_POOL = 6  # the runtime's own reads: the alarm index, listings, owners, faults
# Told (gained, lost) when the shards this node holds change.
ShardListener = Callable[[set[int], set[int]], None]
log = logging.getLogger("alarmtop.fleet")


# `leases.claimable` in SQL ($1 this node, $4 now, $5 the live nodes): free and not
# offered to another live node (or the offer ran out), or its lease ran out, or its
# owner is not live. A round may also take back rows of its own id (a restart: the
# plan lists them only then); a claim on demand never takes a live lease of its own.
_CLAIMABLE = ("(CASE WHEN owner IS NULL THEN (offered_to IS NULL OR offered_to = $1 OR "
              "expires_ms <= $4 OR NOT offered_to = ANY($5::text[])) ELSE (expires_ms <= $4 "
              "OR NOT owner = ANY($5::text[])) END)")
_CLAIMABLE_IN_ROUND = f"(owner = $1 OR {_CLAIMABLE})"


# A shard held with the epoch this node holds it by ($2 the shards, $3 their epochs):
# a release never touches a lease another process took under the same node id.
_HELD_EPOCHS = "(shard, epoch) IN (SELECT * FROM unnest($2::int[], $3::bigint[]))"


async def _keep_session(conn: Any) -> None:
    """The pool's reset of a connection given back: none. asyncpg's default (unlock
    advisory locks, close cursors, unlisten, reset settings) is a round trip after every
    pooled read, and the runtime's own statements leave no session state (its locks and
    settings are the transaction's). An object's own SQL may leave some: its store
    resets the connection itself (objects.py). asyncpg still rolls back a transaction
    left open before calling this."""


class PostgresBackend(BackendStores):
    """Storage on PostgreSQL (asyncpg).

    Args:
        dsn: a libpq connection string or URL; its password may come from `PGPASSFILE`.
        node_id: this node's name in the fleet (default `host-pid`).
        shards: how many shards objects hash to (stored in the database at first start;
            a node started with another count refuses to start).
        lease_s: how long a shard lease lasts unless renewed.
        pool_size: connections for objects' events (an event holds one from its first
            storage call to its commit); when all are held, up to as many more are
            opened for the events that wait. The runtime's own reads and writes have
            connections of their own, and the lease keeper one of its own.
        node_host: the address this node listens on for other nodes' calls (a free
            port on it is chosen and recorded in PostgreSQL); other nodes must reach it.
            Off loopback it needs TLS (or `node_insecure_no_tls`).
        node_tls_cert, node_tls_key: this node's certificate and key (PEM): its node
            links are then `wss://`, and the certificate must name `node_host`.
        node_tls_ca: what this node trusts when it calls another on `wss://` (default:
            the system's authorities and its own certificate).
        node_insecure_no_tls: listen off loopback without TLS (only where something
            else encrypts the traffic, e.g. a VPN). The cluster secret never crosses
            the wire either way.

    Leases are timed by PostgreSQL's clock, never a node's (`lease_clock`).
    """

    def __init__(self, dsn: str, node_id: str | None = None, shards: int = 64,
                 lease_s: float = 10.0, *, pool_size: int = DEFAULT_POOL,
                 node_host: str = "127.0.0.1", node_tls_cert: str | os.PathLike[str] | None = None,
                 node_tls_key: str | os.PathLike[str] | None = None,
                 node_tls_ca: str | os.PathLike[str] | None = None,
                 node_insecure_no_tls: bool = False) -> None:
        asyncpg_module()  # a missing extra says so before anything starts
        if not isinstance(shards, int) or isinstance(shards, bool) or not 1 <= shards <= 4096:
            raise InvalidArgument(f"shards is a whole number from 1 to 4096, not {shards!r}")
        if not lease_s > 0:
            raise InvalidArgument(f"lease_s must be a positive number of seconds, not {lease_s!r}")
        if node_id is not None and not good_node_id(node_id):
            raise InvalidArgument(
                f"a node id is 1 to {MAX_NODE_ID} printable characters without spaces "
                f"(it names the node in logs, the console and the database), not "
                f"{node_id!r}")
        self.dsn = dsn
        self.node_id = node_id if node_id is not None else \
            f"{socket.gethostname()}-{os.getpid()}"
        self.shards = shards
        self.lease_s = float(lease_s)
        self.pool_size = pool_size
        self.node_host = node_host
        self.node_tls = NodeTls.of(node_tls_cert, node_tls_key, node_tls_ca)
        self.node_insecure_no_tls = bool(node_insecure_no_tls)
        check_node_host(node_host, self.node_tls, self.node_insecure_no_tls)
        self._pool: asyncpg.Pool | None = None  # the runtime's own reads (never events')
        self.events: EventConnections | None = None  # objects' events (None: closed)
        self._lease = LeaseConnection(dsn)  # the lease keeper's: never waits for a pool
        self.epochs: dict[int, int] = {}  # shards this node holds, with their lease epoch
        # Until when (this node's monotonic clock) each held lease surely runs: past it
        # (less a margin), other nodes may claim the shard, so this one runs nothing of
        # it until a renewal lands (it lapses here).
        self._deadlines = LocalDeadlines(self.lease_s)
        self.leaving: set[int] = set()  # being handed over: no new event of them runs
        self.drain_s = 2.0  # how long a hand-over waits for the events in flight
        self._drain: Callable[[set[int]], Awaitable[None]] | None = None
        self.address: str | None = None  # where other nodes reach this one
        self.cluster_secret = ""
        self.install_id = ""  # the database's own id (names objects' roles)
        self.step: int | None = None  # shards moved per lease round (None: all at once)
        self.nodes_seen: list[leases.NodeRow] = []
        # This process, as the node `node_id` (`nodes.incarnation`): another process
        # started with the same node id is told apart by it.
        self.incarnation = secrets.token_hex(8)
        self.displaced = False  # another process took this node id over: it runs nothing
        # Who held each shard, and until when (this node's monotonic clock), as its last
        # lease round read them (its own claims included), and where each node is
        # reached: `owner_of` answers from them, so a call forwarded to another node
        # costs no query of its own.
        self._owners: dict[int, tuple[str | None, float]] = {}
        self._addresses: dict[str, str | None] = {}
        self.renewed_at: float | None = None  # when the last round that landed began
        self._claims = 0
        self._faults: PgFaultStore | None = None
        self._rounds = 0
        self._tasks = TaskOwner(f"node {self.node_id}'s leases")
        self._on_change: ShardListener | None = None
        self._writer = PgAlarmRowWriter(self.shard_of)
        self._db = PgDatabase(self._require_pool, self._connect, self._writer,
                              fence=self.fence, fence_rows=self.fence_rows, single=MERGED)
        self._alarm_rows = PgAlarmRows(self._db, self._writer, self.owned_shards)
        self._executions = PgExecutionLog(self._db, self._writer.counters)
        self._audit = PgAuditRows(self._db, self.node_id)
        self._operator = PgOperatorRows(self._db, self.node_id, self.owned_shards)
        super().__init__(self._db, self._alarm_rows, self._executions, self._audit,
                         self._operator)

    # -- the protocol ---------------------------------------------------------------------


    def shard_of(self, key: ObjectKey) -> int:
        return shard_of(key, self.shards)

    def _require_pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StorageError("the PostgreSQL backend is not open", "postgresql")
        return self._pool

    async def _connect(self) -> PgConn:
        """The committer's connection. Its writes add to this node's slot of each
        counter (schema.py: the counters migration): nodes never wait for one another's."""
        conn: PgConn = await asyncpg_module().connect(
            self.dsn, server_settings={"alarmtop.slot": str(counter_slot(self.node_id))})
        return conn

    async def open(self) -> None:
        asyncpg = asyncpg_module()
        try:
            self._pool = await asyncpg.create_pool(self.dsn, min_size=1,
                                                   max_size=min(self.pool_size, RUNTIME_POOL),
                                                   reset=_keep_session)
        except Exception as exc:  # a bad DSN is asyncpg's ClientConfigurationError, say
            raise StorageError(f"cannot connect to PostgreSQL ({type(exc).__name__}: {exc}); "
                               "check the DSN, that the "
                               "server runs, and the password (PGPASSFILE)") from exc
        try:
            self.events = await EventConnections.open(self.dsn, self.pool_size, _keep_session)
        except BaseException:
            await self._pool.close()
            self._pool = None
            raise
        try:
            async with self._pool.acquire() as conn:
                await migrate(conn)
                await check_shards(conn, self.shards)
                self.cluster_secret = await cluster_secret(conn)
                self.install_id = await install_id(conn)
                await check_node_id(conn, self.node_id, self.incarnation, self.address,
                                    self.lease_ms, await db_now_ms(conn))
            await self.keep_leases_once()
            await self._db.open()
        except BaseException:
            await self._pool.close()
            self._pool = None
            await self._close_events()
            raise
        self._tasks.spawn(self._keep_leases(), name="pg-leases")
        self._tasks.spawn(self._watch_deadlines(), name="pg-lease-deadlines")

    async def _close_events(self) -> None:
        self._lease.terminate()
        events, self.events = self.events, None
        if events is not None:
            await events.close()

    def bind(self, on_change: ShardListener, address: str | None = None,
             drain: Callable[[set[int]], Awaitable[None]] | None = None) -> None:
        """Told by the runtime: call `on_change(gained, lost)` when this node's shards
        change; `address` is where other nodes reach it (recorded with its heartbeat);
        `drain(shards)` ends when no event of those shards is running any more."""
        self._on_change = on_change
        self._drain = drain
        if address is not None:
            self.address = address

    async def close(self) -> None:
        faults, pool = self._faults, self._pool
        try:
            await self._close()
        except BaseException:
            # Cut short (the runtime's stop ran out of its grace, say): every connection
            # goes now rather than with the garbage collector.
            if faults is not None:
                faults.cut_off()
            self._tasks.cancel()
            self._db.cut_off()
            if pool is not None:
                pool.terminate()
            self._lease.terminate()
            if self.events is not None:
                self.events.terminate()
                self.events.pool.terminate()
            raise

    async def _close(self) -> None:
        faults, self._faults = self._faults, None
        if faults is not None:
            await faults.stop()
        await self._tasks.close()
        await self._db.close()
        if self._pool is not None:
            pool, self._pool = self._pool, None
            epochs, self.epochs = self.epochs, {}
            held = sorted(epochs)
            try:
                async with pool.acquire() as conn:
                    # A clean stop hands its shards over at once, and says it stopped.
                    await conn.execute(f"UPDATE {SCHEMA}.shards SET owner = NULL, expires_ms = 0 "
                                       f"WHERE owner = $1 AND {_HELD_EPOCHS}", self.node_id,
                                       held, [epochs[s] for s in held])
                    await conn.execute(f"UPDATE {SCHEMA}.nodes SET stopped_ms = {NOW_MS} "
                                       "WHERE node_id = $1 AND incarnation = $2", self.node_id,
                                       self.incarnation)
            except Exception:  # the next owner waits for the leases to run out instead
                pass
            try:
                await asyncio.wait_for(pool.close(), 5.0)
            except (TimeoutError, Exception):
                pool.terminate()
        await self._close_events()
        self.epochs.clear()
        self._deadlines.clear()

    async def open_object(self, object_class: str, object_name: str, create: bool = True,
                          intent: tuple[int, int | None] = (0, None),
                          epoch: int | None = None) -> PgObjectStore | None:
        key = (object_class, object_name)
        self._require_pool()
        assert self.events is not None
        shard = self.shard_of(key)
        # Its commits are fenced by the epoch it was woken under: a lease lost and
        # claimed back meanwhile must not pass an event that read before the loss.
        fence = self.fence if epoch is None else functools.partial(self.fence, at={shard: epoch})
        return await PgObjectStore.open(self.events, key, create, intent, shard, fence,
                                        self.install_id)

    async def count_objects(self) -> int:
        return await self._alarm_rows.count_objects()

    async def list_objects(self, limit: int, offset: int = 0,
                           contains: str | None = None) -> list[tuple[str, str]]:
        return await self._alarm_rows.list_objects(limit, offset, contains)

    # -- schema and shards ----------------------------------------------------------------

    # -- leases ---------------------------------------------------------------------------

    async def _keep_leases(self) -> None:
        """Renew, claim and hand over, every third of a lease, until closed."""
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                await self.keep_leases_once()
            except Exception as exc:  # PostgreSQL away: the leases lapse, others take over
                why = str(exc) or f"no answer within {self.lease_s:g} s"
                log.warning("node %s could not renew its shard leases: %s", self.node_id, why)

    async def _watch_deadlines(self) -> None:
        """Stop running a shard before its lease can have run out anywhere, when no
        renewal landed in time (PostgreSQL unreachable or slow, this process paused):
        the scheduler and the objects let go of it at once, not at the next round."""
        while True:
            due = self._deadlines.next_lapse()
            wait = self.lease_s / 3 if due is None else max(0.0, due - local_now())
            await asyncio.sleep(min(wait, self.lease_s / 3))
            lapsed = self._deadlines.lapse() & set(self.epochs)
            if lapsed:
                log.warning("node %s could not renew its leases of shard(s) %s in time: it "
                            "runs nothing of them until a renewal lands (another node may "
                            "take them over meanwhile)", self.node_id, sorted(lapsed))
                self._changed(set(), lapsed)

    @property
    def lease_ms(self) -> int:
        return round(self.lease_s * 1000)

    async def keep_leases_once(self) -> None:
        """One round: heartbeat, renew what is held, claim or hand over toward the fair
        share. Its times are the database's (`lease_clock`)."""
        if self.displaced:
            return
        started = local_now()  # before any statement: what they write ends later
        self._require_pool()
        # The lease keeper's own connection: never behind a pool that slow events hold.
        # A round that waits longer than a lease (to connect, or on a row another
        # node's transaction holds) gives up: what it would renew has lapsed by then.
        async with self._lease.use(connect_within=self.lease_s) as conn:
            async with conn.transaction():
                now = await db_now_ms(conn, timeout_ms=self.lease_ms)
                until = now + self.lease_ms
                # The node's row is this process's from its first round on (`open`
                # checked that no other process answers as this node); at a later
                # round, a row another process wrote means it took the node id over.
                ours = await conn.fetchval(
                    f"INSERT INTO {SCHEMA}.nodes (node_id, address, started_ms, renewed_ms, "
                    "incarnation) VALUES ($1, $2, $3, $3, $4) ON CONFLICT (node_id) DO UPDATE "
                    "SET address = EXCLUDED.address, renewed_ms = EXCLUDED.renewed_ms, "
                    "stopped_ms = NULL, incarnation = EXCLUDED.incarnation WHERE $5 OR "
                    f"{SCHEMA}.nodes.incarnation IS NOT DISTINCT FROM EXCLUDED.incarnation "
                    "RETURNING true", self.node_id, self.address, now, self.incarnation,
                    not self._rounds)
                if not ours:
                    self._displace(await conn.fetchval(
                        f"SELECT address FROM {SCHEMA}.nodes WHERE node_id = $1", self.node_id))
                    return
                renewed = await conn.fetch(
                    f"UPDATE {SCHEMA}.shards SET expires_ms = $2 WHERE owner = $1 AND "
                    "shard = ANY($3::int[]) RETURNING shard, epoch", self.node_id, until,
                    sorted(self.epochs))
                still = {int(r[0]): int(r[1]) for r in renewed
                         if self.epochs.get(int(r[0])) == int(r[1])}
                rows = [leases.ShardRow(int(r[0]), r[1], int(r[2]), int(r[3]), r[4]) for r in
                        await conn.fetch(f"SELECT shard, owner, epoch, expires_ms, offered_to "
                                         f"FROM {SCHEMA}.shards ORDER BY shard")]
                nodes = [leases.NodeRow(r[0], r[1], int(r[2]), r[3]) for r in await conn.fetch(
                    f"SELECT node_id, address, renewed_ms, stopped_ms FROM {SCHEMA}.nodes")]
                live = leases.live_nodes(nodes, now, self.lease_ms)
                first = not self._rounds
                decided = leases.plan(self.node_id, rows, live, now, self.shards, step=self.step,
                                 mine=frozenset() if first else frozenset(still),
                                 restarted=first)
                claimed = {}
                if decided.claim:
                    got = await conn.fetch(
                        f"UPDATE {SCHEMA}.shards SET owner = $1, epoch = epoch + 1, expires_ms = "
                        f"$2, offered_to = NULL WHERE shard = ANY($3::int[]) AND "
                        f"{_CLAIMABLE_IN_ROUND} RETURNING shard, epoch", self.node_id, until,
                        decided.claim, now, live)
                    claimed = {int(r[0]): int(r[1]) for r in got}
        # Another node's lease as seen from here ends no later than it does there.
        self._owners = {r.shard: (r.owner, started + (r.expires_ms - now) / 1000)
                        for r in rows}
        self._owners.update(dict.fromkeys({**still, **claimed},
                                          (self.node_id, started + self.lease_s)))
        self._addresses = {n.node_id: n.address for n in nodes}
        # A lapsed shard renewed now is gained again: the scheduler takes it back. One
        # claimed back under a new epoch was another node's meanwhile: lost and gained.
        gained, lost = leases.moves(self.epochs, self._deadlines.lapsed, {**still, **claimed})
        self.epochs = {**still, **claimed}
        self._deadlines.set_all(self.epochs, started)
        self.renewed_at = started
        self._rounds += 1
        self.nodes_seen = nodes
        if gained or lost:
            self._changed(gained, lost)
        release = [s for s in decided.release if s in self.epochs]
        if release and decided.to is not None:
            await self.hand_over(release, decided.to)

    def _displace(self, address: str | None) -> None:
        """Another process runs as this node now: this one lets go of everything (the
        other's claims fenced its writes out already) and claims nothing any more."""
        self.displaced = True
        log.error("another process now runs as node %s (it answers at %s): this one holds "
                  "no shards any more and claims none. Stop it, or restart it with a node "
                  "id of its own", self.node_id, address or "an unknown address")
        lost = set(self.epochs) - self._deadlines.lapsed
        self.epochs = {}
        self._deadlines.clear()
        if lost:
            self._changed(set(), lost)

    def _changed(self, gained: set[int], lost: set[int]) -> None:
        if self._on_change is not None:
            try:
                self._on_change(gained, lost)
            except Exception:
                log.exception("the runtime failed to take in a change of its shards")

    async def hand_over(self, shards: Sequence[int], to: str | None) -> None:
        """Give shards to another node cleanly: run no new event of them, let the ones
        in flight end (a bounded wait), then offer them to `to` for a lease (others
        leave them to it meanwhile). Their next owner fences this node out."""
        leaving = set(shards) & set(self.epochs)
        if not leaving:
            return
        self.leaving |= leaving
        try:
            if self._drain is not None:
                try:
                    await asyncio.wait_for(self._drain(leaving), self.drain_s)
                except TimeoutError:  # what is still running is fenced out at its commit
                    log.warning("node %s hands over shards %s with events still running: "
                                "their writes will be refused", self.node_id, sorted(leaving))
            async with self._require_pool().acquire() as conn:
                release = sorted(s for s in leaving if s in self.epochs)
                await conn.execute(
                    f"UPDATE {SCHEMA}.shards SET owner = NULL, offered_to = $4, "
                    f"expires_ms = {NOW_MS} + $5 WHERE owner = $1 AND {_HELD_EPOCHS}",
                    self.node_id, release, [self.epochs[s] for s in release], to,
                    self.lease_ms if to is not None else 0)
        finally:
            self.leaving -= leaving
            lapsed = leaving & self._deadlines.lapsed  # let go of already
            for shard in leaving:
                self.epochs.pop(shard, None)
            self._deadlines.forget(leaving)
        if leaving - lapsed:
            self._changed(set(), leaving - lapsed)

    async def claim_now(self, shard: int) -> bool:
        """Claim a shard that has no live owner, for a call that needs it now.

        Only while this node is live itself: the others take the shards of a node whose
        heartbeat (its last lease round) is a lease old, whatever their leases say. So
        what it claims runs here until that heartbeat's lease ends, no longer."""
        alive_since = self.renewed_at
        if alive_since is None or local_now() >= alive_since + self.lease_s - \
                self._deadlines.margin_s:
            return False
        async with self._require_pool().acquire() as conn:
            now = await db_now_ms(conn)
            rows = await conn.fetch(
                f"SELECT node_id, address, renewed_ms, stopped_ms FROM {SCHEMA}.nodes")
            live = leases.live_nodes([leases.NodeRow(r[0], r[1], int(r[2]), r[3]) for r in rows],
                now, self.lease_ms)
            row = await conn.fetchrow(
                f"UPDATE {SCHEMA}.shards SET owner = $1, epoch = epoch + 1, expires_ms = $2, "
                f"offered_to = NULL WHERE shard = ANY($3::int[]) AND {_CLAIMABLE} "
                "RETURNING epoch", self.node_id, now + self.lease_ms, [shard], now, live)
        if row is None:
            return False
        gained, lost = leases.moves(self.epochs, self._deadlines.lapsed,
                                    {**self.epochs, shard: int(row[0])})
        self.epochs[shard] = int(row[0])
        self._deadlines.renewed([shard], alive_since)
        self._changed(gained, lost)
        return True

    def tenure(self, key: ObjectKey) -> int | None:
        """The epoch of this node's lease on the object's shard (None: not held): what it
        remembers of the object holds while this stays the same (see `leases.moves`)."""
        return self.epochs.get(self.shard_of(key))

    def may_run(self, key: ObjectKey) -> bool:
        """Whether this node may run an event of the object now: it holds the shard
        and the lease it last wrote has not run out (less a margin). A node that was
        paused, or could not reach PostgreSQL to renew, runs nothing of a shard whose
        lease may already be another node's; its writes would be fenced out anyway."""
        shard = self.shard_of(key)
        return shard not in self.leaving and shard in self.epochs and \
            self._deadlines.may_run(shard)

    async def owner_of(self, key: ObjectKey, fresh: bool = False
                       ) -> tuple[str | None, str | None]:
        """The node holding the object's shard and where to reach it (None when no live
        node holds it). Another node's lease as the last lease round read it is taken
        while it runs; `fresh` reads the shard's row (after that node answered that it
        does not hold the shard, or did not answer)."""
        shard = self.shard_of(key)
        if self.may_run(key):
            return self.node_id, self.address
        started = local_now()
        owner, until = self._owners.get(shard, (None, 0.0))
        if not fresh and owner is not None and owner != self.node_id and until > started:
            address = self._addresses.get(owner)
            if address:
                return owner, address
        async with self._require_pool().acquire() as conn:
            row = await conn.fetchrow(
                f"SELECT s.owner, n.address, s.expires_ms - {NOW_MS} FROM {SCHEMA}.shards s "
                f"LEFT JOIN {SCHEMA}.nodes n ON n.node_id = s.owner WHERE s.shard = $1", shard)
        if row is None or row[0] is None or int(row[2]) <= 0:
            self._owners[shard] = (None, 0.0)
            return None, None
        self._owners[shard] = (str(row[0]), started + int(row[2]) / 1000)
        self._addresses[str(row[0])] = row[1]
        return str(row[0]), row[1]

    async def nodes(self) -> list[dict[str, Any]]:
        """Every node the fleet has seen: id, address, shards held, last renewal, up
        (the times are the database's)."""
        async with self._require_pool().acquire() as conn:
            now = await db_now_ms(conn)
            rows = await conn.fetch(
                f"SELECT n.node_id, n.address, n.started_ms, n.renewed_ms, n.stopped_ms, "
                f"(SELECT count(*) FROM {SCHEMA}.shards s WHERE s.owner = n.node_id AND "
                f"s.expires_ms > $1) FROM {SCHEMA}.nodes n ORDER BY n.node_id", now)
        return [{"node_id": r[0], "address": r[1], "started_ms": r[2], "renewed_ms": r[3],
                 "stopped_ms": r[4], "shards": int(r[5]),
                 "up": r[4] is None and r[3] >= now - self.lease_ms} for r in rows]

    async def share_faults(self, registry: FaultMirror) -> None:
        """Make `registry` a mirror of the fleet's faults (kept until `close`): what it
        holds now is written first, ids get this node's name."""
        from alarmtop.core.model.faults import Fault
        store = PgFaultStore(self._require_pool(), self.dsn, self.node_id)
        registry.id_suffix = f"@{self.node_id}"
        registry.sink = store
        for fault in registry.list():
            store.saved(Fault.from_dict(fault))
        await store.start(registry)
        self._faults = store

    async def claim_once(self, name: str, at_ms: int) -> bool:
        """Whether this node runs the fleet's one `name` at `at_ms` (see `fleet_once`)."""
        self._claims += 1
        return await fleet_once.claim(self._require_pool(), self.node_id, name, at_ms,
                                      self._claims % fleet_once.PRUNE_EVERY == 1)

    async def fence(self, conn: PgConn, shards: set[int], at: dict[int, int] | None = None
                    ) -> None:
        """In the writer's transaction: go on only while this node holds each shard at
        the epoch it claimed it with (or `at` says); a claim waits for us, then wins."""
        wanted = sorted(shards)
        rows = await conn.fetch(f"SELECT shard, owner, epoch FROM {SCHEMA}.shards WHERE "
                                "shard = ANY($1::int[]) FOR SHARE", wanted)
        held = self.epochs if at is None else {**self.epochs, **at}
        lost = [int(r[0]) for r in rows if r[1] != self.node_id or held.get(int(r[0])) != r[2]]
        if lost or len(rows) != len(wanted):
            raise LeaseLost(f"this node ({self.node_id}) no longer holds shard(s) "
                            f"{lost or wanted}: nothing of the write was kept; the objects' new "
                            "owner carries on")

    def fence_rows(self, shards: set[int], at: dict[int, int] | None = None
                   ) -> tuple[list[int], list[int], str]:
        """`fence` as data, for a statement that checks it itself: the shards, the epoch
        each must be held at (-1: not held, which fails the check) and this node's id."""
        wanted, held = sorted(shards), self.epochs if at is None else {**self.epochs, **at}
        return wanted, [held.get(s, -1) for s in wanted], self.node_id

    def owned_shards(self) -> Sequence[int]:
        """The shards this node runs (held, and not lapsed)."""
        return sorted(s for s in self.epochs if s not in self._deadlines.lapsed)
