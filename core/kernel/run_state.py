"""Whether the runtime runs events now: shared by every part that must refuse work
before `start()` or after `stop()`."""

from __future__ import annotations

from alarmtop.core.model.errors import RuntimeNotRunning


class RunState:
    """Running, or not; `check()` refuses with a message that says what to do."""

    __slots__ = ("running", "stopping")

    def __init__(self) -> None:
        self.running = False
        self.stopping = False  # stop() under way: a second call returns at once

    def check(self) -> None:
        if not self.running:
            raise RuntimeNotRunning("the runtime is not running; await runtime.start() first")
