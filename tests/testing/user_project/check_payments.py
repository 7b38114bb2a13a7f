"""A user's own tests of their own objects, as a user writes them.

`tests/testing/test_user_project.py` copies this file into an empty folder as
`test_payments.py` and runs plain `pytest` there: no conftest, no configuration
(so pytest-asyncio is in strict mode and the tests are marked), only what the
installed alarmtop gives.
"""

from __future__ import annotations

from typing import Any

import pytest

from alarmtop.core import AlarmInfo, DurableObject, Runtime, VirtualClock
from alarmtop.core.durable import (
    CallbackConfig,
    CallbackTimeoutError,
    DurableContext,
    Duration,
    durable_execution,
)
from alarmtop.testing import (
    START_MS,
    attempts,
    inject_fault,
    ladder,
    send_callback,
    until,
    until_dead,
    until_status,
    waiting_callback,
)

HOUR_S = 3600


class Payments(DurableObject):
    async def charge_later(self) -> None:
        await self.ctx.storage.set_alarm(self.ctx.now_ms())

    async def alarm(self, info: AlarmInfo) -> None:
        if await self.ctx.storage.get("processor") != "up":
            raise RuntimeError("card processor down")
        await self.ctx.storage.put("charged", self.ctx.now_ms())

    async def processor_up(self) -> None:
        await self.ctx.storage.put("processor", "up")

    async def charged(self) -> int | None:
        value = await self.ctx.storage.get("charged")
        return None if value is None else int(value)


@durable_execution(name="refund")
async def refund(event: Any, ctx: DurableContext) -> str:
    cb = await ctx.create_callback("approval", CallbackConfig(timeout=Duration(HOUR_S)))
    try:
        return f"refunded {event['order']}: {await cb.result()}"
    except CallbackTimeoutError:
        return f"refund of {event['order']} expired"


pytestmark = pytest.mark.asyncio


@pytest.mark.alarmtop(register=[Payments])
async def test_a_failing_charge_walks_the_whole_ladder(alarmtop_runtime: Runtime) -> None:
    await alarmtop_runtime.get(Payments, "p1").charge_later()
    dead = await until_dead(alarmtop_runtime, Payments, "p1")
    assert dead.retry_count == 6
    assert await ladder(alarmtop_runtime, Payments, "p1") == [0, 2, 6, 14, 30, 62, 126]
    [first, *_] = await attempts(alarmtop_runtime, Payments, "p1")
    assert first.error is not None and "card processor down" in first.error


@pytest.mark.alarmtop(register=[Payments])
async def test_nothing_leaks_from_the_test_before(alarmtop_runtime: Runtime,
                                                  virtual_clock: VirtualClock) -> None:
    assert virtual_clock.now_ms() == START_MS
    assert await alarmtop_runtime.alarms() == []


@pytest.mark.alarmtop(register=[Payments])
async def test_a_charge_goes_through_once_the_processor_is_back(
        alarmtop_runtime: Runtime, virtual_clock: VirtualClock) -> None:
    payments = alarmtop_runtime.get(Payments, "p2")
    await payments.charge_later()
    await virtual_clock.advance(10)  # attempts at 0, 2 and 6 s fail
    assert await payments.charged() is None
    await payments.processor_up()
    assert await until(alarmtop_runtime, payments.charged) == START_MS + 14_000


@pytest.mark.alarmtop(register=[refund])
async def test_an_unanswered_refund_expires_after_an_hour(alarmtop_runtime: Runtime,
                                                          virtual_clock: VirtualClock) -> None:
    eid = await alarmtop_runtime.executions.start("refund", {"order": "o1"})
    await waiting_callback(alarmtop_runtime, eid, "approval")
    done = await until_status(alarmtop_runtime, eid, "succeeded")
    assert done["result"] == "refund of o1 expired"
    assert virtual_clock.now_ms() == START_MS + HOUR_S * 1000


@pytest.mark.alarmtop(register=[refund])
async def test_an_approved_refund(alarmtop_runtime: Runtime) -> None:
    eid = await alarmtop_runtime.executions.start("refund", {"order": "o2"})
    await send_callback(alarmtop_runtime, eid, "approval", "approved")
    assert (await until_status(alarmtop_runtime, eid))["result"] == "refunded o2: approved"


@pytest.mark.alarmtop(register=[Payments])
async def test_an_injected_fault(alarmtop_runtime: Runtime) -> None:
    payments = alarmtop_runtime.get(Payments, "p3")
    await payments.processor_up()
    with inject_fault(alarmtop_runtime, (Payments, "p3"), "alarm_raise", times=2):
        await payments.charge_later()
        assert await until(alarmtop_runtime, payments.charged) == START_MS + 6_000
