"""`isolation="process"`: invocations in a pool of worker processes (`aws.worker`).

A handler that ends its process (`os._exit`, a segfault, the OOM killer) fails one
invocation, as on Lambda (`Runtime.ExitError`), and never the runtime: the
worker is replaced for the next one. Each invocation is driven from a thread of
the parent, which answers the worker's calls to the service (blocking its own
thread, never the event loop) and passes on what the handler printed or logged.
Workers are started with `spawn` (the runtime's process has threads a fork would
copy in the middle of their work) and kept for the next invocation.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from alarmtop.core.kernel.executions.aws import worker
from alarmtop.core.kernel.executions.aws.invoker import Request
from alarmtop.core.model.aws_errors import AwsServiceError
from alarmtop.core.model.aws_invocation import EXIT_ERROR


class InvocationDied(Exception):
    """The worker process ended during the invocation (its ErrorObject: `error`)."""

    def __init__(self, exitcode: int | None) -> None:
        super().__init__(f"the worker process exited (code {exitcode}) during the invocation")
        self.error = {"ErrorType": EXIT_ERROR["ErrorType"], "ErrorMessage": str(self)}


class InvocationRaised(Exception):
    """The handler raised in the worker (its ErrorObject: `error`)."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error.get("ErrorMessage", "the handler raised"))
        self.error = error


class _Worker:
    def __init__(self, context: Any) -> None:
        self.conn, child = context.Pipe(duplex=True)
        self.process = context.Process(target=worker.serve, args=(child,), daemon=True,
                                       name="alarmtop-lambda-worker")
        self.process.start()
        child.close()

    def stop(self) -> None:
        try:
            self.conn.send(("stop",))
        except (OSError, ValueError):
            pass
        self.conn.close()
        self.process.join(timeout=1)
        if self.process.is_alive():
            self.process.kill()


class ProcessInvoker:
    """Invocations in worker processes (see the module docstring)."""

    def __init__(self, workers: int = 8) -> None:
        self._context = multiprocessing.get_context("spawn")
        self._threads = ThreadPoolExecutor(max_workers=workers,
                                           thread_name_prefix="alarmtop-lambda-process")
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self._closed = False

    async def invoke(self, request: Request) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, self._drive, request)

    def _take(self) -> _Worker:
        with self._lock:
            while self._idle:
                w = self._idle.pop()
                if w.process.is_alive():
                    return w
        return _Worker(self._context)

    def _give_back(self, w: _Worker) -> None:
        with self._lock:
            if not self._closed and w.process.is_alive():
                self._idle.append(w)
                return
        w.stop()

    def _drive(self, request: Request) -> dict[str, Any]:
        fn, ctx = request.function, request.context
        w = self._take()
        message = {"target": fn.target, "paths": list(fn.paths), "durable": fn.durable,
                   "payload": request.payload,
                   "context": {"function": ctx.function_name, "version": ctx.function_version,
                               "arn": ctx.invoked_function_arn, "request_id": ctx.aws_request_id,
                               "deadline_s": request.deadline_s}}
        try:
            w.conn.send(("invoke", message))
            while True:
                kind, *rest = w.conn.recv()
                if kind == "call":
                    w.conn.send(self._answer(request, rest[0], rest[1]))
                elif kind == "log":
                    print(rest[0], flush=True)  # the function's log, as Lambda keeps it
                elif kind == "done":
                    self._give_back(w)
                    return dict(rest[0])
                else:
                    self._give_back(w)
                    raise InvocationRaised(rest[0])
        except (EOFError, OSError, BrokenPipeError):
            w.process.join(timeout=5)
            code = w.process.exitcode
            w.stop()
            raise InvocationDied(code) from None

    @staticmethod
    def _answer(request: Request, method: str, args: Any) -> tuple[str, Any]:
        try:
            return ("ok", request.call(method, *args))
        except AwsServiceError as exc:
            return ("error", exc.to_dict())

    async def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for w in idle:
            w.stop()
        self._threads.shutdown(wait=False, cancel_futures=True)
