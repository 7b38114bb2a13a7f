"""Structured alarm-failure logs, and the sweeper that catches what the window missed."""

from __future__ import annotations

import json
import logging

import pytest

from alarmtop.core import AlarmInfo, DurableObject, JsonFormatter, RetryPolicy, VirtualClock
from alarmtop.core.model.alarm_policy import AlarmRecord
from tests.conftest import START_MS, RuntimeFactory


class Fails(DurableObject):
    async def arm(self) -> None:
        await self.ctx.storage.set_alarm(self.ctx.now_ms())

    async def alarm(self, info: AlarmInfo) -> None:
        raise ValueError("backend said no")


class Counts(DurableObject):
    async def alarm(self, info: AlarmInfo) -> None:
        await self.ctx.storage.put("fired", int(await self.ctx.storage.get("fired") or 0) + 1)

    async def fired(self) -> int:
        return int(await self.ctx.storage.get("fired") or 0)


async def test_every_alarm_failure_is_one_json_record(make_runtime: RuntimeFactory,
                                                      clock: VirtualClock,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """Each failed attempt is one record with object, retry count, whether it was the last
    attempt, and the error; as JSON its fields are top-level keys alerting can use."""
    rt = await make_runtime(Fails, policies={"Fails": RetryPolicy(max_retries=1)})
    caplog.set_level(logging.INFO, logger="alarmtop.alarms")
    await rt.get(Fails, "f").arm()
    await clock.advance(5)
    records = [r for r in caplog.records
               if getattr(r, "alarmtop", {}).get("event") == "alarm.failed"]
    assert len(records) == 2
    lines = [json.loads(JsonFormatter().format(r)) for r in records]
    assert [(x["object"], x["retry_count"], x["last_attempt"]) for x in lines] == [
        ("Fails/f", 0, False), ("Fails/f", 1, True)]
    assert all("ValueError: backend said no" in x["error"] for x in lines)
    assert [x["level"] for x in lines] == ["warning", "error"]


async def test_sweeper_requeues_an_overdue_alarm_the_window_missed(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    """An alarm written to the index behind the scheduler's back (as another process or a
    lost wake-up would leave it) is fired by the next sweep, not left overdue forever."""
    rt = await make_runtime(Counts, sweep_interval=30)
    rec = AlarmRecord("Counts", "c", START_MS + 1000, next_attempt_ms=START_MS + 1000)
    await rt.backend.database.write([rec])
    await clock.advance(10)
    status = await rt.alarm("Counts", "c")  # a look that leaves the window alone
    assert status is not None and status.attempt_count == 0  # the window never heard of it
    events = rt.events.subscribe("alarm.")
    await clock.advance(25)  # the sweep at +30 s finds it
    assert await rt.get(Counts, "c").fired() == 1
    assert "alarm.swept" in [e.type for e in events.drain()]
    assert await rt.alarm(Counts, "c") is None
