"""The audit log keeps what its retention says, on both backends: at most
`audit_max_rows` (the newest), none older than `audit_retention_days`, pruned at
start and every hour on the runtime's clock; `audit_count` says how many it holds."""

from __future__ import annotations

import pytest

from alarmtop.core import Runtime, VirtualClock
from alarmtop.core.errors import InvalidArgument
from alarmtop.core.model.audit_retention import (
    DAY_MS,
    DEFAULT_DAYS,
    DEFAULT_ROWS,
    PRUNE_CHUNK,
    AuditRetention,
)
from tests.conftest import START_MS, RuntimeFactory


async def write(rt: Runtime, n: int, first: int = 0) -> None:
    for i in range(first, first + n):
        await rt.audit.record("tester", "rearm", f"C/{i}", ok=False)


async def targets(rt: Runtime) -> list[str]:
    return [r["target"] for r in reversed(await rt.audit.list(1000))]


async def test_the_cap_keeps_the_newest_rows(make_runtime: RuntimeFactory,
                                             clock: VirtualClock) -> None:
    rt = await make_runtime(audit_max_rows=5)
    await clock.advance(0)  # the prune at start has run
    await write(rt, 12)
    assert await rt.backend.audit_rows.audit_count() == 12
    await clock.advance(3600)  # the hourly prune
    assert await rt.backend.audit_rows.audit_count() == 5
    assert await targets(rt) == [f"C/{i}" for i in range(7, 12)]


async def test_rows_older_than_the_retention_go(make_runtime: RuntimeFactory,
                                                clock: VirtualClock) -> None:
    rt = await make_runtime(audit_retention_days=1)
    await clock.advance(0)  # the prune at start has run
    await write(rt, 3)
    await clock.advance(20 * 3600)
    await write(rt, 2, first=3)
    await clock.advance(5 * 3600)  # the first three are a day old by the prune at +25 h
    assert await targets(rt) == ["C/3", "C/4"]
    assert await rt.audit.count() == 2
    await clock.advance(24 * 3600)
    assert await rt.audit.count() == 0


async def test_pruning_goes_a_chunk_at_a_time(make_runtime: RuntimeFactory,
                                             clock: VirtualClock) -> None:
    """More than a chunk over the cap: every row over it goes, in several writes."""
    rt = await make_runtime(audit_max_rows=10, audit_retention_days=None)
    await clock.advance(0)  # the prune at start has run
    entries = PRUNE_CHUNK + 25
    for i in range(entries):
        await rt.audit.record("tester", "rearm", f"C/{i}")
    assert await rt.audit.prune() == entries - 10
    assert await rt.audit.count() == 10


async def test_the_default_and_bad_values(make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime()
    assert rt.audit.retention == AuditRetention(DEFAULT_DAYS, DEFAULT_ROWS) == \
        AuditRetention(90, 1_000_000)
    for days, rows in [(0, None), (-1, 5), (float("nan"), None), ("90", None),
                       (None, 0), (None, 2.5), (True, None)]:
        with pytest.raises(InvalidArgument):
            rt.audit.retain(days, rows)  # type: ignore[arg-type]
        assert rt.audit.retention == AuditRetention()
    assert rt.audit.retain(None, None) == AuditRetention(None, None)
    await write(rt, 3)
    assert await rt.audit.prune() == 0


def test_the_retention_decisions() -> None:
    keep = AuditRetention(2, 100)
    assert keep.cutoff_ms(START_MS) == START_MS - 2 * DAY_MS
    assert (keep.over(99), keep.over(100), keep.over(250)) == (0, 0, 150)
    assert AuditRetention(None, None).cutoff_ms(START_MS) is None
    assert AuditRetention(None, None).over(10**9) == 0
