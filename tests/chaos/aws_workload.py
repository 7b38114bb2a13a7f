"""The chaos harness's AWS SDK workload: a runtime process running the real SDK's
handlers, killed round after round (`aws_chaos.py` drives it and checks the end).

Run as ``python -m tests.chaos.aws_workload PHASE DATA PLAN [DSN]`` (DSN: on that
PostgreSQL database, else SQLite files under DATA):

- ``round``: start the executions PLAN names and run until killed. Each is
  recorded (``started`` in ``record.jsonl``, fsync'd) once `start` has returned:
  what the checker holds the runtime to. PLAN's ``kill`` says where the process
  dies, if it kills itself:
    - ``commit``: at the first commit of the execution's log that follows the end
      of the named step's body (a fault point after the runtime database's commit,
      `FAULT_POINTS`): the checkpoint is durable, its answer never reaches the
      handler;
    - ``invocation``: inside the named step's body, on its first run, in the
      runtime's own process (thread isolation): the handler dies with it;
    - ``worker``: the same in a worker process (``isolation="process"``): the worker
      dies, the runtime lives on and retries the invocation (the harness kills the
      runtime later, at a seeded moment);
    - ``none``: the harness kills it at a seeded moment.
- ``settle``: no new executions, no kills: wait (bounded) until every recorded
  execution has ended and print one JSON line: each one's status, result and
  history, and the dead letters.

Every step body appends a line to ``effects.jsonl`` (fsync'd) before it returns,
with the wall-clock instant it started: the checker's evidence of what ran when.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python.config import Duration

from alarmtop.core import AwsOptions, PostgresBackend, Runtime, SystemClock
from alarmtop.core.storage.faultpoints import FAULT_POINTS, kill

STEPS = ("s0", "s1", "s2")
LIVE = ("pending", "running", "suspended")  # not ended yet
SETTLE_WAIT_S = 60.0
POLL_S = 0.05
LEASE_S = 1.5  # on PostgreSQL: a restarted node takes its shards back this soon


def expected(eid: str) -> list[str]:
    """The result of execution `eid` (what every step returns, in order)."""
    return [f"{eid}:{s}" for s in STEPS] + [f"{eid}:end"]


def append(path: Path, line: dict[str, Any]) -> None:
    """One JSON line, durable before this returns (the checker trusts what it reads)."""
    data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def body(event: dict[str, Any], eid: str, step: str) -> str:
    """A step's body: its effect recorded, and the death the plan asks of it."""
    started_ms = time.time_ns() // 1_000_000
    data = Path(event["dir"])
    append(data / "effects.jsonl", {"e": eid, "s": step, "ms": started_ms, "pid": os.getpid()})
    if event.get("die_in") == step:
        marker = data / f"died-{eid}-{step}"
        if not marker.exists():  # the first run only: the next carries on
            marker.write_text("x")
            os.kill(os.getpid(), signal.SIGKILL)
    return f"{eid}:{step}"


@durable_execution
def chain(event: dict[str, Any], context: DurableContext) -> Any:
    eid = event["eid"]
    out = []
    for step in STEPS:
        out.append(context.step(lambda _, s=step: body(event, eid, s), name=step))
    context.wait(Duration.from_seconds(1))
    out.append(context.step(lambda _: body(event, eid, "end"), name="end"))
    return out


def runtime(data: Path, dsn: str | None) -> Runtime:
    backend = None if dsn is None else PostgresBackend(dsn, node_id="aws1", shards=8,
                                                       lease_s=LEASE_S)
    # A short liveness check: an invocation cut short is noticed within half a second.
    rt = Runtime(data, clock=SystemClock(), sweep_interval=0.5, backend=backend,
                 aws=AwsOptions(liveness_s=0.5))
    rt.register_lambda("chain", chain)
    # By name: run as a script, this module is __main__, which a worker cannot import.
    rt.register_lambda("chain_p", "tests.chaos.aws_workload:chain", isolation="process")
    return rt


def arm_commit_death(data: Path, eid: str, step: str) -> None:
    """Die at the first commit of `eid`'s log after `step`'s body has run (it wrote its
    effect): the checkpoint that follows the body, durable, unanswered."""
    effects = data / "effects.jsonl"

    def body_ran() -> bool:
        if not effects.exists():
            return False
        return any(json.loads(line).get("e") == eid and json.loads(line).get("s") == step
                   for line in effects.read_text().splitlines() if line.strip())

    def action(info: dict[str, Any]) -> None:
        keys = [tuple(k) for k in info.get("keys") or ()]
        if ("Execution", eid) in keys and info.get("extras", 0) > 0 and body_ran():
            append(data / "record.jsonl", {"k": "boundary", "e": eid, "s": step})
            kill(info)

    FAULT_POINTS.arm("index.commit.after", action)


async def run_round(data: Path, plan: dict[str, Any], dsn: str | None) -> None:
    kind, target = plan["kill"], plan.get("target")
    if kind == "commit":
        arm_commit_death(data, target["eid"], target["step"])
    rt = runtime(data, dsn)
    await rt.start()
    for eid, fn in plan["start"]:
        event: dict[str, Any] = {"eid": eid, "dir": str(data)}
        if target is not None and target["eid"] == eid and kind in ("invocation", "worker"):
            event["die_in"] = target["step"]
        await rt.executions.start(fn, event, execution_id=eid)
        append(data / "record.jsonl", {"k": "started", "e": eid, "fn": fn})
    await asyncio.sleep(SETTLE_WAIT_S)  # bounded: the harness kills it long before
    await rt.stop()


async def settle(data: Path, dsn: str | None) -> None:
    started = [json.loads(line)["e"] for line in (data / "record.jsonl").read_text().splitlines()
               if json.loads(line)["k"] == "started"]
    rt = runtime(data, dsn)
    await rt.start()
    try:
        loop = asyncio.get_running_loop()
        until = loop.time() + SETTLE_WAIT_S
        out: dict[str, Any] = {}
        for eid in started:
            d = await rt.executions.describe(eid)
            while d["status"] in LIVE and loop.time() < until:
                await asyncio.sleep(POLL_S)  # this process's own state, with a deadline
                d = await rt.executions.describe(eid)
            out[eid] = {"status": d["status"], "result": d["result"],
                        "history": [[ev["EventType"], ev.get("Name"), ev["EventTimestamp"]]
                                    for ev in d["history"]]}
        dead = [f"{row.object_class}/{row.object_name}" for row in await rt.dead_letters()]
        print(json.dumps({"executions": out, "dead_letters": dead}), flush=True)
    finally:
        await rt.stop()


def main(argv: list[str]) -> None:
    phase, data = argv[0], Path(argv[1])
    plan = json.loads(argv[2]) if len(argv) > 2 else {}
    dsn = argv[3] if len(argv) > 3 else None
    data.mkdir(parents=True, exist_ok=True)
    if phase == "round":
        asyncio.run(run_round(data, plan, dsn))
    else:
        asyncio.run(settle(data, dsn))


if __name__ == "__main__":
    main(sys.argv[1:])
