"""Durable objects: one event at a time, concurrency across objects, wake and hibernation,
re-entrancy, write semantics, and the SQL and KV storage APIs."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from alarmtop.core import AlarmInfo, DurableObject, ObjectContext, Runtime, VirtualClock
from alarmtop.core.model.errors import ReentrantCall, SqlError
from tests.conftest import START_MS, RuntimeFactory
from tests.kernel.tracked import spawn


@dataclass
class Env:
    log: list[tuple[str, str, int]] = field(default_factory=list)  # (enter|exit, tag, at)
    inits: list[tuple[str, int]] = field(default_factory=list)  # (object name, at)
    rt: Runtime | None = None


def rel(ctx: ObjectContext) -> int:
    return ctx.now_ms() - START_MS


class Worker(DurableObject):
    def __init__(self, ctx: ObjectContext, env: Env) -> None:
        super().__init__(ctx, env)
        env.inits.append((ctx.id, rel(ctx)))

    async def work(self, tag: str, seconds: float) -> int:
        self.env.log.append(("enter", tag, rel(self.ctx)))
        await self.ctx.sleep(seconds)
        self.env.log.append(("exit", tag, rel(self.ctx)))
        return rel(self.ctx)

    async def ping(self) -> str:
        """Touches no storage."""
        return self.ctx.id

    async def put_value(self, key: str, value: Any) -> None:
        await self.ctx.storage.put(key, value)

    async def get_value(self, key: str) -> Any:
        return await self.ctx.storage.get(key)

    async def arm(self, at_ms: int) -> None:
        await self.ctx.storage.set_alarm(at_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        await self.work("alarm", 1)


def assert_no_overlap(log: list[tuple[str, str, int]]) -> None:
    """Every enter is followed by the exit of the same tag, with nothing in between."""
    assert len(log) % 2 == 0
    for i in range(0, len(log), 2):
        (kind_in, tag_in, t_in), (kind_out, tag_out, t_out) = log[i], log[i + 1]
        assert (kind_in, kind_out, tag_in) == ("enter", "exit", tag_out), log
        assert t_out >= t_in
        if i:
            assert t_in >= log[i - 1][2]


# -- one event at a time ----------------------------------------------------------------


async def test_events_for_one_object_never_interleave(make_runtime: RuntimeFactory,
                                                      clock: VirtualClock) -> None:
    """Four concurrent RPCs and an alarm, each sleeping mid-event, run strictly one by one."""
    env = Env()
    rt = await make_runtime(Worker, env=env)
    obj = rt.get(Worker, "w")
    await obj.arm(START_MS + 500)  # falls due while the first call sleeps
    tasks = [spawn(clock, obj.work(f"rpc{i}", 1)) for i in range(4)]
    await clock.advance(10)
    ends = await asyncio.gather(*tasks)

    assert_no_overlap(env.log)
    tags = [tag for kind, tag, _ in env.log if kind == "enter"]
    assert sorted(tags) == ["alarm", "rpc0", "rpc1", "rpc2", "rpc3"]
    assert sorted([*ends, env.log[-1][2]]) == [1000, 2000, 3000, 4000, 5000]
    assert await rt.alarm(Worker, "w") is None


async def test_different_objects_run_concurrently(make_runtime: RuntimeFactory,
                                                  clock: VirtualClock) -> None:
    """Two objects sleeping 10 s each both finish at +10 s (not +20 s)."""
    env = Env()
    rt = await make_runtime(Worker, env=env)
    tasks = [spawn(clock, rt.get(Worker, name).work(name, 10)) for name in ("a", "b")]
    await clock.advance(9.999)
    assert not any(t.done() for t in tasks)
    await clock.advance(0.001)
    assert all(t.done() for t in tasks)
    assert await asyncio.gather(*tasks) == [10_000, 10_000]
    assert sorted(e for e in env.log if e[0] == "enter") == [("enter", "a", 0), ("enter", "b", 0)]


# -- wake, construction and block_concurrency_while --------------------------------------


class Slow(DurableObject):
    """The constructor blocks events for 5 s of set-up."""

    def __init__(self, ctx: ObjectContext, env: Env) -> None:
        super().__init__(ctx, env)
        self.ready_at: int | None = None
        env.inits.append((ctx.id, rel(ctx)))
        ctx.block_concurrency_while(self._setup)

    async def _setup(self) -> None:
        await self.ctx.sleep(5)
        await self.ctx.storage.put("setups", int(await self.ctx.storage.get("setups") or 0) + 1)
        self.ready_at = rel(self.ctx)

    async def probe(self, tag: str) -> dict[str, Any]:
        return {"tag": tag, "ready_at": self.ready_at, "at": rel(self.ctx),
                "setups": await self.ctx.storage.get("setups")}


async def test_block_concurrency_while_holds_events(make_runtime: RuntimeFactory,
                                                    clock: VirtualClock) -> None:
    """Events wait until the constructor's blocking set-up has finished."""
    env = Env()
    rt = await make_runtime(Slow, env=env)
    obj = rt.get(Slow, "s")
    tasks = [spawn(clock, obj.probe(f"p{i}")) for i in range(3)]
    await clock.advance(4.999)
    assert not any(t.done() for t in tasks)
    await clock.advance(0.001)
    results = await asyncio.gather(*tasks)
    assert [(r["ready_at"], r["at"], r["setups"]) for r in results] == [(5000, 5000, 1)] * 3
    assert env.inits == [("s", 0)]  # constructed once for all three


async def test_init_runs_on_every_wake(make_runtime: RuntimeFactory,
                                       clock: VirtualClock) -> None:
    """After hibernation the next event constructs the object again, blocking again."""
    env = Env()
    rt = await make_runtime(Slow, env=env, hibernate_after=10)
    obj = rt.get(Slow, "s")
    task = spawn(clock, obj.probe("first"))
    await clock.advance(5)
    assert (await task)["setups"] == 1
    # (A restart is a wake too; use one so this test does not depend on the reaper.)
    await rt.stop()
    rt2 = await make_runtime(Slow, env=env)
    task = spawn(clock, rt2.get(Slow, "s").probe("second"))
    await clock.advance(5)
    result = await task
    assert (result["ready_at"], result["setups"]) == (10_000, 2)
    assert env.inits == [("s", 0), ("s", 5000)]


# -- hibernation ---------------------------------------------------------------------------


async def test_idle_object_hibernates_and_wakes_with_its_state(make_runtime: RuntimeFactory,
                                                               clock: VirtualClock) -> None:
    """Idle for hibernate_after seconds: evicted (event, not resident); state survives."""
    env = Env()
    rt = await make_runtime(Worker, env=env, hibernate_after=5)
    sub = rt.events.subscribe("object.")
    obj = rt.get(Worker, "w")
    assert await obj.ping() == "w"  # wakes it (no storage touched)
    await clock.advance(1)
    await obj.put_value("x", {"n": 42})  # last activity at +1 s
    assert rt.resident_objects() == [("Worker", "w")]

    await clock.advance(4.999)
    assert rt.resident_objects() == [("Worker", "w")]
    await clock.advance(0.001)
    assert rt.resident_objects() == []
    assert [(e.type, e.data["object"], e.at_ms - START_MS) for e in sub.drain()] == [
        ("object.woke", "Worker/w", 0), ("object.hibernated", "Worker/w", 6000)]

    assert await obj.get_value("x") == {"n": 42}
    assert env.inits == [("w", 0), ("w", 6000)]
    assert [e.type for e in sub.drain()] == ["object.woke"]


async def test_object_woken_by_a_storage_write_hibernates(make_runtime: RuntimeFactory,
                                                          clock: VirtualClock) -> None:
    """An object whose waking event writes storage is hibernated hibernate_after later."""
    env = Env()
    rt = await make_runtime(Worker, env=env, hibernate_after=5)
    sub = rt.events.subscribe("object.hibernated")
    await rt.get(Worker, "w").put_value("x", 1)
    await clock.advance(60)
    assert [e.at_ms - START_MS for e in sub.drain()] == [5000]
    assert rt.resident_objects() == []


async def test_max_resident_evicts_least_recently_used(make_runtime: RuntimeFactory,
                                                       clock: VirtualClock) -> None:
    """With max_resident=2, waking a third object evicts the least recently used one."""
    env = Env()
    rt = await make_runtime(Worker, env=env, max_resident=2)
    sub = rt.events.subscribe("object.hibernated")
    for name in ("a", "b"):
        await rt.get(Worker, name).put_value("me", name)
    await rt.get(Worker, "a").ping()  # b is now the least recently used
    await rt.get(Worker, "c").put_value("me", "c")
    await clock.advance(0)
    assert [e.data["object"] for e in sub.drain()] == ["Worker/b"]
    assert sorted(rt.resident_objects()) == [("Worker", "a"), ("Worker", "c")]

    assert await rt.get(Worker, "b").get_value("me") == "b"  # woken again, with its state
    await clock.advance(0)
    assert [e.data["object"] for e in sub.drain()] == ["Worker/a"]
    assert sorted(rt.resident_objects()) == [("Worker", "b"), ("Worker", "c")]
    assert [name for name, _ in env.inits] == ["a", "b", "c", "b"]


# -- re-entrancy ---------------------------------------------------------------------------


class Caller(DurableObject):
    async def ping(self) -> str:
        return self.ctx.id

    async def call(self, name: str) -> str:
        assert self.env.rt is not None
        return str(await self.env.rt.get(Caller, name).ping())

    async def relay(self, via: str) -> str:
        """Ask `via` to call us back (a cycle)."""
        assert self.env.rt is not None
        return str(await self.env.rt.get(Caller, via).call(self.ctx.id))


async def test_calling_itself_through_a_stub_raises(make_runtime: RuntimeFactory) -> None:
    """A self-call would deadlock on the object's lock: ReentrantCall instead."""
    env = Env()
    rt = await make_runtime(Caller, env=env)
    env.rt = rt
    me = rt.get(Caller, "me")
    with pytest.raises(ReentrantCall, match="call the method directly on self") as info:
        await me.call("me")
    assert (info.value.class_name, info.value.object_name) == ("Caller", "me")
    assert await me.call("other") == "other"  # other objects are fine
    assert await me.ping() == "me"  # and the object is not left locked


async def test_call_cycle_raises_instead_of_deadlocking(make_runtime: RuntimeFactory) -> None:
    """a -> b -> a is re-entry into a: ReentrantCall, not a hang."""
    env = Env()
    rt = await make_runtime(Caller, env=env)
    env.rt = rt
    with pytest.raises(ReentrantCall):
        await rt.get(Caller, "a").relay("b")
    assert await rt.get(Caller, "a").ping() == "a"
    assert await rt.get(Caller, "b").ping() == "b"


# -- write semantics ---------------------------------------------------------------------


class Writer(DurableObject):
    async def put_then_raise(self, value: int) -> None:
        await self.ctx.storage.put("k", value)
        raise RuntimeError("after the write")

    async def tx_then_raise(self, value: int) -> None:
        async with self.ctx.storage.transaction():
            await self.ctx.storage.put("k", value)
            await self.ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
            await self.ctx.storage.sql.exec("INSERT INTO t VALUES (?)", value)
            await self.ctx.storage.set_alarm(self.ctx.now_ms() + 1000)
            raise RuntimeError("inside the transaction")

    async def tx_ok(self, value: int) -> None:
        async with self.ctx.storage.transaction():
            await self.ctx.storage.put("k", value)

    async def state(self) -> dict[str, Any]:
        try:  # whether table t exists, asked in SQL both backends speak
            await self.ctx.storage.sql.exec("SELECT count(*) AS n FROM t")
            tables = 1
        except SqlError:
            tables = 0
        return {"k": await self.ctx.storage.get("k"), "t": tables,
                "alarm": await self.ctx.storage.get_alarm()}

    async def alarm(self, info: AlarmInfo) -> None:
        await self.ctx.storage.put("from_alarm", info.retry_count)
        raise RuntimeError("alarm failed after writing")

    async def arm(self) -> None:
        await self.ctx.storage.set_alarm(self.ctx.now_ms())

    async def from_alarm(self) -> Any:
        return await self.ctx.storage.get("from_alarm")


async def test_writes_survive_a_raise_but_transactions_roll_back(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    """A raising event keeps its writes; a raising transaction() undoes its own (alarm too)."""
    rt = await make_runtime(Writer)
    w = rt.get(Writer, "w")
    with pytest.raises(RuntimeError, match="after the write"):
        await w.put_then_raise(1)
    assert await w.state() == {"k": 1, "t": 0, "alarm": None}

    with pytest.raises(RuntimeError, match="inside the transaction"):
        await w.tx_then_raise(2)
    assert await w.state() == {"k": 1, "t": 0, "alarm": None}
    assert await rt.alarm(Writer, "w") is None

    await w.tx_ok(3)
    assert await w.state() == {"k": 3, "t": 0, "alarm": None}

    # Durable: a fresh runtime on the same files reads the same.
    await rt.stop()
    rt2 = await make_runtime(Writer)
    assert await rt2.get(Writer, "w").state() == {"k": 3, "t": 0, "alarm": None}


async def test_alarm_handler_writes_survive_its_raise(make_runtime: RuntimeFactory,
                                                      clock: VirtualClock) -> None:
    """A failing alarm attempt's writes are kept."""
    rt = await make_runtime(Writer)
    w = rt.get(Writer, "w")
    await w.arm()
    await clock.advance(0)
    assert await w.from_alarm() == 0
    await clock.advance(2)
    assert await w.from_alarm() == 1


# -- SQL -----------------------------------------------------------------------------------


class Sql(DurableObject):
    async def run(self, sql: str, *params: Any) -> dict[str, Any]:
        cur = await self.ctx.storage.sql.exec(sql, *params)
        return {"all": cur.all(), "iter": list(cur), "rows_read": cur.rows_read,
                "rows_written": cur.rows_written, "columns": cur.column_names}

    async def one(self, sql: str, *params: Any) -> dict[str, Any]:
        return (await self.ctx.storage.sql.exec(sql, *params)).one()


async def test_sql_cursor(make_runtime: RuntimeFactory) -> None:
    """exec() cursors: all(), iteration, one(), rows_read, rows_written, column_names."""
    rt = await make_runtime(Sql)
    db = rt.get(Sql, "db")
    created = await db.run("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, qty INT)")
    assert (created["rows_written"], created["all"]) == (0, [])

    ins = await db.run("INSERT INTO items (id, name, qty) VALUES (?, ?, ?), (?, ?, ?), "
                       "(?, ?, ?)", 1, "apple", 3, 2, "pear", 0, 3, "fig", 7)
    assert (ins["rows_written"], ins["rows_read"], ins["all"]) == (3, 0, [])

    sel = await db.run("SELECT id, name, qty FROM items ORDER BY id")
    expected = [{"id": 1, "name": "apple", "qty": 3}, {"id": 2, "name": "pear", "qty": 0},
                {"id": 3, "name": "fig", "qty": 7}]
    assert sel["all"] == expected
    assert sel["iter"] == expected
    assert (sel["rows_read"], sel["rows_written"]) == (3, 0)
    assert sel["columns"] == ["id", "name", "qty"]

    upd = await db.run("UPDATE items SET qty = qty + 1 WHERE qty > ?", 0)
    assert upd["rows_written"] == 2
    dele = await db.run("DELETE FROM items WHERE name = ?", "pear")
    assert dele["rows_written"] == 1

    assert await db.one("SELECT name, qty FROM items WHERE id = ?", 3) == {"name": "fig",
                                                                          "qty": 8}
    with pytest.raises(LookupError, match="exactly one row, got 0"):
        await db.one("SELECT * FROM items WHERE id = ?", 99)
    with pytest.raises(LookupError, match="exactly one row, got 2"):
        await db.one("SELECT * FROM items")
    with pytest.raises(SqlError, match=r"no such table|does not exist"):
        await db.run("SELECT * FROM nope")


async def test_sql_column_names_of_an_empty_result(make_runtime: RuntimeFactory) -> None:
    """column_names come from the statement, not from the rows."""
    rt = await make_runtime(Sql)
    db = rt.get(Sql, "db")
    await db.run("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)")
    assert (await db.run("SELECT id, name FROM items"))["columns"] == ["id", "name"]


# -- KV ------------------------------------------------------------------------------------


class Kv(DurableObject):
    async def op(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return await getattr(self.ctx.storage, name)(*args, **kwargs)

    async def keys(self, prefix: str = "", limit: int | None = None) -> list[str]:
        return list(await self.ctx.storage.list(prefix=prefix, limit=limit))


async def test_kv_get_put_delete_list(make_runtime: RuntimeFactory) -> None:
    """KV: single and dict forms of put/get/delete, list with prefix and limit, in key order."""
    rt = await make_runtime(Kv)
    kv = rt.get(Kv, "kv")
    assert await kv.op("get", "missing") is None
    await kv.op("put", "doc", {"n": [1, 2.5, None, True], "s": "é"})
    assert await kv.op("get", "doc") == {"n": [1, 2.5, None, True], "s": "é"}

    await kv.op("put", {"user:2": "b", "user:10": "j", "user:1": "a", "usr": "x",
                        "a%b": 1, "a_b": 2, "axb": 3})
    assert await kv.op("get", ["user:1", "nope", "usr"]) == {"user:1": "a", "usr": "x"}
    assert await kv.keys("user:") == ["user:1", "user:10", "user:2"]
    assert await kv.op("list", prefix="user:") == {"user:1": "a", "user:10": "j", "user:2": "b"}
    assert await kv.keys("user:", limit=2) == ["user:1", "user:10"]
    assert await kv.keys("a%") == ["a%b"]  # no LIKE wildcards
    assert await kv.keys("a_") == ["a_b"]
    assert await kv.keys(limit=3) == ["a%b", "a_b", "axb"]
    assert len(await kv.op("list")) == 8

    await kv.op("put", "usr", "overwritten")
    assert await kv.op("get", "usr") == "overwritten"

    assert await kv.op("delete", "doc") is True
    assert await kv.op("delete", "doc") is False
    assert await kv.op("delete", ["user:1", "user:2", "nope"]) == 2
    assert await kv.keys("u") == ["user:10", "usr"]

    with pytest.raises(TypeError, match="needs a value"):
        await kv.op("put", "k")
    with pytest.raises(TypeError, match="no second argument"):
        await kv.op("put", {"k": 1}, 2)
