"""The current code on a data dir written by alarmtop 0.1: migrated, never dropped.

`tests/fixtures/data-0.1.tar.gz` was made by `tests/fixtures/make_v01_data.py`
running on the 0.1 code: alarms with and without an object database, a dead
letter, a name with '~', a name long enough for a digest file name, and an
execution waiting on a timer. Started on it, this code upgrades the schema and
the files, and every alarm still fires.
"""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Any

import pytest

from alarmtop.core import AlarmInfo, DurableObject, RetryPolicy, Runtime, VirtualClock
from alarmtop.core.durable import DurableContext, Duration, durable_execution
from alarmtop.core.model.object_names import object_file_name

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "data-0.1.tar.gz"
START_MS = 1_800_000_000_000
LONG = "L" * 200
BARE_FIRED: list[int] = []


class Lease(DurableObject):
    async def alarm(self, info: AlarmInfo) -> None:
        if await self.ctx.storage.get("granted") is None:
            BARE_FIRED.append(self.ctx.now_ms() - START_MS)  # "bare" has no database
            return
        await self.ctx.storage.put("fired", self.ctx.now_ms() - START_MS)

    async def seen(self) -> dict[str, Any]:
        return {"granted": await self.ctx.storage.get("granted"),
                "fired": await self.ctx.storage.get("fired")}


class Flaky(DurableObject):
    async def alarm(self, info: AlarmInfo) -> None:  # mended since: it works now
        await self.ctx.storage.put("fired", info.retry_count)

    async def fired(self) -> Any:
        return await self.ctx.storage.get("fired")


@durable_execution(name="waiter")
async def waiter(event: Any, ctx: DurableContext) -> str:
    await ctx.step(lambda: "before", name="before")
    await ctx.wait(Duration.from_seconds(10))
    return "woke"


@pytest.fixture
def old_data(tmp_path: Path) -> Path:
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "data"


async def test_every_alarm_of_an_old_data_dir_still_fires(old_data: Path) -> None:
    BARE_FIRED.clear()
    clock = VirtualClock(START_MS + 2000)  # where the old process stopped
    rt = Runtime(old_data, clock=clock)
    rt.register(Lease)
    rt.register(Flaky, retry_policy=RetryPolicy(max_retries=0))
    rt.register_execution(waiter)
    await rt.start()
    try:
        # The files now have names no two objects can share; the long name keeps its.
        lease_dir = old_data / "objects" / "Lease"
        assert not (lease_dir / "a~b.sqlite").exists()
        assert (lease_dir / object_file_name("a~b")).exists()
        assert (lease_dir / object_file_name(LONG)).exists()
        assert sorted(await rt.backend.list_objects(10)) == [
            ("Flaky", "dead"), ("Lease", LONG), ("Lease", "a~b"), ("Lease", "with-file")]
        assert [d.object_name for d in await rt.dead_letters()] == ["dead"]

        await clock.advance(20)
        for name, at in [("with-file", 5000), ("a~b", 7000), (LONG, 8000)]:
            assert await rt.get(Lease, name).seen() == {"granted": at, "fired": at}, name
        assert BARE_FIRED == [6000]
        assert (await rt.executions.describe("w1"))["status"] == "succeeded"

        assert [d.object_name for d in await rt.dead_letters()] == ["dead"]
        await rt.rearm(Flaky, "dead")
        await clock.advance(1)
        assert await rt.get(Flaky, "dead").fired() == 0
        assert await rt.alarms() == []
    finally:
        await rt.stop()
