"""The execution object: one durable object per execution, driven by its alarm.

Its log lives in the runtime database (shared group commit); its alarm points at
the next thing the service must do (start, a wait's end, a retry, a callback
timeout, the execution timeout). Each alarm completes what is due, then runs one
invocation of the handler; callbacks and operator actions arrive as RPCs and ask
for an invocation by setting the alarm to now. Events of one execution never
interleave because they are events of one object.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from alarmtop.core.durable.context import HUMAN, DurableContext, Invocation
from alarmtop.core.durable.errors import (
    CallbackAlreadyCompleted,
    CheckpointFailed,
    ExecutionAborted,
    InvalidExecutionState,
    InvocationCrash,
    NonDeterministicExecutionError,
    SuspendExecution,
    UnknownCallback,
    error_object,
)
from alarmtop.core.durable.operations import (
    ExecutionRecord,
    ExecutionStatus,
    OperationRecord,
    OpStatus,
    OpType,
    error_payload,
    iso,
    make_event,
    payload,
)
from alarmtop.core.objects.base import AlarmInfo, DurableObject, ObjectContext
from alarmtop.core.storage.interface import LogChain

if TYPE_CHECKING:
    from alarmtop.core.durable.service import ExecutionEngine

EXIT_ERROR = {"ErrorType": "Runtime.ExitError",
              "ErrorMessage": "the invocation ended without completing (process died or crashed)"}


@dataclass
class _Loaded:
    record: ExecutionRecord
    ops: dict[str, OperationRecord]
    next_event_id: int


class ExecutionObject(DurableObject):
    """Hosts one execution. Subclassed per runtime with `engine` set."""

    engine: ExecutionEngine

    def __init__(self, ctx: ObjectContext, env: Any) -> None:
        super().__init__(ctx, env)
        self._state: _Loaded | None = None
        # The running invocation's log chain: what this event defers lands after the
        # invocation's own checkpoints, or not at all.
        self._chain: LogChain | None = None

    # -- loading and saving ---------------------------------------------------------------

    async def _load(self) -> _Loaded | None:
        if self._state is None:
            store = self.engine.store
            record = await store.get(self.ctx.id)
            if record is None:
                return None
            ops = {op.id: op for op in await store.operations(self.ctx.id)}
            self._state = _Loaded(record, ops, await store.max_event_id(self.ctx.id) + 1)
        return self._state

    async def _state_or_fail(self) -> _Loaded:
        st = await self._load()
        if st is None:
            from alarmtop.core.durable.errors import UnknownExecution
            raise UnknownExecution(repr(self.ctx.id), "start it with executions.start()")
        return st

    def _event(self, st: _Loaded, event_type: str, op: OperationRecord | None = None,
               details: dict[str, Any] | None = None) -> dict[str, Any]:
        ev = make_event(st.next_event_id, event_type, self.ctx.now_ms(), op, details)
        st.next_event_id += 1
        self.engine.announce_history(st.record, ev)
        return ev

    def _queue(self, st: _Loaded, ops: Sequence[OperationRecord] = (),
               events: Sequence[dict[str, Any]] = (),
               chain: LogChain | None = None) -> asyncio.Future[None]:
        """Queue a checkpoint of the record, `ops` and `events`; await it for durability."""
        st.record.updated_ms = self.ctx.now_ms()
        for op in ops:
            st.ops[op.id] = op
        return self.engine.store.checkpoint(st.record.id, st.record, ops, events, chain)

    def _defer(self, st: _Loaded, ops: Sequence[OperationRecord] = (),
               events: Sequence[dict[str, Any]] = ()) -> None:
        """Checkpoint the record, `ops` and `events` with the event's own commit (with
        the alarm the event sets): the log and the alarm that acts on it land together."""
        st.record.updated_ms = self.ctx.now_ms()
        for op in ops:
            st.ops[op.id] = op
        self.ctx.storage.defer_write(
            self.engine.store.checkpoint_write(st.record.id, st.record, ops, events,
                                               self._chain))

    def _next_alarm(self, st: _Loaded) -> int | None:
        """The next thing the service must do for the execution, if anything."""
        rec = st.record
        if rec.finished:
            return None
        times = [t for op in st.ops.values() for t in op.deadlines()]
        if rec.timeout_s:
            times.append(rec.created_ms + rec.timeout_s * 1000)
        if rec.invoke_requested and not rec.human_hold:
            times.append(self.ctx.now_ms())
        return min(times) if times else None

    async def _rearm(self, st: _Loaded) -> None:
        """Point the alarm at `_next_alarm` when the running alarm attempt ends."""
        at = self._next_alarm(st)
        if at is None:
            await self.ctx.storage.delete_alarm()
        else:
            await self.ctx.storage.set_alarm(at)

    async def _save_and_rearm(self, st: _Loaded, ops: Sequence[OperationRecord] = (),
                              events: Sequence[dict[str, Any]] = ()) -> None:
        """Checkpoint, and point the alarm at what comes next, in the event's one commit
        (a call's, or the alarm attempt's end)."""
        self._defer(st, ops, events)
        await self._rearm(st)

    # -- RPC: start -----------------------------------------------------------------------

    async def begin(self, name: str, version: str, input_text: str, timeout_s: int | None,
                    parent: str | None = None) -> dict[str, Any]:
        existing = await self._load()
        if existing is not None:
            if existing.record.name != name:
                raise InvalidExecutionState(
                    f"execution id {self.ctx.id!r} is already used by {existing.record.name!r}; "
                    "choose another execution_id")
            return {"execution_id": self.ctx.id, "created": False}
        now = self.ctx.now_ms()
        rec = ExecutionRecord(self.ctx.id, name, version, ExecutionStatus.RUNNING, input_text,
                              now, now, timeout_s=timeout_s, invoke_requested=True,
                              parent=parent)
        st = self._state = _Loaded(rec, {}, 1)
        details: dict[str, Any] = {"Input": payload(input_text)}
        if timeout_s:
            details["ExecutionTimeout"] = timeout_s
        await self._save_and_rearm(st, [], [self._event(st, "ExecutionStarted", None, details)])
        self.engine.announce(rec, "execution.started")
        return {"execution_id": self.ctx.id, "created": True}

    # -- the alarm: timers, then one invocation -------------------------------------------

    async def alarm(self, info: AlarmInfo) -> None:
        st = await self._load()
        if st is None or st.record.finished:
            return
        rec, now = st.record, self.ctx.now_ms()
        events: list[dict[str, Any]] = []
        changed: list[OperationRecord] = []
        if rec.in_invocation:  # the last invocation died without completing
            events.append(self._event(st, "InvocationCompleted", None, {
                "Error": error_payload(EXIT_ERROR)}))
            rec.in_invocation, rec.invoke_requested = False, True
        fired = self._complete_due(st, now, events, changed)
        if rec.timeout_s and now >= rec.created_ms + rec.timeout_s * 1000:
            await self._finish(st, ExecutionStatus.TIMED_OUT, None, {
                "ErrorType": "Execution.Timeout",
                "ErrorMessage": f"execution ran longer than {rec.timeout_s}s"}, events, changed)
            return
        if fired:
            rec.invoke_requested = True
        if rec.human_hold or not rec.invoke_requested:
            if events or changed:
                self._defer(st, changed, events)
            await self._rearm(st)
            return
        await self._invoke(st, changed, events)

    def _complete_due(self, st: _Loaded, now: int, events: list[dict[str, Any]],
                      changed: list[OperationRecord]) -> bool:
        """Complete waits, time out callbacks, ready retries: the service's timers."""
        fired = False
        for op in sorted(st.ops.values(), key=lambda o: min(o.deadlines(), default=0)):
            if op.status is OpStatus.PENDING and (op.next_attempt_ms or now + 1) <= now:
                op.status = OpStatus.READY
                changed.append(op)
                fired = True
            elif op.status is OpStatus.STARTED and op.type is OpType.WAIT and (
                    op.scheduled_end_ms or now + 1) <= now:
                op.status, op.ended_ms = OpStatus.SUCCEEDED, now
                changed.append(op)
                events.append(self._event(st, "WaitSucceeded", op, {"Duration": op.duration_s}))
                fired = True
            elif op.status is OpStatus.STARTED and op.type is OpType.CALLBACK:
                kind = None
                if op.timeout_at_ms is not None and op.timeout_at_ms <= now:
                    kind = "Callback.Timeout"
                elif op.heartbeat_at_ms is not None and op.heartbeat_at_ms <= now:
                    kind = "Callback.Heartbeat"
                if kind is not None:
                    op.status, op.ended_ms = OpStatus.TIMED_OUT, now
                    op.error = {"ErrorType": kind, "ErrorMessage": f"callback timed out ({kind})"}
                    changed.append(op)
                    events.append(self._event(st, "CallbackTimedOut", op,
                                              {"Error": error_payload(op.error)}))
                    fired = True
        return fired

    async def _invoke(self, st: _Loaded, changed: list[OperationRecord],
                      events: list[dict[str, Any]]) -> None:
        """Run the handler once, after checkpointing what the alarm completed."""
        try:
            await self._invoke_once(st, changed, events)
        finally:
            self._chain = None  # its writes are queued or deferred: the chain is theirs

    async def _invoke_once(self, st: _Loaded, changed: list[OperationRecord],
                           events: list[dict[str, Any]]) -> None:
        rec, engine = st.record, self.engine
        fn = engine.handler(rec.name, rec.version)
        started = self.ctx.now_ms()
        rec.in_invocation, rec.invoke_requested = True, False
        rec.status, rec.invocations = ExecutionStatus.RUNNING, rec.invocations + 1
        # Queued, not awaited: each later write of this invocation queues behind it, so
        # whatever the invocation makes durable implies it (an at-most-once step awaits
        # its start before its body runs). A death before it lands leaves the log as if
        # the invocation never began, and the alarm, still pending, runs it again.
        inv = Invocation(rec, st.ops, st.next_event_id, engine.store, engine.clock,
                         engine.faults, engine.rng)
        self._chain = inv.chain
        begun = self._queue(st, changed, events, inv.chain)
        inv.announce = engine.deliver_history
        inv.start_child = engine.start_child
        outcome: tuple[ExecutionStatus, str | None, dict[str, Any] | None]
        # Why it suspended (None: it did not). The reason, not the exception: kept in
        # this frame, the exception and its traceback (which holds this frame) would
        # form a cycle that keeps the execution's whole object graph until a full
        # garbage collection, and those collections were the tail of wake lateness.
        suspended: str | None = None
        try:
            value = await fn.fn(json.loads(rec.input), DurableContext(inv))
            outcome = (ExecutionStatus.SUCCEEDED, json.dumps(value), None)
        except SuspendExecution as exc:
            suspended = exc.reason
            human = exc.op_id is not None and st.ops.get(exc.op_id, None) is not None and \
                st.ops[exc.op_id].sub_type == HUMAN
            outcome = (ExecutionStatus.NEEDS_HUMAN if human else ExecutionStatus.SUSPENDED,
                       None, None)
        except InvocationCrash as exc:
            # As if the process died: queued checkpoints land, nothing else is written,
            # and the alarm counts a failed attempt and retries, as after a real death.
            await engine.store.flush()
            self._state = None
            raise RuntimeError(f"invocation abandoned: {exc}") from None
        except CheckpointFailed as exc:
            # A checkpoint was refused (and every one after it in this invocation): the
            # attempt fails and runs again from what landed, counted.
            self._state = None
            raise RuntimeError(f"invocation abandoned: a checkpoint could not be written "
                               f"({exc})") from None
        except NonDeterministicExecutionError as exc:
            engine.announce(rec, "execution.nondeterministic", op_id=exc.op_id,
                            error=exc.message)
            outcome = (ExecutionStatus.FAILED, None, {
                "ErrorType": "NonDeterministicExecutionError", "ErrorMessage": exc.message})
        except ExecutionAborted as exc:
            outcome = (ExecutionStatus.ABORTED, None, {"ErrorType": "ExecutionAborted",
                                                       "ErrorMessage": str(exc)})
        except Exception as exc:
            outcome = (ExecutionStatus.FAILED, None, error_object(exc))
        finally:
            # Landed by now unless the handler never waited for a write; a failure to
            # record the start fails this attempt, and the alarm retries it.
            await begun
        st.next_event_id = inv.next_event_id
        rec.in_invocation = False
        rec.saga = [entry for saga in inv.sagas for entry in saga.view()]
        events = [self._event(st, "InvocationCompleted", None, {
            "StartTimestamp": iso(started), "EndTimestamp": iso(self.ctx.now_ms()),
            "RequestId": f"{rec.id}/{rec.invocations}"})]
        status, result, error = outcome
        if suspended is not None:
            rec.status, rec.blocked_on = status, suspended
            self._defer(st, [], events)
            engine.announce(rec, f"execution.{status.value}", reason=suspended)
            await self._rearm(st)
            return
        await self._finish(st, status, result, error, events, [])

    async def _finish(self, st: _Loaded, status: ExecutionStatus, result: str | None,
                      error: dict[str, Any] | None, events: list[dict[str, Any]],
                      changed: list[OperationRecord]) -> None:
        rec = st.record
        rec.status, rec.result, rec.error = status, result, error
        rec.ended_ms, rec.blocked_on, rec.invoke_requested = self.ctx.now_ms(), None, False
        if status is ExecutionStatus.SUCCEEDED:
            events.append(self._event(st, "ExecutionSucceeded", None,
                                      {"Result": payload(result)}))
        elif status is ExecutionStatus.TIMED_OUT:
            events.append(self._event(st, "ExecutionTimedOut", None,
                                      {"Error": error_payload(error)}))
        elif status is ExecutionStatus.ABORTED:
            events.append(self._event(st, "ExecutionStopped", None,
                                      {"Error": error_payload(error)}))
        else:
            events.append(self._event(st, "ExecutionFailed", None,
                                      {"Error": error_payload(error)}))
        await self._save_and_rearm(st, changed, events)
        self.engine.announce(rec, f"execution.{status.value}",
                             error=(error or {}).get("ErrorMessage"))
        if rec.parent:
            await self.engine.child_finished(rec)

    # -- RPC: callbacks -------------------------------------------------------------------

    async def callback(self, op_id: str, callback_id: str, kind: str, result: str | None,
                       error: dict[str, Any] | None) -> dict[str, Any]:
        st = await self._load()
        op = None if st is None else st.ops.get(op_id)
        if st is None or op is None or op.type is not OpType.CALLBACK or op.sub_type == HUMAN:
            raise UnknownCallback(callback_id)
        if op.done:
            raise CallbackAlreadyCompleted(callback_id, op.status.value.lower())
        if st.record.finished:
            raise CallbackAlreadyCompleted(callback_id, f"part of a {st.record.status.value} "
                                           "execution")
        now = self.ctx.now_ms()
        if kind == "heartbeat":
            if op.heartbeat_timeout_s:
                op.heartbeat_at_ms = now + op.heartbeat_timeout_s * 1000
                await self._save_and_rearm(st, [op])
            return {"status": "STARTED"}
        if kind == "success":
            op.status, op.result = OpStatus.SUCCEEDED, result
            ev = self._event(st, "CallbackSucceeded", op, {"Result": payload(result)})
        else:
            op.status, op.error = OpStatus.FAILED, error
            ev = self._event(st, "CallbackFailed", op, {"Error": error_payload(error)})
        op.ended_ms = now
        st.record.invoke_requested = True
        await self._save_and_rearm(st, [op], [ev])
        return {"status": op.status.value}

    # -- RPC: child executions (invoke) ---------------------------------------------------

    async def child_done(self, op_id: str, status: str, result: str | None,
                         error: dict[str, Any] | None) -> None:
        st = await self._load()
        op = None if st is None else st.ops.get(op_id)
        if st is None or op is None or op.done or st.record.finished:
            return
        op.ended_ms = self.ctx.now_ms()
        if status == ExecutionStatus.SUCCEEDED.value:
            op.status, op.result = OpStatus.SUCCEEDED, result
            ev = self._event(st, "ChainedInvokeSucceeded", op, {"Result": payload(result)})
        else:
            op.status, op.error = OpStatus.FAILED, error
            ev = self._event(st, "ChainedInvokeFailed", op, {"Error": error_payload(error)})
        st.record.invoke_requested = True
        await self._save_and_rearm(st, [op], [ev])

    # -- RPC: operators -------------------------------------------------------------------

    def _waiting_human(self, st: _Loaded) -> OperationRecord | None:
        for op in st.ops.values():
            if op.sub_type == HUMAN and op.status is OpStatus.STARTED:
                return op
        return None

    async def _decide(self, st: _Loaded, op: OperationRecord, decision: dict[str, Any]) -> None:
        op.status, op.result, op.ended_ms = (OpStatus.SUCCEEDED, json.dumps(decision),
                                             self.ctx.now_ms())
        ev = self._event(st, "CallbackSucceeded", op, {"Result": payload(op.result)})
        st.record.invoke_requested = True
        if st.record.status is ExecutionStatus.NEEDS_HUMAN and not st.record.human_hold:
            # Decided: the human no longer holds it up, and its next invocation is due now.
            st.record.status, st.record.blocked_on = ExecutionStatus.RUNNING, None
        await self._save_and_rearm(st, [op], [ev])

    async def operate(self, action: str, text: str | None, actor: str) -> dict[str, Any]:
        st = await self._state_or_fail()
        rec = st.record
        if rec.finished:
            raise InvalidExecutionState(f"execution {rec.id!r} is {rec.status.value}; there is "
                                        f"nothing to {action.replace('_', ' ')}")
        human = self._waiting_human(st)
        if action == "retry_compensation":
            if human is None:
                raise InvalidExecutionState(
                    f"execution {rec.id!r} is {rec.status.value}, not waiting for a human on a "
                    "failed compensation; nothing to retry")
            await self._decide(st, human, {"action": "retry", "by": actor})
        elif action == "resolve":
            if human is not None:
                await self._decide(st, human, {"action": "resolve", "note": text, "by": actor})
            elif rec.human_hold:
                rec.human_hold, rec.invoke_requested = None, True
                await self._save_and_rearm(st)
            else:
                raise InvalidExecutionState(
                    f"execution {rec.id!r} is {rec.status.value}; resolve applies to an execution "
                    "that needs a human")
        elif action == "abort":
            if human is not None:
                human.status, human.result = OpStatus.SUCCEEDED, json.dumps(
                    {"action": "abort", "reason": text, "by": actor})
            await self._finish(st, ExecutionStatus.ABORTED, None, {
                "ErrorType": "ExecutionAborted", "ErrorMessage": text or "aborted by an operator"},
                [], [human] if human is not None else [])
        elif action == "hand_to_human":
            rec.human_hold, rec.status = text or "handed to a human", ExecutionStatus.NEEDS_HUMAN
            self._defer(st)
            self.engine.announce(rec, "execution.needs_human", reason=rec.human_hold)
        else:
            raise InvalidExecutionState(f"unknown operator action {action!r}")
        return {"execution_id": rec.id, "status": rec.status.value}


def make_execution_class(engine: ExecutionEngine) -> type[ExecutionObject]:
    """The per-runtime class named `Execution` whose instances host executions."""
    return type("Execution", (ExecutionObject,), {"engine": engine})

