"""`DurableContext`: what a durable handler calls, replayed from the log.

Every invocation runs the handler from the top. Each operation takes the next id
of its context; when the log already holds a record for that id, the recorded
outcome is returned (or raised) without running anything; the first operation
without a record runs and is checkpointed durably before the handler goes on.
An operation that must wait (a timer, a callback, a human) raises
`SuspendExecution`, which ends the invocation: nothing of it stays in memory.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import inspect
import json
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from alarmtop.core.durable.batch import BatchResult, BatchSpec, run_batch
from alarmtop.core.durable.config import (
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
)
from alarmtop.core.durable.errors import (
    CallbackExternalError,
    CallbackSubmitterError,
    CallbackTimeoutError,
    CheckpointFailed,
    ChildContextError,
    DurableOperationError,
    ExecutionAborted,
    InvocationCrash,
    InvokeError,
    NonDeterministicExecutionError,
    StepError,
    StepInterruptedError,
    SuspendExecution,
    ValidationError,
    WaitForConditionError,
    error_object,
)
from alarmtop.core.durable.operations import (
    ExecutionRecord,
    OperationRecord,
    OpStatus,
    OpType,
    error_payload,
    iso,
    make_event,
    payload,
)
from alarmtop.core.errors import StorageError
from alarmtop.core.faults import FaultRegistry, InjectedFault
from alarmtop.core.storage.interface import ExecutionStore, LogChain

if TYPE_CHECKING:
    from alarmtop.core.clock import Clock
    from alarmtop.core.durable.saga import Saga

T = TypeVar("T")
HUMAN = "HumanDecision"
REPLAY_CHILDREN_BYTES = 256 * 1024

# The step whose body is running, for the idempotency ledger and faults.
current_step: contextvars.ContextVar[tuple[str, str, str] | None] = contextvars.ContextVar(
    "alarmtop_current_step", default=None)


def encode_callback_id(execution_id: str, op_id: str) -> str:
    raw = json.dumps([execution_id, op_id], separators=(",", ":")).encode()
    return "cb1." + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_callback_id(callback_id: str) -> tuple[str, str] | None:
    if not isinstance(callback_id, str) or not callback_id.startswith("cb1."):
        return None
    body = callback_id[4:]
    try:
        pair = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (ValueError, UnicodeDecodeError):
        return None
    if (isinstance(pair, list) and len(pair) == 2
            and all(isinstance(p, str) for p in pair)):
        return pair[0], pair[1]
    return None


def _fn_name(fn: Callable[..., Any]) -> str | None:
    name = getattr(fn, "__name__", None)
    return None if name in (None, "<lambda>") else str(name)


class Invocation:
    """One run of a handler: the log it replays, event numbering, checkpoints."""

    def __init__(self, record: ExecutionRecord, ops: dict[str, OperationRecord],
                 next_event_id: int, store: ExecutionStore, clock: Clock,
                 faults: FaultRegistry, rng: random.Random) -> None:
        self.record = record
        self.ops = ops
        self.next_event_id = next_event_id
        self.store = store
        self.clock = clock
        self.faults = faults
        self.rng = rng
        self.sagas: list[Saga] = []
        self.chain = LogChain()  # its writes land in order or not at all
        self.replaying_until = len(ops)
        # Announces history events once their checkpoint has landed; set by the engine.
        self.announce: Callable[[ExecutionRecord, Sequence[dict[str, Any]]], None] | None = None
        # Starts another execution (for invoke); set by the engine.
        self.start_child: Callable[..., Awaitable[str]] | None = None

    @property
    def execution_id(self) -> str:
        return self.record.id

    def event(self, event_type: str, op: OperationRecord | None,
              details: dict[str, Any] | None = None) -> dict[str, Any]:
        ev = make_event(self.next_event_id, event_type, self.clock.now_ms(), op, details)
        self.next_event_id += 1
        return ev

    async def save(self, op: OperationRecord, *events: dict[str, Any], wait: bool = True) -> None:
        """Checkpoint `op` with `events`; its events are announced once it has landed."""
        self.ops[op.id] = op
        fut = self.store.checkpoint(self.record.id, None, [op], events, self.chain)
        announce = self.announce if events else None
        if wait:
            try:
                await fut
            except StorageError as exc:
                raise CheckpointFailed(str(exc)) from None
            if announce is not None:
                announce(self.record, events)
        elif announce is not None:
            record = self.record

            def landed(f: asyncio.Future[None]) -> None:
                if not f.cancelled() and f.exception() is None:
                    announce(record, events)
            fut.add_done_callback(landed)

    def faults_armed(self) -> bool:
        """Whether any fault is armed against this execution (a crash may come anywhere)."""
        return self.faults.armed_for(self.execution_id)

    def crash_point(self, step: str, point: str) -> None:
        fault = self.faults.find(self.execution_id, "step_crash", step)
        if fault is not None and fault.point == point:
            self.faults.take(self.execution_id, "step_crash", step)
            raise InvocationCrash(f"injected crash at point {point} of step {step!r}")

    def raise_fault(self, step: str) -> None:
        for kind in ("compensation_fail", "step_raise"):
            fault = self.faults.take(self.execution_id, kind, step)
            if fault is not None:
                raise InjectedFault(fault.id, kind, f"{self.execution_id}/{step}")


class Callback:
    """A callback created by `create_callback`: hand `callback_id` to the outside."""

    def __init__(self, ctx: DurableContext, op_id: str, callback_id: str, name: str | None,
                 serdes: SerDes) -> None:
        self._ctx = ctx
        self.op_id = op_id
        self.callback_id = callback_id
        self.name = name
        self._serdes = serdes

    async def result(self) -> Any:
        """The payload sent with success; raises on failure or timeout; suspends until then."""
        rec = self._ctx._inv.ops[self.op_id]
        if rec.status is OpStatus.SUCCEEDED:
            return None if rec.result is None else self._serdes.deserialize(rec.result)
        if rec.status is OpStatus.FAILED:
            raise CallbackExternalError.from_error_object(rec.error or {})
        if rec.status is OpStatus.TIMED_OUT:
            raise CallbackTimeoutError.from_error_object(rec.error or {})
        raise SuspendExecution(f"waiting for callback {self.name or self.op_id!r}",
                               op_id=self.op_id)


class DurableContext:
    """The handler's view of its execution. Create child contexts only through the API."""

    def __init__(self, inv: Invocation, parent_id: str | None = None, *,
                 parent_for_records: str | None = None) -> None:
        self._inv = inv
        self._parent_id = parent_id  # prefixes the ids of this context's operations
        # A FLAT batch branch has no record of its own: its operations name the batch.
        self._record_parent = parent_for_records or parent_id
        self._counter = 0

    # -- identity and helpers -------------------------------------------------------------

    @property
    def execution_id(self) -> str:
        return self._inv.execution_id

    def now_ms(self) -> int:
        """The runtime clock. Record it in a step if a later replay must see the same value."""
        return self._inv.clock.now_ms()

    def is_replaying(self) -> bool:
        return self._counter < self._inv.replaying_until and self._parent_id is None

    def idempotency_key(self, *parts: Any) -> str:
        """A key that is the same on every replay of this point of the handler."""
        where = f"{self._parent_id}-{self._counter}" if self._parent_id else str(self._counter)
        step = current_step.get()
        if step is not None:
            where = step[1]
        tail = ":".join(str(p) for p in parts)
        return f"{self._inv.execution_id}:{where}:{tail}"

    def saga(self) -> Saga:
        """A compensation stack for this context, rebuilt by replay on every invocation."""
        from alarmtop.core.durable.saga import Saga
        saga = Saga(self)
        self._inv.sagas.append(saga)
        return saga

    def _next_id(self) -> str:
        self._counter += 1
        return f"{self._parent_id}-{self._counter}" if self._parent_id else str(self._counter)

    def _lookup(self, op_id: str, op_type: OpType, sub_type: str,
                name: str | None) -> OperationRecord | None:
        rec = self._inv.ops.get(op_id)
        if rec is None:
            return None
        if (rec.type, rec.sub_type, rec.name) != (op_type, sub_type, name):
            raise NonDeterministicExecutionError(
                f"replay diverged at operation {op_id}: the log has {rec.type.value} "
                f"{rec.sub_type} {rec.name!r}, the handler now calls {op_type.value} {sub_type} "
                f"{name!r}; the handler code changed for a running execution. Deploy the "
                "old code under its version, or abort this execution", op_id)
        return rec

    def _new(self, op_id: str, op_type: OpType, sub_type: str, name: str | None,
             **fields: Any) -> OperationRecord:
        return OperationRecord(op_id, op_type, sub_type, name, self._record_parent,
                               started_ms=self.now_ms(), **fields)

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
        op_id = self._next_id()
        rec = self._lookup(op_id, OpType.STEP, sub_type, name)
        serdes = cfg.serdes or JSON_SERDES
        if rec is not None:
            if rec.status is OpStatus.SUCCEEDED:
                return None if rec.result is None else serdes.deserialize(rec.result)
            if rec.status is OpStatus.FAILED:
                raise StepError.from_error_object(rec.error or {})
            if rec.status is OpStatus.PENDING and (rec.next_attempt_ms or 0) > self.now_ms():
                raise SuspendExecution(f"step {name or op_id!r} retries at "
                                       f"{iso(rec.next_attempt_ms or 0)}",
                                       rec.next_attempt_ms, op_id)
        else:
            rec = self._new(op_id, OpType.STEP, sub_type, name, status=OpStatus.READY)
        return await self._attempt(rec, fn, args, cfg, serdes)

    async def _attempt(self, rec: OperationRecord, fn: Callable[..., Any], args: tuple[Any, ...],
                       cfg: StepConfig, serdes: SerDes) -> Any:
        inv = self._inv
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
            rec.status, rec.attempt = OpStatus.STARTED, rec.attempt + 1
            rec.started_ms = self.now_ms()
            started = (inv.event("StepStarted", rec),)
            if at_most_once or inv.faults_armed():
                await inv.save(rec, *started, wait=at_most_once)
                started = ()
        inv.crash_point(label, "A")
        token = current_step.set((inv.execution_id, rec.id, label))
        try:
            inv.raise_fault(label)
            value = fn(*args)
            if inspect.isawaitable(value):
                if started:
                    await inv.save(rec, *started, wait=False)
                    started = ()
                value = await value
        except Exception as exc:
            return await self._step_failed(rec, cfg, exc, rec.attempt, started)
        finally:
            current_step.reset(token)
        try:
            text = serdes.serialize(value)
        except (TypeError, ValueError) as exc:
            bad = ValidationError(f"the result of step {label!r} is not serialisable: {exc}; "
                                  "return JSON values or give the step a serdes")
            return await self._step_failed(rec, StepConfig(RetryPresets.none()), bad,
                                           rec.attempt, started)
        inv.crash_point(label, "B")
        rec.status, rec.result, rec.error, rec.ended_ms = (OpStatus.SUCCEEDED, text, None,
                                                           self.now_ms())
        await inv.save(rec, *started, inv.event("StepSucceeded", rec, {
            "Result": payload(text), "RetryDetails": {"CurrentAttempt": rec.attempt}}))
        inv.crash_point(label, "C")
        return serdes.deserialize(text)

    async def _step_failed(self, rec: OperationRecord, cfg: StepConfig, exc: BaseException,
                           attempt: int, started: tuple[dict[str, Any], ...] = ()) -> Any:
        """Record a failed attempt (after its start, when that is still held back)."""
        inv = self._inv
        strategy = cfg.retry_strategy or RetryPresets.default()
        decision = strategy(exc, attempt)
        err = error_object(exc)
        rec.error = err
        if decision.should_retry:
            delay = max(1, decision.delay_seconds)
            rec.status, rec.next_attempt_ms = OpStatus.PENDING, self.now_ms() + delay * 1000
            await inv.save(rec, *started, inv.event("StepFailed", rec, {
                "Error": error_payload(err),
                "RetryDetails": {"CurrentAttempt": attempt, "NextAttemptDelaySeconds": delay}}))
            raise SuspendExecution(f"step {rec.name or rec.id!r} retries in {delay}s",
                                   rec.next_attempt_ms, rec.id)
        rec.status, rec.ended_ms = OpStatus.FAILED, self.now_ms()
        await inv.save(rec, *started, inv.event("StepFailed", rec, {
            "Error": error_payload(err), "RetryDetails": {"CurrentAttempt": attempt}}))
        raise StepError.from_error_object(err)

    # -- wait -----------------------------------------------------------------------------

    async def wait(self, duration: Duration | int, name: str | None = None) -> None:
        """Suspend for `duration` (at least 1 s) on the runtime clock."""
        seconds = duration.seconds if isinstance(duration, Duration) else duration
        if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < 1:
            raise ValidationError(f"wait() needs a Duration of at least 1 second, not {duration!r}")
        op_id = self._next_id()
        rec = self._lookup(op_id, OpType.WAIT, "Wait", name)
        if rec is None:
            end = self.now_ms() + seconds * 1000
            rec = self._new(op_id, OpType.WAIT, "Wait", name, scheduled_end_ms=end,
                            duration_s=seconds)
            await self._inv.save(rec, self._inv.event("WaitStarted", rec, {
                "Duration": seconds, "ScheduledEndTimestamp": iso(end)}))
        if rec.status is OpStatus.SUCCEEDED:
            return
        raise SuspendExecution(f"waiting {rec.duration_s}s until {iso(rec.scheduled_end_ms or 0)}",
                               rec.scheduled_end_ms, op_id)

    # -- callbacks ------------------------------------------------------------------------

    async def create_callback(self, name: str | None = None,
                              config: CallbackConfig | None = None) -> Callback:
        """A callback the outside completes by id (success, failure, heartbeat)."""
        cfg = config or CallbackConfig()
        op_id = self._next_id()
        rec = self._lookup(op_id, OpType.CALLBACK, "Callback", name)
        if rec is None:
            now = self.now_ms()
            rec = self._new(op_id, OpType.CALLBACK, "Callback", name,
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
        return Callback(self, op_id, rec.callback_id, name, cfg.serdes or CALLBACK_SERDES)

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
        return await self._child_at(self._next_id(), fn, name, sub_type, serdes)

    async def _child_at(self, op_id: str, fn: Callable[[DurableContext], Awaitable[Any]],
                        name: str | None, sub_type: str, serdes: SerDes,
                        parent_id: str | None = None) -> Any:
        """A child context operation `op_id`: replayed whole once done, else (re)run.

        `parent_id` overrides the record's parent (a batch branch names its batch)."""
        inv = self._inv
        rec = self._lookup(op_id, OpType.CONTEXT, sub_type, name)
        if rec is not None and rec.status is OpStatus.SUCCEEDED:
            if rec.extra.get("replay_children"):
                # Too large to checkpoint: rebuilt by replaying the children's records.
                return serdes.deserialize(serdes.serialize(await fn(DurableContext(inv, op_id))))
            return None if rec.result is None else serdes.deserialize(rec.result)
        if rec is not None and rec.status is OpStatus.FAILED:
            raise ChildContextError.from_error_object(rec.error or {})
        if rec is None:
            rec = self._new(op_id, OpType.CONTEXT, sub_type, name)
            if parent_id is not None:
                rec.parent_id = parent_id
            await inv.save(rec, inv.event("ContextStarted", rec), wait=False)
        try:
            value = await fn(DurableContext(inv, op_id))
        except Exception as exc:
            err = error_object(exc)
            rec.status, rec.error, rec.ended_ms = OpStatus.FAILED, err, self.now_ms()
            await inv.save(rec, inv.event("ContextFailed", rec, {"Error": error_payload(err)}))
            raise ChildContextError.from_error_object(err) from None
        text = serdes.serialize(value)
        details: dict[str, Any] = {"Result": payload(text)}
        rec.status, rec.result, rec.ended_ms = OpStatus.SUCCEEDED, text, self.now_ms()
        if len(text.encode()) > REPLAY_CHILDREN_BYTES:
            # As in the AWS SDK: keep the log small, rebuild the result on replay.
            rec.result, rec.extra = "", {**rec.extra, "replay_children": True}
            details = {"Result": payload(""), "ReplayChildren": True}
        await inv.save(rec, inv.event("ContextSucceeded", rec, details))
        return serdes.deserialize(text)

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
        return await run_batch(self, BatchSpec(
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
        return await run_batch(self, BatchSpec(
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
        op_id = self._next_id()
        rec = self._lookup(op_id, OpType.CHAINED_INVOKE, "ChainedInvoke", name)
        if rec is None:
            assert inv.start_child is not None
            text = (cfg.serdes_payload or JSON_SERDES).serialize(payload_value)
            child_id = f"{self.execution_id}.{op_id}"
            version = await inv.start_child(function_name, text, child_id,
                                            f"{self.execution_id}#{op_id}")
            rec = self._new(op_id, OpType.CHAINED_INVOKE, "ChainedInvoke", name)
            rec.extra = {"child": child_id, "function": function_name}
            details: dict[str, Any] = {"FunctionName": function_name, "Input": payload(text),
                                       "ExecutedVersion": version,
                                       "DurableExecutionArn": child_id}
            if tenant_id is not None:
                details["TenantId"] = tenant_id
            await inv.save(rec, inv.event("ChainedInvokeStarted", rec, details))
        if rec.status is OpStatus.SUCCEEDED:
            return None if rec.result is None else (
                cfg.serdes_result or JSON_SERDES).deserialize(rec.result)
        if rec.status is OpStatus.FAILED:
            raise InvokeError.from_error_object(rec.error or {})
        raise SuspendExecution(f"waiting for {function_name} ({rec.extra.get('child')})",
                               op_id=op_id)

    # -- wait for condition ---------------------------------------------------------------

    async def wait_for_condition(self, check: Callable[[Any], Any],
                                 config: WaitForConditionConfig,
                                 name: str | None = None) -> Any:
        """Poll `check(state) -> state` with durable delays until the strategy stops."""
        inv = self._inv
        serdes = config.serdes or JSON_SERDES
        op_id = self._next_id()
        rec = self._lookup(op_id, OpType.STEP, "WaitForCondition", name)
        if rec is not None:
            if rec.status is OpStatus.SUCCEEDED:
                return None if rec.result is None else serdes.deserialize(rec.result)
            if rec.status is OpStatus.FAILED:
                raise WaitForConditionError.from_error_object(rec.error or {})
            if rec.status is OpStatus.PENDING and (rec.next_attempt_ms or 0) > self.now_ms():
                raise SuspendExecution(f"condition {name or op_id!r} polls again later",
                                       rec.next_attempt_ms, op_id)
            state = config.initial_state if rec.result is None else serdes.deserialize(rec.result)
        else:
            rec = self._new(op_id, OpType.STEP, "WaitForCondition", name)
            state = config.initial_state
        rec.status, rec.attempt = OpStatus.STARTED, rec.attempt + 1
        await inv.save(rec, inv.event("StepStarted", rec), wait=False)
        try:
            value = check(state)
            if inspect.isawaitable(value):
                value = await value
            decision = config.wait_strategy(value, rec.attempt)
        except Exception as exc:
            err = error_object(exc)
            rec.status, rec.error, rec.ended_ms = OpStatus.FAILED, err, self.now_ms()
            await inv.save(rec, inv.event("StepFailed", rec, {
                "Error": error_payload(err), "RetryDetails": {"CurrentAttempt": rec.attempt}}))
            raise WaitForConditionError.from_error_object(err) from None
        text = serdes.serialize(value)
        rec.result = text
        if decision.should_continue:
            delay = max(1, decision.delay.seconds)
            rec.status, rec.next_attempt_ms = OpStatus.PENDING, self.now_ms() + delay * 1000
            await inv.save(rec, inv.event("StepSucceeded", rec, {
                "Result": payload(text),
                "RetryDetails": {"CurrentAttempt": rec.attempt,
                                 "NextAttemptDelaySeconds": delay}}))
            raise SuspendExecution(f"condition {name or op_id!r} polls again in {delay}s",
                                   rec.next_attempt_ms, op_id)
        rec.status, rec.ended_ms = OpStatus.SUCCEEDED, self.now_ms()
        await inv.save(rec, inv.event("StepSucceeded", rec, {
            "Result": payload(text), "RetryDetails": {"CurrentAttempt": rec.attempt}}))
        return serdes.deserialize(text)

    # -- humans ---------------------------------------------------------------------------

    async def _human_decision(self, name: str, error: DurableOperationError) -> dict[str, Any]:
        """Suspend until an operator decides (retry, resolve, abort); returns the decision."""
        inv = self._inv
        op_id = self._next_id()
        rec = self._lookup(op_id, OpType.CALLBACK, HUMAN, name)
        if rec is None:
            rec = self._new(op_id, OpType.CALLBACK, HUMAN, name,
                            callback_id=encode_callback_id(self.execution_id, op_id),
                            error=error.to_error_object())
            await inv.save(rec, inv.event("CallbackStarted", rec, {
                "CallbackId": rec.callback_id, "Reason": error.message}))
        if rec.status is not OpStatus.SUCCEEDED or rec.result is None:
            raise SuspendExecution(f"needs a human: {name} failed ({error.message})",
                                   op_id=op_id)
        decision: dict[str, Any] = json.loads(rec.result)
        if decision.get("action") == "abort":
            raise ExecutionAborted(decision.get("reason") or "aborted by an operator")
        return decision
