"""Durable executions in their own process, for `test_crash.py` to kill with SIGKILL.

Run as `python crash_worker.py PHASE DATA_DIR BODY_LOG`:

- `run`: starts executions of a ten-step workflow; every step body appends
  `phase exec step nonce` to BODY_LOG (fsync'd) before returning its nonce.
  Prints `STARTED` once all executions were started; the parent kills it.
- `resume`: a new runtime on the same data lets every execution finish and
  prints one JSON line: per execution, its status, result and history.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from typing import Any

from alarmtop.core import Runtime, SystemClock
from alarmtop.core.durable import DurableContext, durable_execution

EXECUTIONS = 4
STEPS = 10


def make_workflow(phase: str, body_log: str) -> Any:
    @durable_execution(name="ten-steps")
    async def ten_steps(event: Any, ctx: DurableContext) -> list[str]:
        out = []
        for i in range(STEPS):
            def body(step: int = i) -> str:
                nonce = uuid.uuid4().hex[:8]
                with open(body_log, "a") as f:
                    f.write(f"{phase} {ctx.execution_id} {step} {nonce}\n")
                    f.flush()
                    os.fsync(f.fileno())
                return nonce
            out.append(await ctx.step(body, name=f"step-{i}"))
            await asyncio.sleep(0.01)  # leave the parent time to kill mid-workflow
        return out
    return ten_steps


async def main(phase: str, data_dir: str, body_log: str) -> None:
    rt = Runtime(data_dir, clock=SystemClock())
    rt.register_execution(make_workflow(phase, body_log))
    await rt.start()
    if phase == "run":
        for n in range(EXECUTIONS):
            await rt.executions.start("ten-steps", n, execution_id=f"x{n}")
        print("STARTED", flush=True)
        await asyncio.Event().wait()  # until the parent kills this process
    out: dict[str, Any] = {}
    for _ in range(600):
        out = {f"x{n}": await rt.executions.describe(f"x{n}") for n in range(EXECUTIONS)}
        if all(d["status"] == "succeeded" for d in out.values()):
            break
        await asyncio.sleep(0.05)
    print(json.dumps({k: {"status": d["status"], "result": d["result"], "history": d["history"]}
                      for k, d in out.items()}), flush=True)
    await rt.stop()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
