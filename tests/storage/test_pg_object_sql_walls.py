"""On PostgreSQL an object's SQL reaches its own schema only, on a real cluster.

Every attack of the review, each refused with a clear SqlError and changing
nothing: reading or changing another object's schema, dropping its tables,
reading every object's key-values, the audit log or the cluster secret, updating
the shard leases, changing role (however it is asked for), and ending or splitting
the event's transaction (COMMIT, ROLLBACK, SAVEPOINT by hand, BEGIN, PREPARE
TRANSACTION, a procedure's COMMIT, a DO block's)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from alarmtop.core import DurableObject, PostgresBackend, Runtime, VirtualClock
from alarmtop.core.errors import SqlError, StorageError
from alarmtop.core.storage.postgres.objects import schema_name
from tests.conftest import START_MS


class Tenant(DurableObject):
    async def sql(self, text: str, *params: Any) -> list[dict[str, Any]]:
        return (await self.ctx.storage.sql.exec(text, *params)).all()

    async def written(self, text: str, *params: Any) -> int:
        return (await self.ctx.storage.sql.exec(text, *params)).rows_written

    async def setup(self) -> None:
        await self.ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS notes (n TEXT)")
        await self.ctx.storage.sql.exec("INSERT INTO notes VALUES ('kept')")
        await self.ctx.storage.put("k", "v")

    async def split(self, statement: str) -> None:
        """A write, then `statement`, inside a transaction() that then raises: nothing of
        it may stay."""
        async with self.ctx.storage.transaction():
            await self.ctx.storage.sql.exec("INSERT INTO notes VALUES ('undone')")
            await self.ctx.storage.put("undone", True)
            try:
                await self.ctx.storage.sql.exec(statement)
            finally:
                raise RuntimeError("the block fails after it")

    async def kinds(self) -> str:
        """Parameters and results of every common type, `?` and `$n`, counts."""
        sql = self.ctx.storage.sql
        await sql.exec("CREATE TABLE items (id BIGINT PRIMARY KEY, name TEXT, price DOUBLE "
                       "PRECISION, data BYTEA, ok BOOLEAN, tags TEXT[], note TEXT)")
        cur = await sql.exec("INSERT INTO items VALUES (?, ?, ?, ?, ?, ?, ?)", 1, "a", 0.1,
                             b"\x00\xff", True, ["x", "y"], None)
        assert cur.rows_written == 1
        cur = await sql.exec("INSERT INTO items (id, name) VALUES ($1, $2), ($3, $4)",
                             2, "b's", 3, "$1 and ?")
        assert cur.rows_written == 2
        rows = (await sql.exec("SELECT id, name, price, data, ok, tags, note, 1 AS one FROM "
                               "items WHERE id = ? OR name = '?' ORDER BY id", 1)).all()
        assert rows == [{"id": 1, "name": "a", "price": 0.1, "data": b"\x00\xff", "ok": True,
                         "tags": ["x", "y"], "note": None, "one": 1}], rows
        assert (await sql.exec("SELECT name FROM items WHERE id = 3")).one() == \
            {"name": "$1 and ?"}
        cur = await sql.exec("UPDATE items SET price = ? WHERE id > ? RETURNING id", 2.5, 1)
        assert (cur.all(), cur.rows_written) == ([{"id": 2}, {"id": 3}], 2)
        assert (await sql.exec("DELETE FROM items WHERE id >= ?", 2)).rows_written == 2
        assert (await sql.exec("SELECT * FROM items")).rows_written == 0
        assert (await sql.exec("SELECT name FROM items WHERE name = ANY(?)",
                               ["a", "z"])).all() == [{"name": "a"}]
        await sql.exec("CREATE FUNCTION twice(x int) RETURNS int LANGUAGE sql AS "
                       "$$ SELECT $1 * 2 $$")
        assert (await sql.exec("SELECT twice(?) AS v", 21)).one() == {"v": 42}
        assert (await sql.exec("SELECT pg_notify('x', 'y')")).all() == [{"pg_notify": None}]
        try:
            await sql.exec("SELECT * FROM nowhere")
        except SqlError as exc:
            assert "does not exist" in str(exc)
        else:
            raise AssertionError("a missing table went unnoticed")
        return "ok"

    async def state(self) -> dict[str, Any]:
        rows = await self.ctx.storage.sql.exec("SELECT n FROM notes ORDER BY n")
        return {"notes": [r["n"] for r in rows], "k": await self.ctx.storage.get("k"),
                "undone": await self.ctx.storage.get("undone")}


@pytest.fixture
async def rt(pg_dsn: str) -> AsyncIterator[Runtime]:
    runtime = Runtime(backend=PostgresBackend(pg_dsn, shards=8), clock=VirtualClock(START_MS))
    runtime.register(Tenant)
    async with runtime:
        await runtime.get(Tenant, "mine").setup()
        await runtime.get(Tenant, "other").setup()
        await runtime.audit.record("operator", "rearm", "Tenant/other", "a reason")
        yield runtime


async def snapshot(dsn: str) -> dict[str, Any]:
    """What the runtime holds, read as the cluster's superuser."""
    conn = await asyncpg.connect(dsn)
    try:
        other = schema_name(("Tenant", "other"))
        return {
            "other": [r[0] for r in await conn.fetch(f'SELECT n FROM "{other}".notes')],
            "kv": [tuple(r) for r in await conn.fetch(
                "SELECT object_name, key, value FROM alarmtop.object_kv ORDER BY 1, 2")],
            "audit": await conn.fetchval("SELECT count(*) FROM alarmtop.audit"),
            "secret": await conn.fetchval(
                "SELECT value FROM alarmtop.meta WHERE key = 'cluster_secret'"),
            "shards": [tuple(r) for r in await conn.fetch(
                "SELECT shard, owner, epoch, expires_ms FROM alarmtop.shards ORDER BY 1")],
        }
    finally:
        await conn.close()


OTHER = '"' + schema_name(("Tenant", "other")) + '"'
REACH = [
    f"SELECT * FROM {OTHER}.notes",
    f"UPDATE {OTHER}.notes SET n = 'changed'",
    f"DELETE FROM {OTHER}.notes",
    f"DROP TABLE {OTHER}.notes",
    f"CREATE TABLE {OTHER}.planted (x int)",
    "SELECT * FROM alarmtop.object_kv",
    "UPDATE alarmtop.object_kv SET value = '\"x\"'",
    "SELECT * FROM alarmtop.audit",
    "DELETE FROM alarmtop.audit",
    "SELECT value FROM alarmtop.meta WHERE key = 'cluster_secret'",
    "UPDATE alarmtop.shards SET owner = NULL, expires_ms = 0",
    "SELECT alarmtop.object_sql_ready('obj_x', 'postgres')",
    "CREATE SCHEMA sneaky",
]
ROLE = [
    "SET ROLE postgres",
    "RESET ROLE",
    "SET SESSION AUTHORIZATION postgres",
    "SELECT set_config('role', 'postgres', false)",
    "DO $$ BEGIN EXECUTE 'SET ROLE postgres'; END $$",
    "CREATE FUNCTION up() RETURNS int LANGUAGE sql SET role = 'postgres' AS 'SELECT 1'",
]
TRANSACTION = [
    "COMMIT",
    "END",
    "ROLLBACK",
    "ABORT",
    "BEGIN",
    "START TRANSACTION",
    "SAVEPOINT mine",
    "RELEASE SAVEPOINT alarmtop_tx_1",
    "ROLLBACK TO SAVEPOINT alarmtop_tx_1",
    "PREPARE TRANSACTION 'kept'",
    "DO $$ BEGIN COMMIT; END $$",
]


@pytest.mark.parametrize("attack", REACH + ROLE)
async def test_each_reach_is_refused_and_changes_nothing(rt: Runtime, pg_dsn: str,
                                                         attack: str) -> None:
    before = await snapshot(pg_dsn)
    mine = rt.get(Tenant, "mine")
    with pytest.raises(SqlError) as caught:
        await mine.sql(attack)
    message = str(caught.value)
    assert any(words in message for words in (
        "reaches its own schema only", "SET ROLE is refused", "SET SESSION AUTHORIZATION",
        "permission denied")), message
    assert await mine.state() == {"notes": ["kept"], "k": "v", "undone": None}
    after = await snapshot(pg_dsn)
    assert after["other"] == before["other"] == ["kept"]
    assert (after["kv"], after["audit"], after["secret"]) == \
        (before["kv"], before["audit"], before["secret"])
    assert [s[1:3] for s in after["shards"]] == [s[1:3] for s in before["shards"]]


@pytest.mark.parametrize("statement", TRANSACTION)
async def test_transaction_control_cannot_end_or_split_the_event(rt: Runtime, pg_dsn: str,
                                                                 statement: str) -> None:
    mine = rt.get(Tenant, "mine")
    with pytest.raises(RuntimeError, match="the block fails after it"):
        await mine.split(statement)
    assert await mine.state() == {"notes": ["kept"], "k": "v", "undone": None}
    with pytest.raises(SqlError, match="transaction control"):
        await mine.sql(statement)


async def test_a_procedure_that_commits_is_refused(rt: Runtime) -> None:
    mine = rt.get(Tenant, "mine")
    await mine.sql("CREATE PROCEDURE keep() LANGUAGE plpgsql AS "
                   "$$ BEGIN INSERT INTO notes VALUES ('undone'); COMMIT; END $$")
    with pytest.raises(RuntimeError):
        await mine.split("CALL keep()")
    assert await mine.state() == {"notes": ["kept"], "k": "v", "undone": None}


async def test_the_wrapper_cannot_be_named_by_the_object(rt: Runtime, pg_dsn: str) -> None:
    """Its wrapper runs the object's statements as its role: the object may not alter it
    (it cannot even name the schema the wrapper lives in)."""
    conn = await asyncpg.connect(pg_dsn)
    try:
        name = await conn.fetchval(
            "SELECT proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'alarmtop_sql' AND proname LIKE 'q\\_%' LIMIT 1")
    finally:
        await conn.close()
    for attack in (f'ALTER FUNCTION alarmtop_sql."{name}"(text, text[]) SECURITY INVOKER',
                   f'DROP FUNCTION alarmtop_sql."{name}"(text, text[])',
                   f'CREATE OR REPLACE FUNCTION alarmtop_sql."{name}"(q text, a text[]) '
                   "RETURNS SETOF record LANGUAGE sql AS 'SELECT 1'"):
        with pytest.raises(SqlError, match="permission denied"):
            await rt.get(Tenant, "mine").sql(attack)
    assert await rt.get(Tenant, "mine").sql("SELECT current_user = session_user AS same") == \
        [{"same": False}]


async def test_settings_an_object_changes_do_not_reach_the_runtimes_commit(rt: Runtime) -> None:
    mine = rt.get(Tenant, "mine")
    await mine.sql("SET LOCAL synchronous_commit = off")
    assert await mine.sql("SELECT current_setting('synchronous_commit') AS s") == [{"s": "on"}]


async def test_ordinary_sql_works_as_before(rt: Runtime) -> None:
    assert await rt.get(Tenant, "plain").kinds() == "ok"


async def test_a_schema_made_before_the_walls_is_handed_to_its_object(pg_dsn: str) -> None:
    """Its tables stay and work; another object still cannot reach them."""
    first = Runtime(backend=PostgresBackend(pg_dsn, shards=8), clock=VirtualClock(START_MS))
    first.register(Tenant)
    async with first:
        pass  # the runtime's schema, as an earlier version left it
    old = schema_name(("Tenant", "old"))
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(f'CREATE SCHEMA "{old}"; CREATE TABLE "{old}".notes (n TEXT); '
                           f'INSERT INTO "{old}".notes VALUES (\'from before\'); '
                           f'CREATE SEQUENCE "{old}".counter; '
                           f'CREATE TABLE "{old}".auto (id SERIAL PRIMARY KEY)')
    finally:
        await conn.close()
    rt = Runtime(backend=PostgresBackend(pg_dsn, shards=8), clock=VirtualClock(START_MS))
    rt.register(Tenant)
    async with rt:
        t = rt.get(Tenant, "old")
        assert await t.sql("SELECT n FROM notes") == [{"n": "from before"}]
        await t.sql("INSERT INTO notes VALUES ('after')")
        assert await t.sql("SELECT nextval('counter') AS v") == [{"v": 1}]
        assert await t.sql("INSERT INTO auto DEFAULT VALUES RETURNING id") == [{"id": 1}]
        with pytest.raises(SqlError, match="reaches its own schema only"):
            await rt.get(Tenant, "else").sql(f'SELECT * FROM "{old}".notes')


async def test_object_sql_works_for_a_runtime_role_that_is_no_superuser(pg_dsn: str) -> None:
    """The runtime connects as a role that owns its database and may create roles
    (CREATEROLE), as production set-ups do, not as a superuser: object SQL works, and
    its walls hold as they do for a superuser."""
    admin = await asyncpg.connect(pg_dsn)
    try:
        await admin.execute("DROP DATABASE IF EXISTS app_db")
        await admin.execute("DROP ROLE IF EXISTS alarmtop_app")
        await admin.execute("CREATE ROLE alarmtop_app LOGIN CREATEROLE")
        await admin.execute("CREATE DATABASE app_db OWNER alarmtop_app")
    finally:
        await admin.close()
    dsn = pg_dsn.replace("postgres@", "alarmtop_app@").rsplit("/", 1)[0] + "/app_db"
    runtime = Runtime(backend=PostgresBackend(dsn, shards=8), clock=VirtualClock(START_MS))
    runtime.register(Tenant)
    async with runtime:
        await runtime.get(Tenant, "mine").setup()
        await runtime.get(Tenant, "other").setup()
        assert await runtime.get(Tenant, "mine").kinds() == "ok"
        assert (await runtime.get(Tenant, "mine").state())["notes"] == ["kept"]
        for statement in (f"SELECT * FROM {OTHER}.notes", "SELECT * FROM alarmtop.audit",
                          "SET ROLE alarmtop_app", "COMMIT"):
            with pytest.raises(SqlError):
                await runtime.get(Tenant, "mine").sql(statement)
        assert (await runtime.get(Tenant, "other").state())["notes"] == ["kept"]


async def test_a_runtime_role_that_may_not_create_roles_is_told_why(pg_dsn: str) -> None:
    """Without CREATEROLE the object's role cannot be made: the object's statement fails
    saying so, not as a transaction broken by an earlier error."""
    admin = await asyncpg.connect(pg_dsn)
    try:
        await admin.execute("DROP DATABASE IF EXISTS plain_db")
        await admin.execute("DROP ROLE IF EXISTS alarmtop_plain")
        await admin.execute("CREATE ROLE alarmtop_plain LOGIN")
        await admin.execute("CREATE DATABASE plain_db OWNER alarmtop_plain")
    finally:
        await admin.close()
    dsn = pg_dsn.replace("postgres@", "alarmtop_plain@").rsplit("/", 1)[0] + "/plain_db"
    runtime = Runtime(backend=PostgresBackend(dsn, shards=8), clock=VirtualClock(START_MS))
    runtime.register(Tenant)
    async with runtime:
        with pytest.raises(StorageError, match="permission denied to create role"):
            await runtime.get(Tenant, "mine").sql("SELECT 1 AS one")
