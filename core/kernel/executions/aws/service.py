"""The service side of the AWS SDK's protocol (`AwsService`): its calls and its
invocations.

The calls are the Lambda API's durable-execution calls the SDK makes
(`checkpoint`, `get_state`); the in-process client answers them here, and the
Lambda API's HTTP routes will too. Each is one event of the execution's object
(`aws.object`): one commit, fenced on PostgreSQL, nothing of it seen outside before
it lands. Faults at this boundary apply here: a checkpoint refused as the service
failing, delayed, or answered without its next token (the invocation ends PENDING
and runs again).

Invocations run off the object's turn: the object decides, in an event, that one
starts (and commits that), then `launch` runs the handler with the invoker while
the handler's checkpoints come in as events of their own; its answer is one more
event (`aws_ended`). `live` says which invocations run in this process: an
execution marked as in an invocation that does not run here was cut short.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from alarmtop.core.kernel.executions.aws.endpoint import EndpointInvoker
from alarmtop.core.kernel.executions.aws.functions import LambdaFunction, LambdaFunctions
from alarmtop.core.kernel.executions.aws.invoker import Invoker, Request, ThreadInvoker
from alarmtop.core.kernel.executions.aws.processes import (
    InvocationDied,
    InvocationRaised,
    ProcessInvoker,
)
from alarmtop.core.kernel.executions.aws.sdk import LambdaContext
from alarmtop.core.kernel.faults import FaultRegistry
from alarmtop.core.kernel.supervisor import Supervisor, tracker_of
from alarmtop.core.model.aws_arn import Place, child_execution_id, execution_id_of
from alarmtop.core.model.aws_checkpoint import Target
from alarmtop.core.model.aws_errors import AwsServiceError, ServiceException, invalid
from alarmtop.core.model.aws_limits import AwsLimits
from alarmtop.core.model.execution_errors import ValidationError, error_object
from alarmtop.core.ports import Clock

log = logging.getLogger("alarmtop.aws")
StubFor = Callable[[str], Any]


@dataclass(frozen=True)
class AwsOptions:
    """How a runtime serves the AWS SDK's handlers (`Runtime(aws=AwsOptions(...))`).

    `limits`: AWS's limits, or your own (`AwsLimits`); `place`: the region and account
    the ARNs name; `workers`: threads (and, for `isolation="process"`, processes)
    that run handlers at once (more wait their turn); `invocation_timeout_s`: how
    long one invocation may run (Lambda's 15 minutes); `liveness_s`: how soon an
    invocation cut short (its process died) is noticed and retried."""

    limits: AwsLimits = field(default_factory=AwsLimits)
    place: Place = field(default_factory=Place)
    workers: int = 64
    invocation_timeout_s: float = 900.0
    liveness_s: float = 30.0

    def __post_init__(self) -> None:
        if not isinstance(self.workers, int) or self.workers < 1:
            raise ValidationError(f"AwsOptions.workers is a whole number >= 1, not "
                                  f"{self.workers!r}")
        for name in ("invocation_timeout_s", "liveness_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ValidationError(f"AwsOptions.{name} is seconds > 0, not {value!r}")


class AwsService:
    """See the module docstring. Built by the runtime; the execution objects reach it
    as `engine.aws`."""

    def __init__(self, clock: Clock, faults: FaultRegistry, tasks: Supervisor,
                 stub_for: StubFor, options: AwsOptions | None = None, *,
                 invoker: Invoker | None = None) -> None:
        options = options or AwsOptions()
        self.clock = clock
        self.faults = faults
        self.tasks = tasks
        self.functions = LambdaFunctions()
        self.limits = options.limits
        self.place = options.place
        self.invocation_timeout_s = options.invocation_timeout_s
        self.liveness_s = options.liveness_s  # how soon an invocation cut short is noticed
        self._workers = options.workers
        self._stub_for = stub_for
        # By isolation ("thread", "process"): made on first use.
        self._invokers: dict[str, Invoker] = {} if invoker is None else {"thread": invoker}
        self._live: dict[str, int] = {}  # execution id -> the invocation running here
        self._waiting: set[concurrent.futures.Future[Any]] = set()
        self._stopped = False

    # -- the calls the SDK makes -----------------------------------------------------------

    async def checkpoint(self, arn: str, token: Any, updates: Any,
                         client_token: Any = None) -> dict[str, Any]:
        """CheckpointDurableExecution: apply `updates`, answer with the next token and
        what the handler has not seen. Raises `AwsServiceError`."""
        execution_id = execution_id_of(arn)
        if client_token is not None and (not isinstance(client_token, str)
                                         or not 0 < len(client_token) <= 64):
            raise ServiceException("ClientToken must be 1-64 characters")
        revoke = await self._checkpoint_faults(execution_id)
        return await self._ask(execution_id, "aws_checkpoint", token, updates, client_token,
                               revoke)

    async def get_state(self, arn: str, token: Any, marker: Any = None,
                        max_items: Any = 1000) -> dict[str, Any]:
        """GetDurableExecutionState: a page of the operations the handler may see."""
        return await self._ask(execution_id_of(arn), "aws_state", token, marker, max_items)

    async def _ask(self, execution_id: str, method: str, *args: Any) -> dict[str, Any]:
        try:
            out: dict[str, Any] = await getattr(self._stub_for(execution_id), method)(*args)
        except AwsServiceError:
            raise
        except Exception as exc:  # the runtime could not answer: the SDK retries
            raise ServiceException(f"the service could not answer ({type(exc).__name__}: "
                                   f"{exc})") from None
        error = out.get("error")
        if error is not None:
            raise AwsServiceError.from_dict(error)
        return out

    async def _checkpoint_faults(self, execution_id: str) -> bool:
        """Faults at the checkpoint boundary; whether to withhold the next token."""
        if not self.faults.armed_for(execution_id):
            return False
        if self.faults.take(execution_id, "checkpoint_fail") is not None:
            raise ServiceException(f"injected fault: checkpoint of {execution_id} refused")
        delay = self.faults.take(execution_id, "checkpoint_delay")
        if delay is not None:
            await self._idle_while_live(execution_id, self.faults.delay(delay, self.clock))
        return self.faults.take(execution_id, "checkpoint_revoke") is not None

    async def _idle_while_live(self, execution_id: str, waiting: Any) -> None:
        # The invocation's task holds the virtual clock still while its handler runs;
        # a delay on that clock must let it move, or it would never end.
        tracker = tracker_of(self.clock)
        if tracker is None or execution_id not in self._live:
            await waiting
            return
        tracker.release()
        try:
            await waiting
        finally:
            tracker.acquire()

    # -- functions and invocations ---------------------------------------------------------

    def target(self, ref: str, execution_id: str, op_id: str, round_: int) -> Target:
        """A chained invoke's target, or InvalidParameterValueException for a function
        that is not registered (refused at the checkpoint, as the SDK then fails)."""
        try:
            fn = self.functions.resolve(ref)
        except AwsServiceError as exc:
            raise invalid(f"cannot invoke {ref!r}: {exc.message}") from None
        child = child_execution_id(execution_id, op_id, round_)
        return Target(fn.name, fn.version, child,
                      self.place.execution_arn(fn.name, fn.version, child))

    async def start_child(self, target: Target, input_text: str | None,
                          parent: str) -> dict[str, Any]:
        """Start (or find, when its START is retried) a chained invoke's execution."""
        fn = self.functions.get(target.function)
        out: dict[str, Any] = await self._stub_for(target.child_id).aws_begin(
            fn.name, fn.version, input_text or "null",
            self.limits.execution_timeout(fn.timeout_s), parent, not fn.durable,
            target.child_arn)
        return out

    def live(self, execution_id: str, invocation: int) -> bool:
        """Whether invocation `invocation` of the execution runs in this process."""
        return self._live.get(execution_id) == invocation

    def abandon(self, execution_id: str) -> None:
        """Forget a running invocation (timed out): its later calls are refused."""
        self._live.pop(execution_id, None)

    def launch(self, fn: LambdaFunction, execution_id: str, invocation: int,
               payload: dict[str, Any], arn: str) -> None:
        """Run invocation `invocation` (its start has committed) off the object's turn."""
        if self._stopped:
            return  # the runtime stops: the next start finds it cut short
        self._live[execution_id] = invocation
        self.tasks.spawn(self._run(fn, execution_id, invocation, payload, arn),
                         name=f"lambda {execution_id}#{invocation}")

    async def _run(self, fn: LambdaFunction, execution_id: str, invocation: int,
                   payload: dict[str, Any], arn: str) -> None:
        loop = asyncio.get_running_loop()
        started = self.clock.now_ms()
        deadline = started + round(self.invocation_timeout_s * 1000)
        context = LambdaContext(fn.name, fn.version, self.place.function_arn(fn.name),
                                f"{execution_id}/{invocation}",
                                lambda: max(0, deadline - self.clock.now_ms()))
        request = Request(fn, payload, context, self._blocking_call(loop),
                          time.time() + self.invocation_timeout_s)
        output: dict[str, Any] | None = None
        error: dict[str, Any] | None = None
        try:
            try:
                output = await self._invoker_of(fn).invoke(request)
            except (InvocationDied, InvocationRaised) as exc:  # in a worker process
                error = exc.error
            except Exception as exc:  # the function raised: the invocation failed
                error = error_object(exc)
            if not self._stopped:
                await self._stub_for(execution_id).aws_ended(invocation, output, error,
                                                             started)
        except Exception:  # the liveness alarm notices it instead
            log.exception("recording the end of invocation %s of %s failed", invocation,
                          execution_id)
        finally:
            # Live until its end is recorded: the liveness alarm must not take it for
            # one cut short meanwhile.
            if self._live.get(execution_id) == invocation:
                del self._live[execution_id]

    def _invoker_of(self, fn: LambdaFunction) -> Invoker:
        kind = "endpoint" if fn.endpoint is not None else fn.isolation
        invoker = self._invokers.get(kind)
        if invoker is None:
            invoker = self._invokers[kind] = (
                EndpointInvoker(self.limits.response_bytes, self._workers) if kind == "endpoint"
                else ProcessInvoker(self._workers) if kind == "process"
                else ThreadInvoker(self._workers))
        return invoker

    def _blocking_call(self, loop: asyncio.AbstractEventLoop) -> Callable[..., dict[str, Any]]:
        """The SDK threads' way into the service: blocks its thread, never the loop."""
        methods: dict[str, Callable[..., Coroutine[Any, Any, dict[str, Any]]]] = {
            "checkpoint": self.checkpoint, "get_state": self.get_state}

        def call(method: str, *args: Any) -> dict[str, Any]:
            if self._stopped:
                raise ServiceException("the runtime is stopping")
            fut = asyncio.run_coroutine_threadsafe(methods[method](*args), loop)
            self._waiting.add(fut)
            try:
                return fut.result()
            except concurrent.futures.CancelledError:
                raise ServiceException("the runtime stopped before answering") from None
            finally:
                self._waiting.discard(fut)
        return call

    async def stop(self) -> None:
        """Refuse further calls and end the waits of handler threads (they fail)."""
        self._stopped = True
        for fut in list(self._waiting):
            fut.cancel()
        invokers, self._invokers = self._invokers, {}
        for invoker in invokers.values():
            await invoker.close()

    def reopen(self) -> None:
        self._stopped = False
