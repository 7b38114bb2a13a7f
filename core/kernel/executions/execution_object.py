"""The execution object: one durable object per execution, driven by its alarm.

Its log lives in the runtime database (shared group commit); its alarm points at
the next thing the service must do (start, a wait's end, a retry, a callback
timeout, the execution timeout). Each alarm completes what is due, then runs one
invocation of the handler; callbacks and operator actions arrive as RPCs and ask
for an invocation by setting the alarm to now. Events of one execution never
interleave because they are events of one object.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, cast

from alarmtop.core.kernel.executions import execution_hooks
from alarmtop.core.kernel.executions.context import DurableContext
from alarmtop.core.kernel.executions.invocation import Invocation
from alarmtop.core.kernel.objects.durable_object import AlarmInfo
from alarmtop.core.model.execution_errors import (
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
from alarmtop.core.model.operations import (
    ExecutionRecord,
    ExecutionStatus,
    OperationRecord,
    OpStatus,
    OpType,
    error_payload,
    iso,
    payload,
)
from alarmtop.core.model.replay import HUMAN, advance, advance_execution

if TYPE_CHECKING:
    from alarmtop.core.kernel.executions.engine import ExecutionEngine


from alarmtop.core.kernel.executions.execution_state import Loaded
from alarmtop.core.kernel.executions.operator_calls import OperatorCalls

EXIT_ERROR = {"ErrorType": "Runtime.ExitError",
              "ErrorMessage": "the invocation ended without completing (process died or crashed)"}


class ExecutionObject(OperatorCalls):
    """Hosts one execution. Subclassed per runtime with `engine` set."""

    engine: ExecutionEngine
    # An operator's abort, pause (and the other operator calls) end an invocation in
    # flight, as a failed attempt, rather than wait for a hung step until the alarm
    # timeout: the command answers within its deadline.
    interrupts_alarm_for = frozenset({"operate", "control"})

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
                              parent=parent, trace=self._carried(name, version))
        st = self._state = Loaded(rec, {}, 1)
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
        if st.record.paused:  # paused since the alarm was due: nothing runs until resume
            await self._rearm(st)
            return
        rec, now = st.record, self.ctx.now_ms()
        events: list[dict[str, Any]] = []
        changed: list[OperationRecord] = []
        if rec.in_invocation:  # the last invocation died without completing
            events.append(self._event(st, "InvocationCompleted", None, {
                "Error": error_payload(EXIT_ERROR)}))
            rec.in_invocation, rec.invoke_requested = False, True
        fired = self._complete_due(st, now, events, changed)
        if changed:
            self._ended(st, changed)
        if rec.timeout_at_ms is not None and now >= rec.timeout_at_ms:
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

    def _complete_due(self, st: Loaded, now: int, events: list[dict[str, Any]],
                      changed: list[OperationRecord]) -> bool:
        """Complete waits, time out callbacks, ready retries: the service's timers."""
        fired = False
        for op in sorted(st.ops.values(), key=lambda o: min(o.deadlines(), default=0)):
            if op.status is OpStatus.PENDING and (op.next_attempt_ms or now + 1) <= now:
                changed.append(advance(op, OpStatus.READY))
                fired = True
            elif op.status is OpStatus.STARTED and op.type is OpType.WAIT and (
                    op.scheduled_end_ms or now + 1) <= now:
                advance(op, OpStatus.SUCCEEDED).ended_ms = now
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
                    advance(op, OpStatus.TIMED_OUT).ended_ms = now
                    op.error = {"ErrorType": kind, "ErrorMessage": f"callback timed out ({kind})"}
                    changed.append(op)
                    events.append(self._event(st, "CallbackTimedOut", op,
                                              {"Error": error_payload(op.error)}))
                    fired = True
        return fired

    async def _invoke(self, st: Loaded, changed: list[OperationRecord],
                      events: list[dict[str, Any]]) -> None:
        """Run the handler once, after checkpointing what the alarm completed."""
        died: BaseException | None = None
        try:
            await self._invoke_once(st, changed, events)
        except BaseException as exc:
            died = exc
            # Cut off (the alarm timeout, an operator's interrupt) or failed: what it
            # wrote before is in the log, not in the state held here (its next event
            # ids, say). The next event loads the state again from the log.
            self._state = None
            raise
        finally:
            self._chain = None  # its writes are queued or deferred: the chain is theirs
            told, self._told = self._told, None
            if told is not None:
                rec = st.record
                execution_hooks.invocation_ended(self.engine.hooks_of(rec.name, rec.version), told,
                                           rec, self.ctx.now_ms, died)

    async def _invoke_once(self, st: Loaded, changed: list[OperationRecord],
                           events: list[dict[str, Any]]) -> None:
        rec, engine = st.record, self.engine
        fn = engine.handler(rec.name, rec.version)
        started = self.ctx.now_ms()
        rec.in_invocation, rec.invoke_requested = True, False
        rec.status = advance_execution(rec.status, ExecutionStatus.RUNNING, rec.id)
        rec.invocations += 1
        # Queued, not awaited: each later write of this invocation queues behind it, so
        # whatever the invocation makes durable implies it (an at-most-once step awaits
        # its start before its body runs). A death before it lands leaves the log as if
        # the invocation never began, and the alarm, still pending, runs it again.
        hooks = engine.hooks_of(rec.name, rec.version)
        inv = Invocation(rec, st.ops, st.next_event_id, engine.store, engine.clock,
                         engine.faults, engine.rng, st.marks, hooks=hooks,
                         announce=engine.deliver_history, start_child=engine.start_child)
        self._chain = inv.chain
        begun = self._queue(st, changed, events, inv.chain)
        if hooks.on_invocation_start or hooks.on_invocation_end:
            self._told = execution_hooks.invocation_started(hooks, rec, started)
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
        marks = inv.take_marks()  # taken since its last checkpoint: they land with its end
        rec.has_marks = rec.has_marks or bool(marks)
        if suspended is not None:
            rec.status = advance_execution(rec.status, status, rec.id)
            rec.blocked_on = suspended
            self._defer(st, [], events, marks=marks)
            engine.announce(rec, f"execution.{status.value}", reason=suspended)
            await self._rearm(st)
            return
        await self._finish(st, status, result, error, events, [], marks)


    # -- RPC: callbacks -------------------------------------------------------------------

    async def callback(self, op_id: str, callback_id: str, kind: str, result: str | None,
                       error: dict[str, Any] | None) -> dict[str, Any]:
        st = await self._load()
        op = None if st is None else st.ops.get(op_id)
        if st is None or op is None or op.type is not OpType.CALLBACK:
            raise UnknownCallback(callback_id)
        if op.sub_type == HUMAN:
            raise InvalidExecutionState(
                f"callback {callback_id!r} is execution {st.record.id!r} waiting for an "
                f"operator's decision on {op.name!r}; use retry_compensation, resolve or abort")
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
            advance(op, OpStatus.SUCCEEDED).result = result
            ev = self._event(st, "CallbackSucceeded", op, {"Result": payload(result)})
        else:
            advance(op, OpStatus.FAILED).error = error
            ev = self._event(st, "CallbackFailed", op, {"Error": error_payload(error)})
        op.ended_ms = now
        st.record.invoke_requested = True
        await self._save_and_rearm(st, [op], [ev])
        self._ended(st, [op])
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
            advance(op, OpStatus.SUCCEEDED).result = result
            ev = self._event(st, "ChainedInvokeSucceeded", op, {"Result": payload(result)})
        else:
            advance(op, OpStatus.FAILED).error = error
            ev = self._event(st, "ChainedInvokeFailed", op, {"Error": error_payload(error)})
        st.record.invoke_requested = True
        await self._save_and_rearm(st, [op], [ev])
        self._ended(st, [op])

def make_execution_class(engine: ExecutionEngine) -> type[ExecutionObject]:
    """The per-runtime class named `Execution` whose instances host executions: native
    ones, and those of the AWS SDK's handlers (`aws.outside`), each its own way."""
    from alarmtop.core.kernel.executions.aws.outside import AwsOutside
    return cast(type[ExecutionObject],
                type("Execution", (AwsOutside, ExecutionObject), {"engine": engine}))

