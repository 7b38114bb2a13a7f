from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from alarmtop.core import Runtime, VirtualClock

START_MS = 1_800_000_000_000


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(start_ms=START_MS)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


RuntimeFactory = Callable[..., Awaitable[Runtime]]


@pytest.fixture
async def make_runtime(data_dir: Path, clock: VirtualClock) -> AsyncIterator[RuntimeFactory]:
    """Start runtimes on the test's clock and data dir; all are stopped afterwards."""
    started: list[Runtime] = []

    async def make(*classes: type, **options: Any) -> Runtime:
        policies = options.pop("policies", {})
        rt = Runtime(data_dir, clock=clock, **options)
        for cls in classes:
            rt.register(cls, retry_policy=policies.get(cls.__name__))
        await rt.start()
        started.append(rt)
        return rt

    yield make
    for rt in reversed(started):
        await rt.stop()
    # Collect now, so a database left open is reported against the test that left it.
    gc.collect()
