"""The background tasks of a storage part (a committer, a lease keeper, a follower):
owned, so that none outlives the part that started it.

Storage runs on wall time whatever the runtime's clock (leases are between
processes), so its tasks are plain tasks: a virtual clock does not wait for them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger("alarmtop.storage")


class TaskOwner:
    """`spawn` starts a task this owner holds; `close` cancels them all and waits.
    A task that fails is logged (its awaiters see the error too)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("task %s of the %s failed", task.get_name(), self.name,
                      exc_info=task.exception())

    def cancel(self) -> None:
        """Cancel every task now, without waiting (a close cut short)."""
        for task in list(self._tasks):
            task.cancel()

    async def close(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
