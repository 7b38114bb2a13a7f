"""Tasks a test starts on the VirtualClock's busy accounting."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from alarmtop.core.kernel.clock import VirtualClock
from alarmtop.core.kernel.supervisor import Supervisor

T = TypeVar("T")


def spawn(clock: VirtualClock, coro: Coroutine[Any, Any, T],
          name: str | None = None) -> asyncio.Task[T]:
    """A task tracked on the clock's busy accounting, as the runtime's supervisor
    starts its own: `advance` waits for it to be idle before it moves time on."""
    return Supervisor(clock.tracker, "test").spawn(coro, name)
