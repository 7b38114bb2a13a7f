"""A runtime process running a real AWS SDK handler, killed at one exact instant, for
`test_aws_kills.py`.

Run as ``python -m tests.chaos.aws_worker PHASE DATA CASE``:

- ``run``: start the execution and let the process be killed (SIGKILL) where CASE
  says; exits 0 only if the kill never came (then the test fails).
    - ``commit``: the instant the checkpoint of step `a`'s success is durable,
      before its answer reaches the handler (a fault point after the runtime
      database's commit);
    - ``invocation``: inside step `b`'s body, on its first run (the handler's own
      process dies mid-invocation).
- ``resume``: a new process on the same data; wait (bounded) for the execution to
  finish and print one JSON line: status, result, the history's event types and
  names, and the step bodies that ran (from a file each body appends to).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

from aws_durable_execution_sdk_python import DurableContext, StepContext, durable_execution
from aws_durable_execution_sdk_python.config import Duration

from alarmtop.core import AwsOptions, Runtime, SystemClock
from alarmtop.core.storage.faultpoints import FAULT_POINTS, kill

EID = "k1"
RESUME_WAIT_S = 15.0
POLL_S = 0.02
DATA = Path(".")


def effect(name: str) -> str:
    """A step body's side effect, durable before the body returns."""
    with open(DATA / "effects.log", "a") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())
    return name


def body_b(_: StepContext) -> str:
    marker = DATA / "b.started"
    first = not marker.exists()
    effect("b")
    if first and os.environ.get("KILL_CASE") == "invocation":
        marker.write_text("x")
        os.kill(os.getpid(), signal.SIGKILL)  # the process dies inside the handler
    return "b"


@durable_execution
def killed(event: Any, context: DurableContext) -> Any:
    a = context.step(lambda _: effect("a"), name="a")
    b = context.step(body_b, name="b")
    context.wait(Duration.from_seconds(1))
    c = context.step(lambda _: effect("c"), name="c")
    return [a, b, c]


def _runtime(data: Path) -> Runtime:
    # A short liveness check: an invocation cut short is noticed within half a second.
    rt = Runtime(data, clock=SystemClock(), sweep_interval=1.0,
                 aws=AwsOptions(liveness_s=0.5))
    rt.register_lambda("killed", killed)
    return rt


def _a_succeeded(data: Path) -> bool:
    with sqlite3.connect(data / "runtime.sqlite") as db:
        rows = db.execute("SELECT data FROM history WHERE execution_id = ?", (EID,)).fetchall()
    return any(json.loads(r[0])["EventType"] == "StepSucceeded" and
               json.loads(r[0]).get("Name") == "a" for r in rows)


async def run(data: Path, case: str) -> None:
    os.environ["KILL_CASE"] = case
    if case == "commit":
        def maybe(info: dict[str, Any]) -> None:
            if info.get("extras") and _a_succeeded(data):
                kill(info)  # the checkpoint is durable; its answer never leaves
        FAULT_POINTS.arm("index.commit.after", maybe)
    rt = _runtime(data)
    await rt.start()
    await rt.executions.start("killed", {"n": 1}, execution_id=EID)
    await asyncio.sleep(RESUME_WAIT_S)  # bounded: the kill comes long before this ends
    await rt.stop()


async def resume(data: Path) -> None:
    os.environ["KILL_CASE"] = "none"
    rt = _runtime(data)
    await rt.start()
    try:
        loop = asyncio.get_running_loop()
        until = loop.time() + RESUME_WAIT_S
        d = await rt.executions.describe(EID)
        while d["status"] not in ("succeeded", "failed") and loop.time() < until:
            await asyncio.sleep(POLL_S)  # this process's own state, with a deadline
            d = await rt.executions.describe(EID)
        effects = (data / "effects.log").read_text().split()
        history = [[ev["EventType"], ev.get("Name"),
                    (ev.get("InvocationCompletedDetails") or {}).get("Error")]
                   for ev in d["history"]]
        print(json.dumps({"status": d["status"], "result": d["result"], "history": history,
                          "effects": effects}), flush=True)
    finally:
        await rt.stop()


def main(argv: list[str]) -> None:
    global DATA
    phase, data, case = argv[0], Path(argv[1]), argv[2]
    data.mkdir(parents=True, exist_ok=True)
    DATA = data
    if phase == "run":
        asyncio.run(run(data, case))
    else:
        asyncio.run(resume(data))


if __name__ == "__main__":
    main(sys.argv[1:])
