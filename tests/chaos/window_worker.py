"""A runtime process that dies at one exact instant, for `test_crash_windows.py`.

A call to an execution object (start, callback result, operator retry) writes the
execution's log and points its alarm at the next invocation. This worker makes the
process exit with `os._exit` the instant the call's log is durable, right after
the commit that carries it and before anything else runs, as a SIGKILL landing
there would. The log and the alarm used to be two commits, and a death between
them left the execution with nothing to wake it.

Run as ``python -m tests.chaos.window_worker PHASE DATA CASE``:

- ``prepare``: bring the execution of CASE to the point where the call is due
  (waiting for a callback, or for a human), then stop cleanly.
- ``die``: make the call of CASE and exit (code 70) right after its log commits.
- ``resume``: a new process on the same data; optionally repeat the call the
  way a client retries it; wait (bounded) for the execution to finish and print
  one JSON line with its status.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from alarmtop.core import Runtime, SystemClock
from alarmtop.core.durable import CallbackConfig, DurableContext, durable_execution
from alarmtop.core.kernel.executions.saga import Saga

EID = "w1"
DIE_CODE = 70
PREPARE_WAIT_S = 10.0
RESUME_WAIT_S = 2.0  # a healthy restart runs the due invocation within milliseconds
POLL_S = 0.02
FAILING = {"fail": True}


async def _undo() -> str:
    if FAILING["fail"]:
        raise RuntimeError("cannot undo yet")
    return "undone"


@durable_execution(name="windowed")
async def windowed(event: dict[str, Any], ctx: DurableContext) -> str:
    await ctx.step(lambda: "done", name="first")
    if event["case"] == "callback":
        cb = await ctx.create_callback("answer", CallbackConfig())  # no timeout: no alarm
        return str(await cb.result())
    if event["case"] == "operator_retry":
        saga: Saga = ctx.saga()
        saga.push("first", _undo)
        await saga.compensate()
        return "compensated"
    return "started"


def _runtime(data: Path) -> Runtime:
    rt = Runtime(data, clock=SystemClock(), sweep_interval=1.0)
    rt.register_execution(windowed)
    return rt


async def _wait_status(rt: Runtime, wanted: set[str], wait_s: float) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    until = loop.time() + wait_s
    d = await rt.executions.describe(EID)
    while d["status"] not in wanted and loop.time() < until:
        await asyncio.sleep(POLL_S)  # polling this process's own state, with a deadline
        d = await rt.executions.describe(EID)
    return d


async def _callback_id(rt: Runtime) -> str:
    d = await rt.executions.describe(EID)
    return str(next(c["callback_id"] for c in d["callbacks"] if c["name"] == "answer"))


async def _call(rt: Runtime, case: str) -> None:
    if case == "start":
        await rt.executions.start("windowed", {"case": case}, execution_id=EID)
    elif case == "callback":
        await rt.executions.send_callback_success(await _callback_id(rt), "answered")
    else:
        await rt.executions.retry_compensation(EID)


async def prepare(data: Path, case: str) -> None:
    rt = _runtime(data)
    await rt.start()
    try:
        await rt.executions.start("windowed", {"case": case}, execution_id=EID)
        wanted = "needs_human" if case == "operator_retry" else "suspended"
        d = await _wait_status(rt, {wanted}, PREPARE_WAIT_S)
        assert d["status"] == wanted, d["status"]
    finally:
        await rt.stop()


async def die(data: Path, case: str) -> None:
    rt = _runtime(data)
    await rt.start()
    db = rt.backend.database
    before = await rt.executions.engine.store.max_event_id(EID)
    real_apply = db._apply  # type: ignore[attr-defined]

    def apply(batch: Any) -> None:
        real_apply(batch)  # committed (on the database thread)
        row = db.conn.execute(  # type: ignore[attr-defined]
            "SELECT max(event_id) FROM history WHERE execution_id = ?", (EID,)).fetchone()
        if (row[0] or 0) > before:
            os._exit(DIE_CODE)  # the call's log is durable; nothing after it happens

    db._apply = apply  # type: ignore[attr-defined]
    FAILING["fail"] = False
    await _call(rt, case)
    raise SystemExit("the call returned: the window was not reached")


async def resume(data: Path, case: str, again: bool) -> None:
    FAILING["fail"] = False
    rt = _runtime(data)
    await rt.start()
    try:
        if again:
            try:
                await _call(rt, case)
            except Exception as exc:
                print(json.dumps({"retry_error": f"{type(exc).__name__}: {exc}"}), flush=True)
        d = await _wait_status(rt, {"succeeded", "failed"}, RESUME_WAIT_S)
        alarm = await rt.alarm("Execution", EID)
        print(json.dumps({"status": d["status"], "result": d["result"],
                          "alarm": None if alarm is None else alarm.state}), flush=True)
    finally:
        await rt.stop()


def main(argv: list[str]) -> None:
    phase, data, case = argv[0], Path(argv[1]), argv[2]
    if phase == "prepare":
        asyncio.run(prepare(data, case))
    elif phase == "die":
        asyncio.run(die(data, case))
    else:
        asyncio.run(resume(data, case, again=phase == "resume-again"))


if __name__ == "__main__":
    main(sys.argv[1:])
