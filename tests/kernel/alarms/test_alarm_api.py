"""The alarm API an object sees: set/get/delete, overwrite, delete_all, handler rules."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pytest

from alarmtop.core import AlarmInfo, DurableObject, VirtualClock
from alarmtop.core.model.errors import SqlError
from tests.conftest import START_MS, RuntimeFactory


@dataclass
class Run:
    """One handler run: when (relative to START_MS), retry count, get_alarm() views."""

    at: int
    retry_count: int
    is_retry: bool
    alarm_on_entry: int | None
    alarm_after_set: int | None = None


@dataclass
class Env:
    runs: list[Run] = field(default_factory=list)


class Alarmed(DurableObject):
    """Each alarm run takes the next step of a stored plan.

    A step is {"set_in_ms": n or None, "raise": bool}; no step: do nothing.
    """

    async def plan(self, steps: list[dict[str, Any]]) -> None:
        await self.ctx.storage.put("plan", steps)

    async def set_at(self, at_ms: int) -> int | None:
        await self.ctx.storage.set_alarm(at_ms)
        return await self.ctx.storage.get_alarm()

    async def set_twice(self, first_ms: int, second_ms: int) -> None:
        await self.ctx.storage.set_alarm(first_ms)
        await self.ctx.storage.set_alarm(second_ms)

    async def set_iso(self, iso: str) -> int | None:
        await self.ctx.storage.set_alarm(datetime.fromisoformat(iso))
        return await self.ctx.storage.get_alarm()

    async def get_alarm(self) -> int | None:
        return await self.ctx.storage.get_alarm()

    async def delete_alarm(self) -> int | None:
        await self.ctx.storage.delete_alarm()
        return await self.ctx.storage.get_alarm()

    async def fill(self) -> None:
        await self.ctx.storage.put({"a": 1, "b": 2})
        await self.ctx.storage.sql.exec("CREATE TABLE t (x INTEGER)")
        await self.ctx.storage.sql.exec("INSERT INTO t VALUES (1)")

    async def wipe(self) -> None:
        await self.ctx.storage.delete_all()

    async def kv(self) -> dict[str, Any]:
        return await self.ctx.storage.list()

    async def count_t(self) -> int:
        return int((await self.ctx.storage.sql.exec("SELECT count(*) AS n FROM t")).one()["n"])

    async def alarm(self, info: AlarmInfo) -> None:
        run = Run(self.ctx.now_ms() - START_MS, info.retry_count, info.is_retry,
                  await self.ctx.storage.get_alarm())
        self.env.runs.append(run)
        steps = await self.ctx.storage.get("plan") or []
        step = steps.pop(0) if steps else {}
        await self.ctx.storage.put("plan", steps)
        if step.get("set_in_ms") is not None:
            await self.ctx.storage.set_alarm(self.ctx.now_ms() + step["set_in_ms"])
            run.alarm_after_set = await self.ctx.storage.get_alarm()
        if step.get("raise"):
            raise RuntimeError("planned failure")


def times(env: Env) -> list[int]:
    return [r.at for r in env.runs]


async def test_set_alarm_overwrites_a_later_one(make_runtime: RuntimeFactory,
                                                clock: VirtualClock) -> None:
    """One alarm per object: re-setting moves it; only the last time fires."""
    env = Env()
    rt = await make_runtime(Alarmed, env=env)
    obj = rt.get(Alarmed, "o")
    assert await obj.set_at(START_MS + 1000) == START_MS + 1000
    assert await obj.set_at(START_MS + 3000) == START_MS + 3000
    status = await rt.alarm(Alarmed, "o")
    assert status is not None and status.scheduled_ms == START_MS + 3000
    await clock.advance(10)
    assert times(env) == [3000]


async def test_set_alarm_overwrites_with_an_earlier_time(make_runtime: RuntimeFactory,
                                                         clock: VirtualClock) -> None:
    """Moving the alarm earlier, even within one event, fires once at the final time."""
    env = Env()
    rt = await make_runtime(Alarmed, env=env)
    obj = rt.get(Alarmed, "o")
    await obj.set_at(START_MS + 5000)
    await obj.set_twice(START_MS + 4000, START_MS + 2000)
    await clock.advance(10)
    assert times(env) == [2000]


async def test_delete_alarm_cancels_it(make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    """delete_alarm(): get_alarm() is None, the status is gone and nothing fires."""
    env = Env()
    rt = await make_runtime(Alarmed, env=env)
    obj = rt.get(Alarmed, "o")
    await obj.set_at(START_MS + 1000)
    assert await obj.delete_alarm() is None
    assert await obj.get_alarm() is None
    assert await rt.alarm(Alarmed, "o") is None
    await clock.advance(10)
    assert env.runs == []


async def test_delete_all_drops_data_and_alarm(make_runtime: RuntimeFactory,
                                               clock: VirtualClock) -> None:
    """storage.delete_all(): KV, tables and the alarm are gone."""
    env = Env()
    rt = await make_runtime(Alarmed, env=env)
    obj = rt.get(Alarmed, "o")
    await obj.fill()
    await obj.set_at(START_MS + 1000)
    assert await obj.kv() == {"a": 1, "b": 2}
    assert await obj.count_t() == 1

    await obj.wipe()
    assert await obj.kv() == {}
    with pytest.raises(SqlError, match=r"no such table|does not exist"):
        await obj.count_t()
    assert await obj.get_alarm() is None
    assert await rt.alarm(Alarmed, "o") is None
    await clock.advance(10)
    assert env.runs == []


async def test_delete_all_preserves_alarm_option(make_runtime: RuntimeFactory,
                                                 clock: VirtualClock) -> None:
    """With delete_all_preserves_alarm=True the data goes but the alarm stays and fires."""
    env = Env()
    rt = await make_runtime(Alarmed, env=env, delete_all_preserves_alarm=True)
    obj = rt.get(Alarmed, "o")
    await obj.fill()
    await obj.set_at(START_MS + 1000)
    await obj.wipe()
    assert await obj.kv() == {}
    assert await obj.get_alarm() == START_MS + 1000
    await clock.advance(10)
    assert times(env) == [1000]


async def test_get_alarm_inside_handler(make_runtime: RuntimeFactory,
                                        clock: VirtualClock) -> None:
    """In the handler get_alarm() is None, until the handler sets a new alarm."""
    env = Env()
    rt = await make_runtime(Alarmed, env=env)
    obj = rt.get(Alarmed, "o")
    await obj.plan([{}, {"set_in_ms": 500}, {}])
    await obj.set_at(START_MS + 1000)
    await clock.advance(1)
    await obj.set_at(START_MS + 2000)
    await clock.advance(1)
    assert [(r.at, r.alarm_on_entry, r.alarm_after_set) for r in env.runs] == [
        (1000, None, None), (2000, None, START_MS + 2500)]
    await clock.advance(1)
    assert [(r.at, r.alarm_on_entry) for r in env.runs[2:]] == [(2500, None)]
    assert await obj.get_alarm() is None  # success cleared it


async def test_get_alarm_inside_handler_that_woke_the_object(make_runtime: RuntimeFactory,
                                                             clock: VirtualClock) -> None:
    """Also when the alarm is what wakes the object (here: after a restart)."""
    env = Env()
    rt = await make_runtime(Alarmed, env=env)
    await rt.get(Alarmed, "o").set_at(START_MS + 1000)
    await rt.stop()
    await make_runtime(Alarmed, env=env)
    await clock.advance(1)
    assert [(r.at, r.retry_count, r.alarm_on_entry) for r in env.runs] == [(1000, 0, None)]


async def test_handler_sets_new_alarm_and_returns(make_runtime: RuntimeFactory,
                                                  clock: VirtualClock) -> None:
    """A retry that succeeds and re-arms leaves a fresh alarm (retry count back to 0)."""
    env = Env()
    rt = await make_runtime(Alarmed, env=env)
    obj = rt.get(Alarmed, "o")
    await obj.plan([{"raise": True}, {"set_in_ms": 10_000}, {}])
    await obj.set_at(START_MS)
    await clock.advance(2)  # failed at +0, retried and succeeded at +2 s
    status = await rt.alarm(Alarmed, "o")
    assert status is not None
    assert (status.state, status.retry_count, status.scheduled_ms, status.attempts) == (
        "pending", 0, START_MS + 12_000, [])
    assert await obj.get_alarm() == START_MS + 12_000
    await clock.advance(10)
    assert [(r.at, r.retry_count, r.is_retry) for r in env.runs] == [
        (0, 0, False), (2000, 1, True), (12_000, 0, False)]
    assert await rt.alarm(Alarmed, "o") is None


async def test_set_then_raise_retries_at_the_retry_time(make_runtime: RuntimeFactory,
                                                        clock: VirtualClock) -> None:
    """Set +10 s then raise: the failure is not hidden; the retry comes at +2 s, as retry 1."""
    env = Env()
    rt = await make_runtime(Alarmed, env=env)
    obj = rt.get(Alarmed, "o")
    await obj.plan([{"set_in_ms": 10_000, "raise": True}, {}])
    await obj.set_at(START_MS)
    await clock.advance(0)
    status = await rt.alarm(Alarmed, "o")
    assert status is not None
    assert (status.state, status.retry_count, status.next_attempt_ms) == (
        "retrying", 1, START_MS + 2000)
    assert status.last_error is not None and "planned failure" in status.last_error
    await clock.advance(5)
    assert [(r.at, r.retry_count) for r in env.runs] == [(0, 0), (2000, 1)]


async def test_set_then_raise_retries_at_an_earlier_new_alarm(make_runtime: RuntimeFactory,
                                                              clock: VirtualClock) -> None:
    """Set +500 ms then raise: the retry comes at the new alarm, and counts on (retry 1)."""
    env = Env()
    rt = await make_runtime(Alarmed, env=env)
    obj = rt.get(Alarmed, "o")
    await obj.plan([{"set_in_ms": 500, "raise": True}, {"raise": True}, {}])
    await obj.set_at(START_MS)
    await clock.advance(0)
    status = await rt.alarm(Alarmed, "o")
    assert status is not None
    assert (status.state, status.retry_count, status.next_attempt_ms) == (
        "retrying", 1, START_MS + 500)
    await clock.advance(10)
    # retry 1 at +0.5 s fails again: retry 2 follows the ladder (4 s after it)
    assert [(r.at, r.retry_count) for r in env.runs] == [(0, 0), (500, 1), (4500, 2)]
    assert await rt.alarm(Alarmed, "o") is None


async def test_alarm_in_the_past_fires_at_once(make_runtime: RuntimeFactory,
                                               clock: VirtualClock) -> None:
    """A time in the past fires without the clock moving."""
    env = Env()
    rt = await make_runtime(Alarmed, env=env)
    await rt.get(Alarmed, "o").set_at(START_MS - 60_000)
    await clock.advance(0)
    assert times(env) == [0]


async def test_datetime_is_accepted(make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    """An aware datetime is converted to epoch ms and fires then."""
    env = Env()
    rt = await make_runtime(Alarmed, env=env)
    obj = rt.get(Alarmed, "o")
    # START_MS is 2027-01-15 08:00:00 UTC; 09:00:05+01:00 is the same instant + 5 s.
    assert await obj.set_iso("2027-01-15T09:00:05+01:00") == START_MS + 5000
    await clock.advance(4.999)
    assert env.runs == []
    await clock.advance(0.001)
    assert times(env) == [5000]


async def test_get_alarm_while_retrying_is_the_next_attempt(make_runtime: RuntimeFactory,
                                                            clock: VirtualClock) -> None:
    """Between attempts, get_alarm() shows when the retry will run."""
    env = Env()
    rt = await make_runtime(Alarmed, env=env)
    obj = rt.get(Alarmed, "o")
    await obj.plan([{"raise": True}, {"raise": True}, {}])
    await obj.set_at(START_MS + 1000)
    await clock.advance(1)
    assert await obj.get_alarm() == START_MS + 3000
    await clock.advance(2)
    assert await obj.get_alarm() == START_MS + 7000
    await clock.advance(4)
    assert await obj.get_alarm() is None
    assert [(r.at, r.retry_count) for r in env.runs] == [(1000, 0), (3000, 1), (7000, 2)]


async def test_get_alarm_of_a_dead_letter_is_none(make_runtime: RuntimeFactory,
                                                  clock: VirtualClock) -> None:
    """A dead letter is the operator's business: user code sees no alarm."""
    env = Env()
    rt = await make_runtime(Alarmed, env=env)
    obj = rt.get(Alarmed, "o")
    await obj.plan([{"raise": True}] * 7)
    await obj.set_at(START_MS)
    await clock.advance(200)
    assert len(env.runs) == 7
    assert [d.object for d in await rt.dead_letters()] == ["Alarmed/o"]
    assert await obj.get_alarm() is None


async def test_later_alarm_set_before_a_raise_survives_the_successful_retry(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    """Set +10 s then raise: the retry at +2 s succeeds, and the +10 s alarm still fires."""
    env = Env()
    rt = await make_runtime(Alarmed, env=env)
    obj = rt.get(Alarmed, "o")
    await obj.plan([{"set_in_ms": 10_000, "raise": True}, {}, {}])
    await obj.set_at(START_MS)
    await clock.advance(20)
    assert [(r.at, r.retry_count) for r in env.runs] == [(0, 0), (2000, 1), (10_000, 0)]
    assert await rt.alarm(Alarmed, "o") is None
