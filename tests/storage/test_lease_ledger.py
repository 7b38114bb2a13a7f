"""The lease ledger example: expiry by alarm, at-least-once side effects, dead letters,
and the constructor's re-arm after a restart."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from alarmtop.core import AlarmInfo, PostgresBackend, Runtime, VirtualClock
from alarmtop.core.storage.postgres.objects import schema_name
from alarmtop.examples.lease_ledger import LeaseLedger
from tests.conftest import START_MS, RuntimeFactory

LEDGER = "tenant-7"


class Sink:
    """Records every `lease_expired` call (times relative to START_MS).

    `fail` is how many calls raise *after* recording (None: every call raises);
    `stall_s` makes the first call sleep that long on the clock (a slow downstream).
    """

    def __init__(self, clock: VirtualClock, fail: int | None = 0, stall_s: float = 0) -> None:
        self.clock = clock
        self.fail = fail
        self.stall_s = stall_s
        self.seen: list[tuple[str, str, int, int]] = []

    async def lease_expired(self, ledger: str, lease_id: str, expires_ms: int) -> None:
        self.seen.append((ledger, lease_id, expires_ms - START_MS, self.clock.now_ms() - START_MS))
        if self.stall_s:
            stall, self.stall_s = self.stall_s, 0
            await self.clock.sleep(stall)
        if self.fail is None or self.fail > 0:
            if self.fail is not None:
                self.fail -= 1
            raise RuntimeError("downstream refused the expiry")


@dataclass
class Env:
    expiry_sink: Sink
    retry_counts: list[int] = field(default_factory=list)


class CountingLedger(LeaseLedger):
    """A LeaseLedger that records each alarm attempt's retry_count in its env."""

    async def alarm(self, info: AlarmInfo) -> None:
        self.env.retry_counts.append(info.retry_count)
        await super().alarm(info)


async def stored_leases(rt: Runtime, cls: str, name: str) -> dict[str, int]:
    """The leases table read straight from the object's storage (without waking it): its
    SQLite file, or its own schema on PostgreSQL."""
    if isinstance(rt.backend, PostgresBackend):
        async with rt.backend._require_pool().acquire() as pg:
            rows = await pg.fetch(f'SELECT lease_id, expires_ms FROM "{schema_name((cls, name))}"'
                                  ".leases")
        return {r[0]: r[1] for r in rows}
    path = rt.backend.object_path(cls, name)  # type: ignore[attr-defined]
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return dict(conn.execute("SELECT lease_id, expires_ms FROM leases").fetchall())
    finally:
        conn.close()


async def test_two_leases_expire_in_order(make_runtime: RuntimeFactory,
                                          clock: VirtualClock) -> None:
    """The alarm follows the earliest expiry: 300 ms fires at +300, 1500 ms at +1500."""
    sink = Sink(clock)
    rt = await make_runtime(LeaseLedger, env=Env(sink))
    ledger = rt.get(LeaseLedger, LEDGER)
    # Granted longest first: the alarm must move earlier for the short one.
    assert await ledger.grant("long", ttl_ms=1500) == START_MS + 1500
    assert await ledger.grant("short", ttl_ms=300) == START_MS + 300
    status = await rt.alarm(LeaseLedger, LEDGER)
    assert status is not None and status.scheduled_ms == START_MS + 300

    await clock.advance(0.299)
    assert sink.seen == []
    await clock.advance(0.001)
    assert sink.seen == [(LEDGER, "short", 300, 300)]
    assert await ledger.leases() == {"long": START_MS + 1500}

    await clock.advance(1.199)
    assert len(sink.seen) == 1
    await clock.advance(0.001)
    assert sink.seen == [(LEDGER, "short", 300, 300), (LEDGER, "long", 1500, 1500)]
    assert await ledger.leases() == {}
    assert await rt.alarm(LeaseLedger, LEDGER) is None


async def test_released_lease_never_reaches_the_sink(make_runtime: RuntimeFactory,
                                                      clock: VirtualClock) -> None:
    """The table is the truth: a lease released before expiry is not reported."""
    sink = Sink(clock)
    rt = await make_runtime(LeaseLedger, env=Env(sink))
    ledger = rt.get(LeaseLedger, LEDGER)
    await ledger.grant("a", ttl_ms=300)
    await ledger.grant("b", ttl_ms=600)
    assert await ledger.release("a") is True
    assert await ledger.release("a") is False
    await clock.advance(1)
    assert sink.seen == [(LEDGER, "b", 600, 600)]


async def test_side_effect_failing_after_it_ran_is_repeated(make_runtime: RuntimeFactory,
                                                             clock: VirtualClock) -> None:
    """At-least-once: the sink raised after running, so it runs again 2 s later as retry 1."""
    sink = Sink(clock, fail=1)
    env = Env(sink)
    rt = await make_runtime(CountingLedger, env=env)
    ledger = rt.get(CountingLedger, LEDGER)
    await ledger.grant("l1", ttl_ms=300)

    await clock.advance(0.3)
    assert sink.seen == [(LEDGER, "l1", 300, 300)]
    status = await rt.alarm(CountingLedger, LEDGER)
    assert status is not None
    assert (status.state, status.retry_count, status.next_attempt_ms) == (
        "retrying", 1, START_MS + 2300)
    assert status.last_error is not None and "downstream refused" in status.last_error
    assert await ledger.leases() == {"l1": START_MS + 300}  # the row waits for success

    await clock.advance(1.999)
    assert len(sink.seen) == 1
    await clock.advance(0.001)
    assert sink.seen == [(LEDGER, "l1", 300, 300), (LEDGER, "l1", 300, 2300)]
    assert env.retry_counts == [0, 1]
    assert await ledger.leases() == {}
    assert await rt.alarm(CountingLedger, LEDGER) is None


async def test_always_failing_sink_ends_in_a_dead_letter(make_runtime: RuntimeFactory,
                                                         clock: VirtualClock) -> None:
    """Seven failed attempts: the alarm is a dead letter and the lease row is kept."""
    sink = Sink(clock, fail=None)
    env = Env(sink)
    rt = await make_runtime(CountingLedger, env=env)
    sub = rt.events.subscribe("alarm.")
    ledger = rt.get(CountingLedger, LEDGER)
    await ledger.grant("l1", ttl_ms=300)

    await clock.advance(200)
    assert len(sink.seen) == 7
    assert env.retry_counts == [0, 1, 2, 3, 4, 5, 6]
    dead = await rt.dead_letters()
    assert [(d.object, d.state, d.retry_count, len(d.attempts)) for d in dead] == [
        (f"CountingLedger/{LEDGER}", "dead", 6, 7)]
    assert all(a.error and "downstream refused" in a.error for a in dead[0].attempts)
    assert [e.data["object"] for e in sub.drain() if e.type == "alarm.dead"] == [
        f"CountingLedger/{LEDGER}"]
    assert await stored_leases(rt, "CountingLedger", LEDGER) == {"l1": START_MS + 300}


async def test_restart_between_retries_keeps_the_ladder(make_runtime: RuntimeFactory,
                                                        clock: VirtualClock) -> None:
    """A restart between retries does not change the ladder: +0, 2, 6, 14, 30, 62, 126 s."""
    sink = Sink(clock, fail=None)
    rt = await make_runtime(LeaseLedger, env=Env(sink))
    await rt.get(LeaseLedger, LEDGER).grant("l1", ttl_ms=300)
    await clock.advance(10)  # three attempts failed; the next one is due at +14.3 s
    assert len(sink.seen) == 3
    await rt.stop()

    await make_runtime(LeaseLedger, env=Env(sink))
    await clock.advance(200)
    assert [s[3] - 300 for s in sink.seen] == [0, 2000, 6000, 14000, 30000, 62000, 126000]


async def test_restart_constructor_rearms_a_dead_lease(make_runtime: RuntimeFactory,
                                                       clock: VirtualClock) -> None:
    """After a restart the constructor re-arms from the table and the lease finally expires."""
    rt = await make_runtime(LeaseLedger, env=Env(Sink(clock, fail=None)))
    await rt.get(LeaseLedger, LEDGER).grant("l1", ttl_ms=300)
    await clock.advance(200)
    assert [d.object for d in await rt.dead_letters()] == [f"LeaseLedger/{LEDGER}"]
    await rt.stop()

    healthy = Sink(clock)
    rt2 = await make_runtime(LeaseLedger, env=Env(healthy))
    assert [d.state for d in await rt2.dead_letters()] == ["dead"]  # survived the restart
    await clock.advance(5)
    assert healthy.seen == []  # a dead letter does not fire on its own

    ledger = rt2.get(LeaseLedger, LEDGER)
    assert await ledger.leases() == {"l1": START_MS + 300}  # wakes it: the constructor re-arms
    status = await rt2.alarm(LeaseLedger, LEDGER)
    assert status is not None and (status.state, status.retry_count) == ("pending", 0)
    now = clock.now_ms() - START_MS
    await clock.advance(0)
    assert healthy.seen == [(LEDGER, "l1", 300, now)]
    assert await ledger.leases() == {}
    assert await rt2.dead_letters() == []
    assert await rt2.alarm(LeaseLedger, LEDGER) is None


async def test_pending_expiry_survives_a_restart(make_runtime: RuntimeFactory,
                                                 clock: VirtualClock) -> None:
    """A committed alarm outlives the runtime: it fires on time after a restart, untouched."""
    rt = await make_runtime(LeaseLedger, env=Env(Sink(clock)))
    await rt.get(LeaseLedger, LEDGER).grant("l1", ttl_ms=1000)
    await clock.advance(0.5)
    await rt.stop()

    sink = Sink(clock)
    rt2 = await make_runtime(LeaseLedger, env=Env(sink))
    await clock.advance(0.499)
    assert sink.seen == []
    await clock.advance(0.001)
    assert sink.seen == [(LEDGER, "l1", 1000, 1000)]
    assert await rt2.alarm(LeaseLedger, LEDGER) is None


async def test_stop_during_the_side_effect_counts_as_an_attempt(make_runtime: RuntimeFactory,
                                                                 clock: VirtualClock) -> None:
    """A handler cut short by a stop (like a crash) runs again after restart as retry 1."""
    first = Env(Sink(clock, stall_s=10))
    rt = await make_runtime(CountingLedger, env=first)
    await rt.get(CountingLedger, LEDGER).grant("l1", ttl_ms=300)
    await clock.advance(1)
    status = await rt.alarm(CountingLedger, LEDGER)
    assert status is not None and status.state == "running"
    assert first.retry_counts == [0]
    await rt.stop()

    second = Env(Sink(clock))
    rt2 = await make_runtime(CountingLedger, env=second)
    await clock.advance(0)
    assert second.retry_counts[0] == 1
    assert second.expiry_sink.seen == [(LEDGER, "l1", 300, 1000)]
    assert await rt2.get(CountingLedger, LEDGER).leases() == {}
    assert await rt2.alarm(CountingLedger, LEDGER) is None
