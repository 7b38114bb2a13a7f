"""A handler that raises something other than an `Exception` (SystemExit,
KeyboardInterrupt, a CancelledError of its own, a BaseException subclass) fails
that attempt, with its type recorded; the runtime and its process go on."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from alarmtop.core import AlarmInfo, DurableObject, VirtualClock
from alarmtop.core.errors import HandlerAborted
from tests.conftest import START_MS, RuntimeFactory


class Odd(BaseException):
    """Neither an Exception nor one of Python's own."""


RAISED: dict[str, type[BaseException]] = {
    "exit": SystemExit, "interrupt": KeyboardInterrupt, "cancel": asyncio.CancelledError,
    "odd": Odd, "generator": GeneratorExit,
}


@dataclass
class Env:
    runs: list[tuple[str, int]] = field(default_factory=list)


class Raiser(DurableObject):
    """The first attempt raises the kind its name says; the retry succeeds."""

    async def arm(self, at_ms: int) -> None:
        await self.ctx.storage.put("armed", True)
        await self.ctx.storage.set_alarm(at_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        self.env.runs.append((self.ctx.id, info.retry_count))
        if info.retry_count == 0:
            raise RAISED[self.ctx.id]("from the handler")

    async def boom(self, kind: str) -> None:
        await self.ctx.storage.put("called", kind)
        raise RAISED[kind]("from a call")

    async def called(self) -> str | None:
        value: str | None = await self.ctx.storage.get("called")
        return value


@pytest.mark.parametrize("kind", sorted(RAISED))
async def test_a_handler_raising_a_base_exception_fails_its_attempt(
        make_runtime: RuntimeFactory, clock: VirtualClock, kind: str) -> None:
    env = Env()
    rt = await make_runtime(Raiser, env=env)
    await rt.get(Raiser, kind).arm(START_MS)
    await clock.advance(0)
    status = await rt.alarm(Raiser, kind)
    assert status is not None and (status.state, status.retry_count) == ("retrying", 1)
    error = status.attempts[0].error
    assert error is not None and error.startswith(RAISED[kind].__name__), error
    assert rt.running
    await clock.advance(2)  # the retry runs and succeeds: the process went on
    assert env.runs == [(kind, 0), (kind, 1)]
    assert await rt.alarm(Raiser, kind) is None


@pytest.mark.parametrize("kind", sorted(RAISED))
async def test_a_call_raising_a_base_exception_fails_that_call(
        make_runtime: RuntimeFactory, kind: str) -> None:
    """The caller gets HandlerAborted (naming the type), never the raw SystemExit; the
    call's writes are kept, as for any raise."""
    rt = await make_runtime(Raiser, env=Env())
    stub = rt.get(Raiser, "caller")
    with pytest.raises(HandlerAborted, match=RAISED[kind].__name__) as caught:
        await stub.boom(kind)
    assert isinstance(caught.value.__cause__, RAISED[kind])
    assert await stub.called() == kind
