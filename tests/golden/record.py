"""Record the golden histories: `python -m tests.golden.record` (writes tests/golden/*.json).

Each handler in `handlers.GOLDEN` runs to its end on a virtual clock in a
throwaway data dir; its history and the values `now()`/`random()` gave are kept.
Run it only for a new golden: an existing one is the contract old code met.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

from alarmtop.core import Runtime, VirtualClock
from tests.golden.handlers import GOLDEN

HERE = Path(__file__).parent
START_MS = 1_800_000_000_000


async def record(key: str) -> dict[str, Any]:
    fn, event = GOLDEN[key]
    with tempfile.TemporaryDirectory() as tmp:
        clock = VirtualClock(start_ms=START_MS)
        rt = Runtime(Path(tmp), clock=clock, rng=random.Random(1))
        rt.register_execution(fn)
        await rt.start()
        try:
            await rt.executions.start(fn.name, event, execution_id=f"golden-{key}")
            for _ in range(20):
                await clock.advance(5)
                d = await rt.executions.describe(f"golden-{key}")
                waiting = [c for c in d["callbacks"] if c["status"] == "started"]
                for cb in waiting:
                    await rt.executions.send_callback_success(cb["callback_id"], {"ok": True})
                if d["status"] not in ("running", "suspended"):
                    break
            marks = await rt.executions.engine.store.marks(f"golden-{key}")
        finally:
            await rt.stop()
    return {"handler": fn.name, "version": fn.version, "input": event,
            "status": d["status"], "result": d["result"], "marks": marks,
            "history": d["history"]}


async def main(keys: list[str]) -> None:
    for key in keys or sorted(GOLDEN):
        data = await record(key)
        (HERE / f"{key}.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"{key}: {data['status']}, {len(data['history'])} events")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
