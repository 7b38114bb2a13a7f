"""`DurableContext`: what a durable handler calls, replayed from the log.

Every invocation runs the handler from the top. Each operation takes the next id
of its context; when the log already holds a record for that id, the recorded
outcome is returned (or raised) without running anything; the first operation
without a record runs and is checkpointed durably before the handler goes on.
An operation that must wait (a timer, a callback, a human) raises
`SuspendExecution`, which ends the invocation: nothing of it stays in memory.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from alarmtop.core.kernel.executions import execution_hooks
from alarmtop.core.kernel.executions.batch import BatchResult, BatchSpec, run_batch
from alarmtop.core.kernel.executions.invocation import Invocation, current_step
from alarmtop.core.kernel.executions.saga import Saga
from alarmtop.core.kernel.executions.scope import OperationScope
from alarmtop.core.model.callback_ids import encode_callback_id
from alarmtop.core.model.execution_config import (
    CALLBACK_SERDES,
    JSON_SERDES,
    CallbackConfig,
    ChildConfig,
    Duration,
    InvokeConfig,
    MapConfig,
    ParallelConfig,
    RetryPresets,
    SerDes,
    StepConfig,
    StepSemantics,
    WaitForCallbackConfig,
    WaitForConditionConfig,
    decide_poll,
    decide_retry,
)
from alarmtop.core.model.execution_errors import (
    CallbackExternalError,
    CallbackSubmitterError,
    CallbackTimeoutError,
    DurableOperationError,
    InvokeError,
    StepError,
    StepInterruptedError,
    SuspendExecution,
    ValidationError,
    WaitForConditionError,
    error_object,
)
from alarmtop.core.model.operations import (
    OperationRecord,
    OpStatus,
    OpType,
    error_payload,
    iso,
    payload,
)
from alarmtop.core.model.replay import (
    advance,
)

T = TypeVar("T")


def _fn_name(fn: Callable[..., Any]) -> str | None:
    name = getattr(fn, "__name__", None)
    return None if name in (None, "<lambda>") else str(name)


class Callback:
    """A callback created by `create_callback`: hand `callback_id` to the outside."""

    def __init__(self, scope: OperationScope, op_id: str, callback_id: str, name: str | None,
                 serdes: SerDes) -> None:
        self._scope = scope
        self.op_id = op_id
        self.callback_id = callback_id
        self.name = name
        self._serdes = serdes

    async def result(self) -> Any:
        """The payload sent with success; raises on failure or timeout; suspends until then."""
        _, value = self._scope.replayed(self._scope.inv.ops[self.op_id], self._serdes,
                                        CallbackExternalError, CallbackTimeoutError)
        return value


class DurableContext:
    """The handler's view of its execution. Create child contexts only through the API."""

    def __init__(self, inv: Invocation, parent_id: str | None = None, *,
                 parent_for_records: str | None = None) -> None:
        self._inv = inv
        # Its operations: ids, log look-ups, records (shared with parallel/map and sagas).
        self._ops = OperationScope(inv, parent_id, parent_for_records, _child_context)

    # -- identity and helpers -------------------------------------------------------------

    @property
    def execution_id(self) -> str:
        return self._inv.execution_id

    def now_ms(self) -> int:
        """The runtime clock's epoch ms, recorded: every replay of this point of the
        handler (after a wait, a crash, a redrive) sees the same value."""
        return int(self._ops.mark("now", lambda: str(self._ops.clock_ms())))

    def now(self) -> datetime:
        """`now_ms()` as an aware UTC datetime (recorded the same way)."""
        return datetime.fromtimestamp(self.now_ms() / 1000, tz=UTC)

    def random(self) -> random.Random:
        """A `random.Random` whose seed is recorded: replays draw the same numbers."""
        return random.Random(int(self._ops.mark("random",
                                            lambda: str(self._inv.rng.getrandbits(64)))))

    def is_replaying(self) -> bool:
        return self._ops.counter < self._inv.replaying_until and self._ops.parent_id is None

    def idempotency_key(self, *parts: Any) -> str:
        """A key that is the same on every replay of this point of the handler."""
        ops = self._ops
        where = f"{ops.parent_id}-{ops.counter}" if ops.parent_id else str(ops.counter)
        step = current_step.get()
        if step is not None:
            where = step[1]
        tail = ":".join(str(p) for p in parts)
        return f"{self._inv.execution_id}:{where}:{tail}"

    def saga(self) -> Saga:
        """A compensation stack for this context, rebuilt by replay on every invocation."""
        saga = Saga(self, self._ops)
        self._inv.sagas.append(saga)
        return saga

    # -- step -----------------------------------------------------------------------------

    async def step(self, fn: Callable[..., Any], *args: Any, name: str | None = None,
                   config: StepConfig | None = None) -> Any:
        """Run `fn(*args)` (sync or async) once, checkpointing its result.

        Retried by `config.retry_strategy` (default: `RetryPresets.default()`); a
        retry suspends the invocation until its time. Raises `StepError` when the
        step fails for good (rebuilt identically on replay).
        """
        return await self._step(fn, args, name if name is not None else _fn_name(fn),
                                config or StepConfig(), "Step")

    async def _step(self, fn: Callable[..., Any], args: tuple[Any, ...], name: str | None,
                    cfg: StepConfig, sub_type: str) -> Any:
        op_id = self._ops.next_id()
        rec = self._ops.lookup(op_id, OpType.STEP, sub_type, name)
        serdes = cfg.serdes or JSON_SERDES
        done, value = self._ops.replayed(rec, serdes, StepError)
        if done:
            return value
        if rec is None:
            rec = self._ops.new(op_id, OpType.STEP, sub_type, name, status=OpStatus.READY)
        return await self._attempt(rec, fn, args, cfg, serdes)

    async def _attempt(self, rec: OperationRecord, fn: Callable[..., Any], args: tuple[Any, ...],
                       cfg: StepConfig, serdes: SerDes) -> Any:
        inv = self._inv
        if inv.replay_only:
            inv.frontier(rec.id)  # a replay-only run never runs a body
        label = rec.name or rec.id
        at_most_once = cfg.step_semantics is StepSemantics.AT_MOST_ONCE_PER_RETRY
        interrupted = rec.status is OpStatus.STARTED
        if interrupted and at_most_once:
            return await self._step_failed(rec, cfg, StepInterruptedError(
                f"step {label!r} was interrupted and runs at most once per retry"), rec.attempt)
        # The start of an at-least-once attempt need not be durable before the body
        # runs, only queued ahead of its outcome. While nothing can come between
        # (a plain function's body, with no fault armed to crash it) it waits here and
        # goes with the outcome: one checkpoint and one copy of the record.
        started: tuple[dict[str, Any], ...] = ()
        if not interrupted:
            advance(rec, OpStatus.STARTED).attempt += 1
            rec.started_ms = self._ops.clock_ms()
            started = (inv.event("StepStarted", rec),)
            if at_most_once or inv.faults_armed():
                await inv.save(rec, *started, wait=at_most_once)
                started = ()
        inv.crash_point(label, "A")
        token = current_step.set((inv.execution_id, rec.id, label))
        hooks = inv.hooks
        told = execution_hooks.attempt_started(hooks, inv.execution_id, rec, self._ops.clock_ms()) \
            if hooks.on_user_function_start or hooks.on_user_function_end else None
        try:
            inv.raise_fault(label)
            value = fn(*args)
            if inspect.isawaitable(value):
                if started:
                    await inv.save(rec, *started, wait=False)
                    started = ()
                value = await value
        except Exception as exc:
            if told is not None:
                execution_hooks.attempt_ended(hooks, told, self._ops.clock_ms(), exc)
            return await self._step_failed(rec, cfg, exc, rec.attempt, started)
        except BaseException as exc:  # cancelled: the attempt ends all the same
            if told is not None:
                execution_hooks.attempt_ended(hooks, told, self._ops.clock_ms(), exc)
            raise
        finally:
            current_step.reset(token)
        if told is not None:
            execution_hooks.attempt_ended(hooks, told, self._ops.clock_ms(), None)
        try:
            text = serdes.serialize(value)
        except (TypeError, ValueError) as exc:
            bad = ValidationError(f"the result of step {label!r} is not serialisable: {exc}; "
                                  "return JSON values or give the step a serdes")
            return await self._step_failed(rec, StepConfig(RetryPresets.none()), bad,
                                           rec.attempt, started)
        inv.crash_point(label, "B")
        advance(rec, OpStatus.SUCCEEDED)
        rec.result, rec.error, rec.ended_ms = text, None, self._ops.clock_ms()
        await inv.save(rec, *started, inv.event("StepSucceeded", rec, {
            "Result": payload(text), "RetryDetails": {"CurrentAttempt": rec.attempt}}))
        inv.crash_point(label, "C")
        return serdes.deserialize(text)

    async def _step_failed(self, rec: OperationRecord, cfg: StepConfig, exc: BaseException,
                           attempt: int, started: tuple[dict[str, Any], ...] = ()) -> Any:
        """Record a failed attempt (after its start, when that is still held back)."""
        inv = self._inv
        strategy = cfg.retry_strategy or RetryPresets.default()
        decision = decide_retry(strategy, exc, attempt, inv.rng)
        err = error_object(exc)
        rec.error = err
        if decision.should_retry:
            delay = max(1, decision.delay_seconds)
            advance(rec, OpStatus.PENDING).next_attempt_ms = self._ops.clock_ms() + delay * 1000
            await inv.save(rec, *started, inv.event("StepFailed", rec, {
                "Error": error_payload(err),
                "RetryDetails": {"CurrentAttempt": attempt, "NextAttemptDelaySeconds": delay}}))
            raise SuspendExecution(f"step {rec.name or rec.id!r} retries in {delay}s",
                                   rec.next_attempt_ms, rec.id)
        advance(rec, OpStatus.FAILED).ended_ms = self._ops.clock_ms()
        await inv.save(rec, *started, inv.event("StepFailed", rec, {
            "Error": error_payload(err), "RetryDetails": {"CurrentAttempt": attempt}}))
        raise StepError.from_error_object(err)

    # -- wait -----------------------------------------------------------------------------

    async def wait(self, duration: Duration | int, name: str | None = None) -> None:
        """Suspend for `duration` (at least 1 s) on the runtime clock."""
        seconds = duration.seconds if isinstance(duration, Duration) else duration
        if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < 1:
            raise ValidationError(f"wait() needs a Duration of at least 1 second, not {duration!r}")
        op_id = self._ops.next_id()
        rec = self._ops.lookup(op_id, OpType.WAIT, "Wait", name)
        if rec is None:
            end = self._ops.clock_ms() + seconds * 1000
            rec = self._ops.new(op_id, OpType.WAIT, "Wait", name, scheduled_end_ms=end,
                            duration_s=seconds)
            await self._inv.save(rec, self._inv.event("WaitStarted", rec, {
                "Duration": seconds, "ScheduledEndTimestamp": iso(end)}))
        self._ops.replayed(rec, JSON_SERDES, DurableOperationError)

    # -- callbacks ------------------------------------------------------------------------

    async def create_callback(self, name: str | None = None,
                              config: CallbackConfig | None = None) -> Callback:
        """A callback the outside completes by id (success, failure, heartbeat)."""
        cfg = config or CallbackConfig()
        op_id = self._ops.next_id()
        rec = self._ops.lookup(op_id, OpType.CALLBACK, "Callback", name)
        if rec is None:
            now = self._ops.clock_ms()
            rec = self._ops.new(op_id, OpType.CALLBACK, "Callback", name,
                            callback_id=encode_callback_id(self.execution_id, op_id))
            details: dict[str, Any] = {"CallbackId": rec.callback_id}
            if cfg.timeout.seconds:
                rec.timeout_s, rec.timeout_at_ms = (cfg.timeout.seconds,
                                                    now + cfg.timeout.seconds * 1000)
                details["Timeout"] = cfg.timeout.seconds
            if cfg.heartbeat_timeout.seconds:
                rec.heartbeat_timeout_s = cfg.heartbeat_timeout.seconds
                rec.heartbeat_at_ms = now + cfg.heartbeat_timeout.seconds * 1000
                details["HeartbeatTimeout"] = cfg.heartbeat_timeout.seconds
            await self._inv.save(rec, self._inv.event("CallbackStarted", rec, details))
        assert rec.callback_id is not None
        return Callback(self._ops, op_id, rec.callback_id, name, cfg.serdes or CALLBACK_SERDES)

    async def wait_for_callback(self, submitter: Callable[[str], Any], name: str | None = None,
                                config: WaitForCallbackConfig | None = None) -> Any:
        """Create a callback, hand its id to `submitter` (a step), wait for the result."""
        cfg = config or WaitForCallbackConfig()

        async def body(child: DurableContext) -> Any:
            cb = await child.create_callback(f"{name} create callback id" if name else None, cfg)
            try:
                await child.step(submitter, cb.callback_id,
                                 name=f"{name} submitter" if name else None,
                                 config=StepConfig(retry_strategy=cfg.retry_strategy))
            except StepError as exc:
                raise CallbackSubmitterError(
                    f"the submitter failed: {exc.error_type}: {exc.message}") from None
            return await cb.result()

        return await self._child(body, name, "WaitForCallback", CALLBACK_SERDES)

    # -- child contexts -------------------------------------------------------------------

    async def run_in_child_context(self, fn: Callable[[DurableContext], Awaitable[T]],
                                   name: str | None = None,
                                   config: ChildConfig | None = None) -> T:
        """Run `fn(child_ctx)` as one operation whose own operations nest under it."""
        cfg = config or ChildConfig()
        result: T = await self._child(fn, name if name is not None else _fn_name(fn),
                                      cfg.sub_type or "RunInChildContext",
                                      cfg.serdes or JSON_SERDES)
        return result

    async def _child(self, fn: Callable[[DurableContext], Awaitable[Any]], name: str | None,
                     sub_type: str, serdes: SerDes) -> Any:
        return await self._ops.child_at(self._ops.next_id(), fn, name, sub_type, serdes)

    # -- parallel and map -----------------------------------------------------------------

    async def parallel(self, functions: Sequence[Callable[[DurableContext], Awaitable[Any]]
                                                 | tuple[str, Callable[..., Awaitable[Any]]]],
                       name: str | None = None,
                       config: ParallelConfig | None = None) -> BatchResult:
        """Run branches `fn(ctx)` (or `(name, fn)` pairs) as one operation; see `batch`."""
        cfg = config or ParallelConfig()
        branches: list[tuple[str | None, Any]] = []
        for i, f in enumerate(functions):
            bname, fn = f if isinstance(f, tuple) else (None, f)
            branches.append((bname or f"parallel-branch-{i}", fn))
        return await run_batch(self._ops, BatchSpec(
            "Parallel", "ParallelBranch", branches, cfg.completion_config, cfg.max_concurrency,
            cfg.nesting_type, cfg.serdes, cfg.item_serdes), name)

    async def map(self, items: Sequence[Any],
                  fn: Callable[[DurableContext, Any, int, Sequence[Any]], Awaitable[Any]],
                  name: str | None = None, config: MapConfig | None = None) -> BatchResult:
        """Run `fn(ctx, item, index, items)` for every item as one operation."""
        cfg = config or MapConfig()
        namer = cfg.item_namer or (lambda _item, i: f"map-item-{i}")

        def branch(i: int, item: Any) -> Callable[[DurableContext], Awaitable[Any]]:
            return lambda c: fn(c, item, i, items)

        branches = [(namer(item, i), branch(i, item)) for i, item in enumerate(items)]
        return await run_batch(self._ops, BatchSpec(
            "Map", "MapIteration", branches, cfg.completion_config, cfg.max_concurrency,
            cfg.nesting_type, cfg.serdes, cfg.item_serdes), name)

    # -- invoke ---------------------------------------------------------------------------

    async def invoke(self, function_name: str, payload_value: Any = None,
                     name: str | None = None, config: InvokeConfig | None = None, *,
                     tenant_id: str | None = None) -> Any:
        """Start an execution of another registered handler and wait for its result.

        Raises `InvokeError` (with the child's error type and message) when it fails.
        """
        inv = self._inv
        cfg = config or InvokeConfig(tenant_id=tenant_id)
        tenant_id = tenant_id or cfg.tenant_id
        op_id = self._ops.next_id()
        rec = self._ops.lookup(op_id, OpType.CHAINED_INVOKE, "ChainedInvoke", name)
        if rec is None:
            inv.frontier(op_id)
            assert inv.start_child is not None
            text = (cfg.serdes_payload or JSON_SERDES).serialize(payload_value)
            # A redriven execution invokes afresh: the child of an earlier run has ended.
            redrive = f".r{inv.record.redrives}" if inv.record.redrives else ""
            child_id = f"{self.execution_id}{redrive}.{op_id}"
            version = await inv.start_child(function_name, text, child_id,
                                            f"{self.execution_id}#{op_id}")
            rec = self._ops.new(op_id, OpType.CHAINED_INVOKE, "ChainedInvoke", name)
            rec.extra = {"child": child_id, "function": function_name}
            details: dict[str, Any] = {"FunctionName": function_name, "Input": payload(text),
                                       "ExecutedVersion": version,
                                       "DurableExecutionArn": child_id}
            if tenant_id is not None:
                details["TenantId"] = tenant_id
            await inv.save(rec, inv.event("ChainedInvokeStarted", rec, details))
        _, value = self._ops.replayed(rec, cfg.serdes_result or JSON_SERDES, InvokeError)
        return value

    # -- wait for condition ---------------------------------------------------------------

    async def wait_for_condition(self, check: Callable[[Any], Any],
                                 config: WaitForConditionConfig,
                                 name: str | None = None) -> Any:
        """Poll `check(state) -> state` with durable delays until the strategy stops."""
        inv = self._inv
        serdes = config.serdes or JSON_SERDES
        op_id = self._ops.next_id()
        rec = self._ops.lookup(op_id, OpType.STEP, "WaitForCondition", name)
        done, value = self._ops.replayed(rec, serdes, WaitForConditionError)
        if done:
            return value
        if rec is not None:
            inv.frontier(op_id)
            state = config.initial_state if rec.result is None else serdes.deserialize(rec.result)
        else:
            rec = self._ops.new(op_id, OpType.STEP, "WaitForCondition", name)
            state = config.initial_state
        advance(rec, OpStatus.STARTED).attempt += 1
        await inv.save(rec, inv.event("StepStarted", rec), wait=False)
        hooks = inv.hooks
        told = execution_hooks.attempt_started(hooks, inv.execution_id, rec, self._ops.clock_ms()) \
            if hooks.on_user_function_start or hooks.on_user_function_end else None
        try:
            try:
                value = check(state)
                if inspect.isawaitable(value):
                    value = await value
            except BaseException as exc:
                if told is not None:
                    execution_hooks.attempt_ended(hooks, told, self._ops.clock_ms(), exc)
                raise
            if told is not None:
                execution_hooks.attempt_ended(hooks, told, self._ops.clock_ms(), None)
            decision = decide_poll(config.wait_strategy, value, rec.attempt, inv.rng)
        except Exception as exc:
            err = error_object(exc)
            advance(rec, OpStatus.FAILED)
            rec.error, rec.ended_ms = err, self._ops.clock_ms()
            await inv.save(rec, inv.event("StepFailed", rec, {
                "Error": error_payload(err), "RetryDetails": {"CurrentAttempt": rec.attempt}}))
            raise WaitForConditionError.from_error_object(err) from None
        text = serdes.serialize(value)
        rec.result = text
        if decision.should_continue:
            delay = max(1, decision.delay.seconds)
            advance(rec, OpStatus.PENDING).next_attempt_ms = self._ops.clock_ms() + delay * 1000
            await inv.save(rec, inv.event("StepSucceeded", rec, {
                "Result": payload(text),
                "RetryDetails": {"CurrentAttempt": rec.attempt,
                                 "NextAttemptDelaySeconds": delay}}))
            raise SuspendExecution(f"condition {name or op_id!r} polls again in {delay}s",
                                   rec.next_attempt_ms, op_id)
        advance(rec, OpStatus.SUCCEEDED).ended_ms = self._ops.clock_ms()
        await inv.save(rec, inv.event("StepSucceeded", rec, {
            "Result": payload(text), "RetryDetails": {"CurrentAttempt": rec.attempt}}))
        return serdes.deserialize(text)

    # -- humans ---------------------------------------------------------------------------


def _child_context(inv: Invocation, op_id: str, record_parent: str | None) -> DurableContext:
    return DurableContext(inv, op_id, parent_for_records=record_parent)
