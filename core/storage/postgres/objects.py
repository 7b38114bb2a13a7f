"""One object's storage on PostgreSQL: its key-values, its own schema, its intent.

The key-values of every object are one table keyed by (class, name, key); an
object's SQL runs in a schema of its own, made on its first SQL statement and
dropped by `delete_all()`; `?` placeholders are accepted. Its statements run behind
walls (`object_sql.py`): as a role of its own, owner of its schema and of nothing
else, inside a SECURITY DEFINER function, so that they cannot reach the runtime's
schema (the audit log, the cluster secret, the leases, every object's key-values)
or another object's, change role, or end or split the event's transaction. An event's
writes are one transaction on a connection the object holds from its first write
to its commit. A statement that fails is undone alone (a savepoint around it), as
on SQLite, where a failed statement leaves the event's other writes standing.

Every commit is fenced: it lands only while this node holds the lease of the
object's shard (checked in the same transaction), so a node that lost its lease
cannot commit over the object's new owner.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from alarmtop.core.model.errors import CommitOutcomeUnknown, SqlError, StorageError
from alarmtop.core.model.storage_values import ExecResult
from alarmtop.core.storage.faultpoints import FAULT_POINTS
from alarmtop.core.storage.postgres.errors import storage_error, unreachable
from alarmtop.core.storage.postgres.event_pool import EventConnections
from alarmtop.core.storage.postgres.object_sql import (
    inner_statement,
    placeholders,
    refusal,
    result_rows,
    role_name,
    rows_written,
    unnamed_columns,
    wrapped_call,
    written,
)
from alarmtop.core.storage.postgres.schema import SCHEMA

if TYPE_CHECKING:
    from alarmtop.core.storage.postgres.database import PgConn

ObjectKey = tuple[str, str]
Fence = Callable[["PgConn", set[int]], Awaitable[None]]
_P = ParamSpec("_P")
_R = TypeVar("_R")


def _translated(doing: str) -> Callable[[Callable[_P, Awaitable[_R]]],
                                        Callable[_P, Awaitable[_R]]]:
    """A lost connection surfaces as `StorageError` saying what did not happen, and the
    event's transaction is dropped with it (the next event starts on a fresh one);
    asyncpg's own exception types never reach the object's code."""
    def wrap(fn: Callable[_P, Awaitable[_R]]) -> Callable[_P, Awaitable[_R]]:
        @functools.wraps(fn)
        async def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            try:
                return await fn(*args, **kwargs)
            except (StorageError, SqlError):
                raise
            except Exception as exc:
                store = args[0] if args and isinstance(args[0], PgObjectStore) else None
                if store is not None and unreachable(exc):
                    await store._end(rollback=True)
                path = store.path if store is not None else "postgresql"
                raise storage_error(exc, path, doing) from exc
        return run
    return wrap


def schema_name(key: ObjectKey) -> str:
    """The object's own schema: short (identifiers stop at 63 bytes) and never shared."""
    digest = hashlib.sha256(f"{key[0]}\x00{key[1]}".encode()).hexdigest()[:40]
    return f"obj_{digest}"


class PgObjectStore:
    """`ObjectStore` for one object on PostgreSQL."""

    def __init__(self, pool: EventConnections, key: ObjectKey, intent: tuple[int, int | None],
                 shard: int, fence: Fence | None, install: str = "") -> None:
        self._pool = pool
        self._key = key
        self._shard = shard
        self._fence = fence
        self.path = f"postgresql:{key[0]}/{key[1]}"
        self._schema = schema_name(key)
        self._role = role_name(install, key)
        self._intent = intent
        self._pending_intent: tuple[int, int | None] | None = None
        self._conn: PgConn | None = None
        self._schema_ready = False  # made and on the search path in this transaction
        self._savepoints = 0

    @classmethod
    async def open(cls, pool: EventConnections, key: ObjectKey, create: bool,
                   intent: tuple[int, int | None], shard: int, fence: Fence | None,
                   install: str = "") -> PgObjectStore | None:
        """The object's storage; None when it has none and `create` is false. A new
        one starts with `intent` (the object's row listing it was written first)."""
        try:
            return await cls._open(pool, key, create, intent, shard, fence, install)
        except (StorageError, SqlError):
            raise
        except Exception as exc:
            raise storage_error(exc, f"postgresql:{key[0]}/{key[1]}",
                                "opening the object's storage") from exc

    @classmethod
    async def _open(cls, pool: EventConnections, key: ObjectKey, create: bool,
                    intent: tuple[int, int | None], shard: int, fence: Fence | None,
                    install: str) -> PgObjectStore | None:
        conn = await pool.acquire()
        try:
            row = await conn.fetchrow(f"SELECT gen, at_ms FROM {SCHEMA}.object_intents WHERE "
                                      "object_class = $1 AND object_name = $2", *key)
            if row is None:
                listed = await conn.fetchval(f"SELECT 1 FROM {SCHEMA}.objects WHERE "
                                             "object_class = $1 AND object_name = $2", *key)
                if not listed and not create:
                    return None
                await conn.execute(f"INSERT INTO {SCHEMA}.object_intents (object_class, "
                                   "object_name, gen, at_ms) VALUES ($1, $2, $3, $4) "
                                   "ON CONFLICT DO NOTHING", *key, *intent)
                found = intent
            else:
                found = (int(row[0]), row[1])
        finally:
            await pool.release(conn)
        return cls(pool, key, found, shard, fence, install)

    # -- the event's transaction ----------------------------------------------------------

    @_translated("starting the event's transaction")
    async def begin(self) -> None:
        if self._conn is None:
            conn = await self._pool.acquire()
            try:
                await conn.execute("BEGIN")
            except BaseException:
                await self._pool.release(conn)
                raise
            self._conn, self._schema_ready = conn, False

    async def _tx(self) -> PgConn:
        await self.begin()
        assert self._conn is not None
        return self._conn

    async def _guarded(self, conn: PgConn, doing: str, sql: str | None,
                       run: Callable[[], Awaitable[Any]]) -> Any:
        """Run one statement under a savepoint: a failure undoes it alone."""
        await conn.execute("SAVEPOINT alarmtop_stmt")
        try:
            out = await run()
        except Exception as exc:
            await conn.execute("ROLLBACK TO SAVEPOINT alarmtop_stmt")
            await conn.execute("RELEASE SAVEPOINT alarmtop_stmt")
            if type(exc).__module__.startswith("asyncpg") and sql is not None and \
                    hasattr(exc, "sqlstate"):
                said = refusal(str(exc)) or str(exc)
                raise SqlError(f"{said} (in: {sql[:200]})", self.path) from exc
            raise StorageError(f"{doing} failed: {exc}", self.path) from exc
        await conn.execute("RELEASE SAVEPOINT alarmtop_stmt")
        return out

    @_translated("the SQL statement")
    async def exec(self, sql: str, params: Sequence[Any]) -> ExecResult:
        conn = await self._tx()
        if not self._schema_ready:
            # Its role, schema and wrappers (made if missing), and its schema on the path
            # of this transaction, for the statements prepared below.
            # In a savepoint: a refusal here (the runtime's role may not create roles,
            # say) is this statement's error, and the event's transaction lives on.
            await conn.execute("SAVEPOINT alarmtop_ready")
            try:
                await conn.execute(f"SELECT {SCHEMA}.object_sql_ready($1, $2)", self._schema,
                                   self._role)
            except Exception:
                await conn.execute("ROLLBACK TO SAVEPOINT alarmtop_ready")
                raise
            finally:
                await conn.execute("RELEASE SAVEPOINT alarmtop_ready")
            self._schema_ready = True
        text, _ = placeholders(sql)

        async def run() -> ExecResult:
            # Prepared (parsed, never run) for its parameters' and columns' types; run
            # by the object's wrapper, as the object's role.
            stmt = await conn.prepare(text)
            types = stmt.get_parameters()
            attributes = stmt.get_attributes()
            names = [a.name for a in attributes]
            columns = [a.type for a in attributes]
            unnamed = unnamed_columns(columns)
            if unnamed == "refused":
                raise SqlError(f"a column of type {', '.join(t.name for t in columns)} "
                               "cannot come back from an object's SQL on PostgreSQL: cast "
                               f"it (to text, say) (in: {sql[:200]})", self.path)
            inner = inner_statement(text, types)
            if unnamed == "void" or not attributes:
                count = int(await conn.fetchval(wrapped_call(self._role, types, []), inner,
                                                *params) or 0)
                if attributes:  # rows of nothing but void: as many as ran
                    return ExecResult(tuple(names), [dict.fromkeys(names) for _ in
                                                     range(count)], 0)
                return ExecResult((), [], written(text, count, False))
            call = wrapped_call(self._role, types, columns)
            rows = await conn.fetch(call, inner, *params)
            return ExecResult(tuple(names), result_rows(rows, names),
                              written(text, len(rows), True))
        result: ExecResult = await self._guarded(conn, "a SQL statement", sql, run)
        return result

    @_translated("reading storage")
    async def kv_get(self, keys: Sequence[str]) -> dict[str, str]:
        conn = await self._tx()
        rows = await conn.fetch(f"SELECT key, value FROM {SCHEMA}.object_kv WHERE "
                                "object_class = $1 AND object_name = $2 AND key = ANY($3)",
                                *self._key, list(keys))
        return {r[0]: r[1] for r in rows}

    @_translated("the write")
    async def kv_put(self, items: Sequence[tuple[str, str]]) -> None:
        conn = await self._tx()
        await conn.executemany(
            f"INSERT INTO {SCHEMA}.object_kv (object_class, object_name, key, value) VALUES "
            "($1, $2, $3, $4) ON CONFLICT (object_class, object_name, key) DO UPDATE SET "
            "value = EXCLUDED.value", [(*self._key, k, v) for k, v in items])

    @_translated("the delete")
    async def kv_delete(self, keys: Sequence[str]) -> int:
        conn = await self._tx()
        status = await conn.execute(f"DELETE FROM {SCHEMA}.object_kv WHERE object_class = $1 "
                                    "AND object_name = $2 AND key = ANY($3)", *self._key,
                                    list(keys))
        return rows_written(status)

    @_translated("listing storage")
    async def kv_list(self, prefix: str, limit: int | None) -> list[tuple[str, str]]:
        conn = await self._tx()
        # A range of keys rather than LIKE: keys may contain '%' and '_'. Collation C:
        # the order is byte order, as on SQLite.
        sql = (f"SELECT key, value FROM {SCHEMA}.object_kv WHERE object_class = $1 AND "
               'object_name = $2 AND key COLLATE "C" >= $3')
        params: list[Any] = [*self._key, prefix]
        if prefix:
            sql += f' AND key COLLATE "C" < ${len(params) + 1}'
            params.append(prefix[:-1] + chr(ord(prefix[-1]) + 1))
        sql += ' ORDER BY key COLLATE "C"'
        if limit is not None:
            sql += f" LIMIT ${len(params) + 1}"
            params.append(limit)
        rows = await conn.fetch(sql, *params)
        return [(r[0], r[1]) for r in rows]

    @_translated("the savepoint")
    async def savepoint(self, name: str) -> None:
        await (await self._tx()).execute(f"SAVEPOINT {name}")

    @_translated("the savepoint")
    async def release(self, name: str) -> None:
        await (await self._tx()).execute(f"RELEASE SAVEPOINT {name}")

    @_translated("undoing to the savepoint")
    async def rollback_to(self, name: str) -> None:
        if self._conn is None:
            return
        await self._conn.execute(f"ROLLBACK TO SAVEPOINT {name}")
        await self._conn.execute(f"RELEASE SAVEPOINT {name}")

    async def read_intent(self) -> tuple[int, int | None]:
        return self._intent

    @_translated("recording the alarm")
    async def write_intent(self, gen: int, at_ms: int | None) -> None:
        conn = await self._tx()
        await conn.execute(f"INSERT INTO {SCHEMA}.object_intents (object_class, object_name, "
                           "gen, at_ms) VALUES ($1, $2, $3, $4) ON CONFLICT (object_class, "
                           "object_name) DO UPDATE SET gen = EXCLUDED.gen, at_ms = "
                           "EXCLUDED.at_ms", *self._key, gen, at_ms)
        self._pending_intent = (gen, at_ms)

    async def commit(self) -> None:
        """Fence, then commit the event (a failure rolls back: the next event starts clean)."""
        conn = self._conn
        pending, self._pending_intent = self._pending_intent, None
        if conn is None:
            return
        try:
            if FAULT_POINTS.active:
                FAULT_POINTS.hit("object.commit.before", key=self._key)
            if self._fence is not None:
                await self._fence(conn, {self._shard})
            try:
                await conn.execute("COMMIT")
            except Exception as exc:
                if not unreachable(exc):
                    raise
                raise CommitOutcomeUnknown(
                    f"the connection to PostgreSQL went during the commit "
                    f"({type(exc).__name__}: {exc}): it may or may not have landed",
                    self.path) from exc
        except BaseException as exc:
            await self._end(rollback=True)
            if isinstance(exc, StorageError):
                raise
            if isinstance(exc, Exception):
                raise StorageError(f"committing failed: {exc}", self.path) from exc
            raise
        await self._end(rollback=False)
        if pending is not None:
            self._intent = pending
        if FAULT_POINTS.active:
            FAULT_POINTS.hit("object.commit.after", key=self._key)

    async def rollback(self) -> None:
        self._pending_intent = None
        await self._end(rollback=True)

    async def _end(self, rollback: bool) -> None:
        conn, self._conn = self._conn, None
        ran_sql, self._schema_ready = self._schema_ready, False
        if conn is None:
            return
        try:
            if rollback and not _gone(conn):
                try:
                    await conn.execute("ROLLBACK")
                except Exception:  # already rolled back, or the connection went
                    _terminate(conn)
            if ran_sql and not _gone(conn):
                # The object's SQL may have left session state (a SET, a LISTEN, an
                # advisory lock): the pool no longer resets what it gets back.
                try:
                    await conn.execute(conn.get_reset_query() + "\nDISCARD TEMP;")
                except Exception:
                    _terminate(conn)
        finally:
            await self._pool.release(conn)

    @_translated("deleting the object's storage")
    async def destroy(self) -> None:
        """Drop every table and key the object made; its intent stays (as on SQLite)."""
        conn = await self._tx()
        await conn.execute(f"DELETE FROM {SCHEMA}.object_kv WHERE object_class = $1 AND "
                           "object_name = $2", *self._key)
        await conn.execute(f'DROP SCHEMA IF EXISTS "{self._schema}" CASCADE')
        self._schema_ready = False

    async def close(self) -> None:
        await self._end(rollback=True)


def _gone(conn: Any) -> bool:
    """Whether the event's connection is closed, or already taken back by the pool
    (asyncpg detaches a pooled connection whose session the server ended: it then
    refuses every call, `is_closed()` included)."""
    try:
        return bool(conn.is_closed())
    except Exception:
        return True


def _terminate(conn: Any) -> None:
    with contextlib.suppress(Exception):  # detached by the pool already: nothing to end
        conn.terminate()
