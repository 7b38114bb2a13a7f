"""A process whose runtime was never stopped still exits, and an object database whose
opening is cut short leaves no connection (nor its thread) behind."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from alarmtop.core.storage.sqlite.objects import SqliteObjectStore
from alarmtop.core.storage.sqlite.quarantine import Quarantine

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import asyncio, sys
    from alarmtop.core import DurableObject, Runtime

    class Box(DurableObject):
        async def put(self, v):
            await self.ctx.storage.put("v", v)

    async def main():
        rt = Runtime(sys.argv[1])
        rt.register(Box)
        await rt.start()
        for i in range(5):
            await rt.get(Box, f"b{i}").put(i)  # five open databases, five threads
        raise RuntimeError("the script fails before it stops the runtime")

    asyncio.run(main())
""")


def test_a_script_that_never_stops_its_runtime_exits(tmp_path: Path) -> None:
    """Observation 7: each open object database held a non-daemon thread, so a script
    that raised after `await rt.start()` without `rt.stop()` never exited."""
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "data")], cwd=ROOT,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert "the script fails before it stops the runtime" in proc.stderr


def _connection_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.is_alive() and "_connection_worker" in
               repr(getattr(t, "_target", "")))


async def test_cancelling_an_open_leaves_no_connection_behind(tmp_path: Path) -> None:
    """Observation 7: a cancellation while an object database opened leaked its
    connection. Cut the open at every point it can be cut: nothing stays open."""
    path = tmp_path / "objects" / "Box" / "b.sqlite"
    quarantine = Quarantine(tmp_path)
    before = _connection_threads()
    first = await SqliteObjectStore.open(path, quarantine, key=("Box", "b"))
    assert first is not None
    await first.close()
    for step in range(60):
        task = asyncio.ensure_future(SqliteObjectStore.open(path, quarantine, key=("Box", "b")))
        # An open takes a few milliseconds over several threads' hops: cut it at a
        # moment further into it each time (a real delay: the open is real I/O).
        await asyncio.sleep(step * 0.0002)
        task.cancel()
        try:
            store = await task
        except asyncio.CancelledError:
            continue
        assert store is not None
        await store.close()
    for _ in range(500):  # closed threads end on their own, promptly (a loaded machine: 5 s)
        if _connection_threads() <= before:
            break
        await asyncio.sleep(0.01)
    assert _connection_threads() <= before
