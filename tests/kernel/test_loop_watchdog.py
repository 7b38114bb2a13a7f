"""A handler that blocks the event loop is named in the log by the watchdog thread
(the object, its method, the line it blocks at), once per stall, and the loop's
return is logged too; an exit promise ends the process whatever holds the loop."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alarmtop.core import DurableObject, Runtime, VirtualClock
from alarmtop.core.kernel.watchdog import LoopWatchdog, describe_stack
from tests.conftest import START_MS

ROOT = Path(__file__).resolve().parents[2]


class Blocker(DurableObject):
    async def block(self, seconds: float) -> str:
        time.sleep(seconds)  # noqa: ASYNC251 - the mistake: blocking, not awaited
        return "done"


async def test_a_blocking_handler_is_named(tmp_path: Path,
                                           caplog: pytest.LogCaptureFixture) -> None:
    rt = Runtime(tmp_path, clock=VirtualClock(START_MS), blocked_loop_s=0.3)
    rt.register(Blocker)
    caplog.set_level(logging.WARNING, logger="alarmtop.runtime")
    async with rt:
        assert await rt.get(Blocker, "b").block(1.2) == "done"
        for _ in range(100):  # the thread sees the beats come back
            if any("free again" in r.getMessage() for r in caplog.records):
                break
            await asyncio.sleep(0.1)
    held = [r.getMessage() for r in caplog.records if "has been held" in r.getMessage()]
    assert len(held) == 1 and rt.watchdog.stalls == 1, caplog.text
    assert "by Blocker/b.block() at" in held[0] and __file__ in held[0], held[0]
    assert any("free again" in r.getMessage() for r in caplog.records), caplog.text


async def test_no_watchdog_when_told_so(tmp_path: Path) -> None:
    rt = Runtime(tmp_path, clock=VirtualClock(START_MS), blocked_loop_s=None)
    rt.register(Blocker)
    async with rt:
        await rt.get(Blocker, "b").block(0.5)
    assert rt.watchdog.stalls == 0


def test_a_stack_outside_objects_says_where_it_is() -> None:
    assert describe_stack(sys._getframe()).startswith("code outside any object's handler")
    assert describe_stack(None) == "unknown code"


def test_the_exit_promise_ends_a_process_whose_loop_is_held() -> None:
    code = ("import asyncio, time\n"
            "from alarmtop.core.kernel.watchdog import LoopWatchdog\n"
            "async def main():\n"
            "    dog = LoopWatchdog(0.3)\n"
            "    dog.start()\n"
            "    dog.exit_within(1.0, code=3)\n"
            "    time.sleep(30)\n"
            "asyncio.run(main())\n")
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    took = time.monotonic() - began
    assert done.returncode == 3, done.stderr
    assert took < 10, took
    assert "exiting now, as promised" in done.stderr, done.stderr
    assert LoopWatchdog(None).threshold_s is None
