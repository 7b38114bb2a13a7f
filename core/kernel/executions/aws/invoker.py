"""How a Lambda-style function is invoked: the seam, and its first kind (threads).

An `Invoker` runs one invocation and returns what the function answered (the
durable handler's `{Status, Result, Error}`, or a plain function's value wrapped
so) or raises what the function raised. `ThreadInvoker` runs the handler in a
worker thread of its own pool: the SDK is synchronous, and the event loop must
stay free for the checkpoints the handler makes meanwhile. Worker processes and
handlers behind an endpoint are other invokers of the same shape.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from alarmtop.core.kernel.executions.aws import sdk
from alarmtop.core.kernel.executions.aws.functions import LambdaFunction
from alarmtop.core.model.execution_errors import error_object


@dataclass(frozen=True)
class Request:
    """One invocation: the function, its input, and the client its checkpoints use."""

    function: LambdaFunction
    payload: dict[str, Any]  # the Lambda envelope (durable) or the input (plain)
    context: sdk.LambdaContext
    call: sdk.Call  # the service, for the durable handler's two calls
    deadline_s: float = 0.0  # when the invocation must end (wall clock, epoch seconds)


class Invoker(Protocol):
    async def invoke(self, request: Request) -> dict[str, Any]: ...

    async def close(self) -> None: ...


def call_plain(handler: Any, payload: dict[str, Any], context: Any) -> dict[str, Any]:
    """A plain function, called once: its value, or its error (a function error, as
    Lambda reports it to the chained invoke that called it, not a failed invocation)."""
    try:
        value = handler(payload.get("Input"), context)
    except Exception as exc:
        return {"Status": "FAILED", "Error": error_object(exc)}
    return {"Status": "SUCCEEDED", "Result": json.dumps(value)}


def run_in_thread(request: Request) -> dict[str, Any]:
    """The invocation itself, on a worker thread."""
    fn = request.function
    handler = fn.load()
    if not fn.durable:
        return call_plain(handler, request.payload, request.context)
    event = sdk.invocation_event(request.payload, sdk.InProcessClient(request.call))
    out = handler(event, request.context)
    if not isinstance(out, dict):
        raise TypeError(f"the durable handler answered {type(out).__name__}, not the SDK's "
                        "output object; is it decorated with @durable_execution?")
    return out


class ThreadInvoker:
    """Invocations in a pool of worker threads (`isolation="thread"`)."""

    def __init__(self, workers: int = 64) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers,
                                        thread_name_prefix="alarmtop-lambda")

    async def invoke(self, request: Request) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, run_in_thread, request)

    async def close(self) -> None:
        # Threads cannot be cut short: those still running end at their next call to
        # the service (refused once it stopped); nothing waits for them here.
        self._pool.shutdown(wait=False, cancel_futures=True)
