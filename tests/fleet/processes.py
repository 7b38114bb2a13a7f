"""Fleet nodes as real processes (`node_worker.py`), driven from a test."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

READY_S = 30.0
ROOT = Path(__file__).resolve().parents[2]


class Worker:
    """A node process: its commands over stdin, answers and readiness over stdout."""

    def __init__(self, proc: asyncio.subprocess.Process, node_id: str, log: Path) -> None:
        self.proc = proc
        self.node_id = node_id
        self.log = log
        self.address: str | None = None
        self.skewed_ms = 0  # how far off its wall clock runs, as it said when ready
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, dsn: str, node_id: str, log: Path, lease_s: float,
                    shards: int, *, skew_s: float = 0.0,
                    stderr: Path | None = None) -> Worker:
        """A node process; `skew_s` sets its wall clock that far off; `stderr` keeps
        what it logs."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if skew_s:
            env["ALARMTOP_TEST_CLOCK_SKEW_S"] = str(skew_s)
        err = None if stderr is None else stderr.open("ab")
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "tests.fleet.node_worker", dsn, node_id, str(log),
                "--lease-s", str(lease_s), "--shards", str(shards), cwd=ROOT,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL if err is None else err, env=env)
        finally:
            if err is not None:
                err.close()
        worker = cls(proc, node_id, log)
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), READY_S)
        if not line:
            raise RuntimeError(f"node {node_id} ended before it was ready "
                               f"(exit {await proc.wait()})")
        ready = json.loads(line)
        worker.address = ready["address"]
        worker.skewed_ms = int(ready.get("skewed_ms") or 0)
        worker._reader = asyncio.get_running_loop().create_task(worker._read())
        return worker

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            reply = json.loads(line)
            fut = self._pending.pop(reply.get("id"), None)
            if fut is not None and not fut.done():
                fut.set_result(reply)

    async def call(self, name: str, method: str, *args: Any,
                   within: float = 30.0) -> dict[str, Any]:
        """Call Beat `name`'s `method` from this node; its answer (`ok`, `value`/`error`)."""
        assert self.proc.stdin is not None
        cid = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[cid] = fut
        self.proc.stdin.write((json.dumps({"id": cid, "call": [name, method, list(args)]})
                               + "\n").encode())
        await self.proc.stdin.drain()
        return await asyncio.wait_for(fut, within)

    def signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, sig)

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 10.0)
            except TimeoutError:
                self.signal(signal.SIGKILL)
                await self.proc.wait()
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)

    def lines(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(x) for x in self.log.read_text().splitlines() if x.strip()]
