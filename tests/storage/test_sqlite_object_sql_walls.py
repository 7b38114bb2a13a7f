"""An object's SQL on SQLite stays inside its own database and off the runtime's rows:
ATTACH, DETACH, transaction control, pragmas that change how the file is kept and
every use of the `_alarmtop_*` tables are refused with a clear SqlError, changing
nothing; a drop of every table the object can see leaves the runtime's rows, and
the object keeps working without a restart."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from alarmtop.core import AlarmInfo, DurableObject, Runtime, VirtualClock
from alarmtop.core.errors import SqlError
from tests.conftest import START_MS, RuntimeFactory

pytestmark = pytest.mark.sqlite_only  # reads the SQLite files themselves


@dataclass
class Env:
    fired: list[str] = field(default_factory=list)


class Tenant(DurableObject):
    async def sql(self, text: str, *params: Any) -> list[dict[str, Any]]:
        return (await self.ctx.storage.sql.exec(text, *params)).all()

    async def setup(self, at_ms: int) -> None:
        await self.ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS notes (n TEXT)")
        await self.ctx.storage.sql.exec("INSERT INTO notes VALUES ('kept')")
        await self.ctx.storage.put("k", "v")
        await self.ctx.storage.set_alarm(at_ms)

    async def drop_everything(self) -> dict[str, list[str]]:
        """What delete_all() does, by hand: drop every table the schema lists."""
        dropped, refused = [], []
        tables = await self.ctx.storage.sql.exec(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        for row in tables.all():
            try:
                await self.ctx.storage.sql.exec(f'DROP TABLE "{row["name"]}"')
                dropped.append(row["name"])
            except SqlError:
                refused.append(row["name"])
        return {"dropped": dropped, "refused": refused}

    async def state(self) -> dict[str, Any]:
        return {"k": await self.ctx.storage.get("k"), "alarm": await self.ctx.storage.get_alarm()}

    async def put(self, key: str, value: Any) -> None:
        await self.ctx.storage.put(key, value)

    async def alarm(self, info: AlarmInfo) -> None:
        self.env.fired.append(self.ctx.id)


ATTACKS = [
    "ATTACH DATABASE '{runtime}' AS rt",
    "ATTACH DATABASE '{other}' AS other",
    "DETACH DATABASE main",
    "SELECT * FROM _alarmtop_kv",
    "SELECT * FROM main._ALARMTOP_KV",
    "UPDATE _alarmtop_alarm SET at_ms = 0",
    "DELETE FROM _alarmtop_meta",
    "INSERT INTO _alarmtop_kv VALUES ('x', '1')",
    "DROP TABLE _alarmtop_kv",
    "ALTER TABLE _alarmtop_alarm RENAME TO gone",
    "CREATE INDEX sneaky ON _alarmtop_kv (value)",
    "CREATE TABLE _alarmtop_mine (x)",
    "CREATE TEMP TRIGGER t AFTER INSERT ON main._alarmtop_kv BEGIN SELECT 1; END",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "SAVEPOINT mine",
    "RELEASE mine",
    "PRAGMA writable_schema = 1",
    "PRAGMA journal_mode = DELETE",
    "PRAGMA synchronous = OFF",
    "PRAGMA query_only = 1",
    "PRAGMA wal_checkpoint(TRUNCATE)",
    "SELECT load_extension('x')",
]


@pytest.mark.parametrize("attack", ATTACKS)
async def test_each_attack_is_refused_and_changes_nothing(
        make_runtime: RuntimeFactory, data_dir: Path, clock: VirtualClock, attack: str) -> None:
    env = Env()
    rt = await make_runtime(Tenant, env=env)
    mine, other = rt.get(Tenant, "mine"), rt.get(Tenant, "other")
    await mine.setup(START_MS + 10_000)
    await other.setup(START_MS + 10_000)
    text = attack.format(runtime=data_dir / "runtime.sqlite",
                         other=rt.backend.object_path("Tenant", "other"))  # type: ignore[attr-defined]
    with pytest.raises(SqlError) as caught:
        await mine.sql(text)
    assert "not authorized" not in str(caught.value)  # says why, in alarmtop's words
    assert await mine.state() == {"k": "v", "alarm": START_MS + 10_000}
    assert await mine.sql("SELECT n FROM notes") == [{"n": "kept"}]
    await clock.advance(10)
    assert sorted(env.fired) == ["mine", "other"]


async def test_a_view_or_trigger_cannot_reach_the_runtime_tables(
        make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime(Tenant, env=Env())
    t = rt.get(Tenant, "t")
    await t.setup(START_MS + 10_000)
    await t.sql("CREATE VIEW peek AS SELECT * FROM _alarmtop_kv")
    with pytest.raises(SqlError, match="_alarmtop_kv is the runtime's own table"):
        await t.sql("SELECT * FROM peek")
    await t.sql("CREATE TRIGGER wipe AFTER INSERT ON notes BEGIN DELETE FROM _alarmtop_kv; END")
    with pytest.raises(SqlError, match="runtime's own table"):
        await t.sql("INSERT INTO notes VALUES ('x')")
    assert await t.state() == {"k": "v", "alarm": START_MS + 10_000}


async def test_ordinary_sql_and_harmless_pragmas_still_work(make_runtime: RuntimeFactory
                                                            ) -> None:
    rt = await make_runtime(Tenant, env=Env())
    t = rt.get(Tenant, "t")
    await t.setup(START_MS + 10_000)
    assert [r["name"] for r in await t.sql("PRAGMA table_info(notes)")] == ["n"]
    assert [r["name"] for r in await t.sql("SELECT name FROM pragma_table_info('notes')")] \
        == ["n"]
    await t.sql("PRAGMA user_version = 7")
    assert await t.sql("PRAGMA user_version") == [{"user_version": 7}]
    assert (await t.sql("PRAGMA journal_mode"))[0]["journal_mode"] == "wal"
    await t.sql("CREATE TABLE a (id INTEGER PRIMARY KEY, v TEXT)")
    await t.sql("INSERT INTO a (v) VALUES (?)", "x")
    assert await t.sql("SELECT v FROM a") == [{"v": "x"}]


async def test_dropping_every_table_keeps_the_object_working(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    """Without a restart: its key-values, its alarm (set before and after) and new SQL."""
    env = Env()
    rt = await make_runtime(Tenant, env=env)
    t = rt.get(Tenant, "t")
    await t.setup(START_MS + 10_000)
    outcome = await t.drop_everything()
    assert outcome["dropped"] == ["notes"]
    assert sorted(outcome["refused"]) == ["_alarmtop_alarm", "_alarmtop_kv", "_alarmtop_meta"]
    assert await t.state() == {"k": "v", "alarm": START_MS + 10_000}
    await t.put("k2", 2)
    await clock.advance(10)
    assert env.fired == ["t"]
    await t.setup(START_MS + 20_000)
    await clock.advance(10)
    assert env.fired == ["t", "t"]
    path = rt.backend.object_path("Tenant", "t")  # type: ignore[attr-defined]
    with sqlite3.connect(path) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"_alarmtop_kv", "_alarmtop_alarm", "_alarmtop_meta", "notes"} <= names


async def test_the_runtime_database_is_untouched_by_an_attach_attempt(
        tmp_path: Path) -> None:
    """The attack of the review: ATTACH runtime.sqlite, delete the audit log."""
    rt = Runtime(tmp_path, clock=VirtualClock(START_MS))
    rt.register(Tenant)
    async with rt:
        await rt.audit.record("op", "rearm", "Tenant/x")
        with pytest.raises(SqlError, match="ATTACH and DETACH are refused"):
            await rt.get(Tenant, "t").sql(
                f"ATTACH DATABASE '{tmp_path / 'runtime.sqlite'}' AS rt")
        assert await rt.audit.count() == 1
