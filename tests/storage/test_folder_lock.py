"""One runtime per data folder: a second one, in this process or another, is refused
with one clear error and changes nothing; the folder is free again once the first
stops, or dies."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from alarmtop.core import AlarmInfo, DurableObject, Runtime, VirtualClock
from alarmtop.core.errors import DataDirInUse
from tests.conftest import START_MS

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Env:
    fired: list[str] = field(default_factory=list)


class Counter(DurableObject):
    async def arm(self, at_ms: int) -> None:
        await self.ctx.storage.set_alarm(at_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        self.env.fired.append(self.ctx.id)


async def test_a_second_runtime_on_the_folder_is_refused(tmp_path: Path) -> None:
    clock = VirtualClock(START_MS)
    env = Env()
    first = Runtime(tmp_path, clock=clock, env=env)
    first.register(Counter)
    await first.start()
    try:
        await first.get(Counter, "c").arm(START_MS + 1000)
        second = Runtime(tmp_path, clock=clock, env=env)
        second.register(Counter)
        with pytest.raises(DataDirInUse, match="in use by another alarmtop runtime") as caught:
            await second.start()
        assert str(tmp_path) in str(caught.value)
        assert not second.running
        await clock.advance(1)
        assert env.fired == ["c"]  # run once, by the first runtime only
    finally:
        await first.stop()
    third = Runtime(tmp_path, clock=clock, env=env)  # free again once the first stopped
    third.register(Counter)
    await third.start()
    await third.stop()


def test_the_lock_goes_with_a_killed_process(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import asyncio, sys\n"
         "from alarmtop.core import Runtime\n"
         "async def main():\n"
         "    rt = Runtime(sys.argv[1])\n"
         "    await rt.start()\n"
         "    print('started', flush=True)\n"
         "    await asyncio.sleep(60)\n"
         "asyncio.run(main())\n", str(tmp_path)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "started"
        refused = subprocess.run(
            [sys.executable, "-c", "import asyncio, sys\n"
             "from alarmtop.core import Runtime\n"
             "asyncio.run(Runtime(sys.argv[1]).start())\n", str(tmp_path)],
            cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert refused.returncode != 0
        assert f"process {holder.pid}" in refused.stderr, refused.stderr
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()

    async def again() -> None:
        rt = Runtime(tmp_path)
        await rt.start()
        await rt.stop()
    asyncio.run(again())
