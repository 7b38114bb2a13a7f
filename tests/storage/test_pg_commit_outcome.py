"""On PostgreSQL: the connection goes while an event's commit is under way. The commit
may have landed; the event fails with `CommitOutcomeUnknown`, and the alarm row it
wrote ahead of the commit stays, so a landed alarm fires. Taking the row back (as
for a commit that surely failed) left a committed alarm with no row until the object
happened to wake again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from alarmtop.core import AlarmInfo, DurableObject, PostgresBackend, Runtime, VirtualClock
from alarmtop.core.errors import CommitOutcomeUnknown
from tests.conftest import START_MS
from tests.fleet.conftest import until

FIRED: list[int] = []


class Lease(DurableObject):
    async def grant(self, ttl_ms: int, value: str) -> None:
        await self.ctx.storage.put("lease", value)
        await self.ctx.storage.set_alarm(self.ctx.now_ms() + ttl_ms)

    async def value(self) -> Any:
        return await self.ctx.storage.get("lease")

    async def alarm(self, info: AlarmInfo) -> None:
        FIRED.append(info.scheduled_ms - START_MS)


class AnswerLost:
    """A connection whose next COMMIT lands and then loses its answer: the socket drops
    as the server's reply would arrive."""

    def __init__(self, conn: Any, dsn: str) -> None:
        self.conn = conn
        self.dsn = dsn

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)

    async def execute(self, sql: str, *args: Any) -> Any:
        out = await self.conn.execute(sql, *args)
        if sql == "COMMIT":
            # The server ends the session: the client finds its connection closed.
            other = await asyncpg.connect(self.dsn)
            try:
                await other.execute("SELECT pg_terminate_backend($1)",
                                    self.conn.get_server_pid())
            finally:
                await other.close()
            # As when that error comes: the client has seen its socket close.
            await until(self.conn.is_closed, within=30, what="the session's end seen")
            raise asyncpg.ConnectionDoesNotExistError(
                "connection was closed in the middle of operation")
        return out


@pytest.fixture
async def rt(pg_dsn: str, clock: VirtualClock) -> AsyncIterator[tuple[Runtime, PostgresBackend]]:
    FIRED.clear()
    backend = PostgresBackend(pg_dsn, shards=8)
    runtime = Runtime(backend=backend, clock=clock)
    runtime.register(Lease)
    async with runtime:
        yield runtime, backend


async def test_a_commit_whose_answer_is_lost_keeps_the_alarm_row_it_wrote_first(
        rt: tuple[Runtime, PostgresBackend], clock: VirtualClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    runtime, backend = rt
    lease = runtime.get(Lease, "l1")
    await lease.grant(1000, "first")  # the object's storage exists
    await clock.advance(2)
    assert FIRED == [1000]  # no alarm left: the next set writes a fresh row first
    events = backend.events
    assert events is not None
    acquire, release = events.acquire, events.release

    async def acquire_once() -> Any:
        monkeypatch.setattr(events, "acquire", acquire)
        return AnswerLost(await acquire(), backend.dsn)

    async def release_any(conn: Any) -> None:
        await release(conn.conn if isinstance(conn, AnswerLost) else conn)
    monkeypatch.setattr(events, "acquire", acquire_once)
    monkeypatch.setattr(events, "release", release_any)
    with pytest.raises(CommitOutcomeUnknown, match="may or may not have landed"):
        await lease.grant(1000, "landed")
    # Looked at before the object wakes again (a wake restores a lost row from its
    # intent): the row is there, and the alarm fires.
    status = await runtime.alarm(Lease, "l1")
    assert status is not None and status.scheduled_ms == START_MS + 3000
    await clock.advance(2)
    assert FIRED == [1000, 3000]
    assert await lease.value() == "landed"
