"""Run in a child process by `test_descriptor_budget.py`, under a lowered RLIMIT_NOFILE.

    python -m tests.kernel.fd_worker MODE DATA_DIR SOFT HARD [MAX_RESIDENT]

Modes: `start` (start a runtime, print the soft limit in force, or the budget's
message), `emfile` (start within budget, use up the descriptors, make an object
that needs a database, then free them and make it again). Prints one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import resource
import sys
from pathlib import Path
from typing import Any

from alarmtop.core import DurableObject, Runtime
from alarmtop.core.model.errors import DescriptorBudget, OutOfDescriptors


class Box(DurableObject):
    async def put(self, value: int) -> int:
        await self.ctx.storage.put("v", value)
        return value


async def start(data: Path, max_resident: int) -> dict[str, Any]:
    rt = Runtime(data, max_resident=max_resident)
    rt.register(Box)
    try:
        await rt.start()
    except DescriptorBudget as exc:
        return {"refused": str(exc), "need": exc.need, "limit": exc.limit,
                "runtime_db": (data / "runtime.sqlite").exists()}
    try:
        return {"started": True, "soft": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                "descriptor_limit": rt.descriptor_limit}
    finally:
        await rt.stop()


def leftovers(data: Path) -> list[str]:
    return sorted(p.name for p in data.rglob("*.new*"))


async def emfile(data: Path, max_resident: int) -> dict[str, Any]:
    rt = Runtime(data, max_resident=max_resident)
    rt.register(Box)
    await rt.start()
    await rt.get(Box, "before").put(1)
    hog: list[int] = []
    try:
        while True:
            hog.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        pass
    out: dict[str, Any] = {}
    try:
        await rt.get(Box, "starved").put(2)
        out["starved"] = "ok"
    except OutOfDescriptors as exc:
        out["starved"] = str(exc)
    for fd in hog:
        os.close(fd)
    out["leftovers"] = await asyncio.to_thread(leftovers, data)
    out["after"] = await rt.get(Box, "starved").put(3)
    out["before_still"] = await rt.get(Box, "before").put(4)
    await rt.stop()
    return out


def main() -> None:
    mode, data, soft, hard = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    max_resident = int(sys.argv[5]) if len(sys.argv) > 5 else 1000
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    run = start if mode == "start" else emfile
    print(json.dumps(asyncio.run(run(data, max_resident))), flush=True)


if __name__ == "__main__":
    main()
