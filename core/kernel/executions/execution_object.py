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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from alarmtop.core.kernel.executions import execution_hooks
from alarmtop.core.kernel.executions.context import DurableContext
from alarmtop.core.kernel.executions.invocation import Invocation
from alarmtop.core.kernel.executions.replay_check import replay_check
from alarmtop.core.kernel.objects.durable_object import AlarmInfo, DurableObject, ObjectContext
from alarmtop.core.model import hook_info
from alarmtop.core.model.callback_ids import encode_callback_id
from alarmtop.core.model.execution_errors import (
    CallbackAlreadyCompleted,
    CheckpointFailed,
    ExecutionAborted,
    InvalidExecutionState,
    InvocationCrash,
    NonDeterministicExecutionError,
    ReplayDivergence,
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
    make_event,
    payload,
)
from alarmtop.core.model.replay import HUMAN, advance, advance_execution, redrive_plan
from alarmtop.core.model.storage_values import LogChain

if TYPE_CHECKING:
    from alarmtop.core.kernel.executions.engine import ExecutionEngine

EXIT_ERROR = {"ErrorType": "Runtime.ExitError",
              "ErrorMessage": "the invocation ended without completing (process died or crashed)"}


@dataclass
class _Loaded:
    record: ExecutionRecord
    ops: dict[str, OperationRecord]
    next_event_id: int
    marks: dict[str, str] = field(default_factory=dict)  # recorded now()/random() values


class ExecutionObject(DurableObject):
    """Hosts one execution. Subclassed per runtime with `engine` set."""

    engine: ExecutionEngine

    def __init__(self, ctx: ObjectContext, env: Any) -> None:
        super().__init__(ctx, env)
        self._state: _Loaded | None = None
        # The running invocation's log chain: what this event defers lands after the
        # invocation's own checkpoints, or not at all.
        self._chain: LogChain | None = None
        self._told: hook_info.InvocationStartInfo | None = None  # the invocation hook's

    # -- loading and saving ---------------------------------------------------------------

    async def _load(self) -> _Loaded | None:
        if self._state is None:
            store = self.engine.store
            record = await store.get(self.ctx.id)
            if record is None:
                return None
            ops = {op.id: op for op in await store.operations(self.ctx.id)}
            marks = await store.marks(self.ctx.id) if record.has_marks else {}
            self._state = _Loaded(record, ops, await store.max_event_id(self.ctx.id) + 1,
                                  marks)
        return self._state

    async def _state_or_fail(self) -> _Loaded:
        st = await self._load()
        if st is None:
            from alarmtop.core.model.execution_errors import UnknownExecution
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
               events: Sequence[dict[str, Any]] = (), *,
               marks: Mapping[str, str] | None = None, drop_ops: Sequence[str] = (),
               drop_marks: Sequence[str] = ()) -> None:
        """Checkpoint the record, `ops` and `events` with the event's own commit (with
        the alarm the event sets): the log and the alarm that acts on it land together."""
        st.record.updated_ms = self.ctx.now_ms()
        for op in ops:
            st.ops[op.id] = op
        self.ctx.storage.defer_write(
            self.engine.store.checkpoint_write(st.record.id, st.record, ops, events,
                                               self._chain, marks=marks, drop_ops=drop_ops,
                                               drop_marks=drop_marks))

    def _next_alarm(self, st: _Loaded) -> int | None:
        """The next thing the service must do for the execution, if anything."""
        rec = st.record
        if rec.finished or rec.paused:
            return None  # a paused execution runs nothing; its timers wait for resume
        times = [t for op in st.ops.values() for t in op.deadlines()]
        if rec.timeout_at_ms is not None:
            times.append(rec.timeout_at_ms)
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
                              events: Sequence[dict[str, Any]] = (), *,
                              marks: Mapping[str, str] | None = None) -> None:
        """Checkpoint, and point the alarm at what comes next, in the event's one commit
        (a call's, or the alarm attempt's end)."""
        self._defer(st, ops, events, marks=marks)
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
                              parent=parent, trace=self._carried(name, version))
        st = self._state = _Loaded(rec, {}, 1)
        details: dict[str, Any] = {"Input": payload(input_text)}
        if timeout_s:
            details["ExecutionTimeout"] = timeout_s
        await self._save_and_rearm(st, [], [self._event(st, "ExecutionStarted", None, details)])
        self.engine.announce(rec, "execution.started")
        return {"execution_id": self.ctx.id, "created": True}

    def _carried(self, name: str, version: str) -> dict[str, str] | None:
        """What the plugins carry from the starter to the invocations (its trace)."""
        return self.engine.hooks_of(name, version).propagation()

    def _ended(self, st: _Loaded, ops: Sequence[OperationRecord]) -> None:
        """The service completed `ops` in this event: told once its commit landed."""
        rec = st.record
        hooks = self.engine.hooks_of(rec.name, rec.version)
        if hooks.on_operation_end:
            execution_hooks.operations_ended_after_commit(hooks, rec, [op for op in ops if op.done],
                                                    self.ctx.now_ms)

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

    def _complete_due(self, st: _Loaded, now: int, events: list[dict[str, Any]],
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

    async def _invoke(self, st: _Loaded, changed: list[OperationRecord],
                      events: list[dict[str, Any]]) -> None:
        """Run the handler once, after checkpointing what the alarm completed."""
        died: BaseException | None = None
        try:
            await self._invoke_once(st, changed, events)
        except BaseException as exc:
            died = exc
            raise
        finally:
            self._chain = None  # its writes are queued or deferred: the chain is theirs
            told, self._told = self._told, None
            if told is not None:
                rec = st.record
                execution_hooks.invocation_ended(self.engine.hooks_of(rec.name, rec.version), told,
                                           rec, self.ctx.now_ms, died)

    async def _invoke_once(self, st: _Loaded, changed: list[OperationRecord],
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

    async def _finish(self, st: _Loaded, status: ExecutionStatus, result: str | None,
                      error: dict[str, Any] | None, events: list[dict[str, Any]],
                      changed: list[OperationRecord],
                      marks: Mapping[str, str] | None = None) -> None:
        rec = st.record
        rec.status = advance_execution(rec.status, status, rec.id)
        rec.result, rec.error, rec.paused, rec.paused_ms = result, error, None, None
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
        await self._save_and_rearm(st, changed, events, marks=marks)
        self.engine.announce(rec, f"execution.{status.value}",
                             error=(error or {}).get("ErrorMessage"))
        if rec.parent:
            await self.engine.child_finished(rec)

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

    # -- RPC: operators -------------------------------------------------------------------

    def _waiting_human(self, st: _Loaded) -> OperationRecord | None:
        for op in st.ops.values():
            if op.sub_type == HUMAN and op.status is OpStatus.STARTED:
                return op
        return None

    async def _decide(self, st: _Loaded, op: OperationRecord, decision: dict[str, Any]) -> None:
        advance(op, OpStatus.SUCCEEDED)
        op.result, op.ended_ms = json.dumps(decision), self.ctx.now_ms()
        ev = self._event(st, "CallbackSucceeded", op, {"Result": payload(op.result)})
        rec = st.record
        rec.invoke_requested = True
        if rec.status is ExecutionStatus.NEEDS_HUMAN and not rec.human_hold:
            # Decided: the human no longer holds it up, and its next invocation is due now.
            rec.status = advance_execution(rec.status, ExecutionStatus.RUNNING, rec.id)
            rec.blocked_on = None
        await self._save_and_rearm(st, [op], [ev])
        self._ended(st, [op])

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
                advance(human, OpStatus.SUCCEEDED).result = json.dumps(
                    {"action": "abort", "reason": text, "by": actor})
                self._ended(st, [human])
            await self._finish(st, ExecutionStatus.ABORTED, None, {
                "ErrorType": "ExecutionAborted", "ErrorMessage": text or "aborted by an operator"},
                [], [human] if human is not None else [])
        elif action == "hand_to_human":
            rec.status = advance_execution(rec.status, ExecutionStatus.NEEDS_HUMAN, rec.id)
            rec.human_hold = text or "handed to a human"
            self._defer(st)
            self.engine.announce(rec, "execution.needs_human", reason=rec.human_hold)
        else:
            raise InvalidExecutionState(f"unknown operator action {action!r}")
        return {"execution_id": rec.id, "status": rec.status.value}

    # -- RPC: pause, redrive, fork ---------------------------------------------------------

    async def control(self, action: str, reason: str | None, actor: str) -> dict[str, Any]:
        """Pause (nothing runs; timers keep their due times) or resume (what fell due
        meanwhile runs now). The status is left as it is."""
        st = await self._state_or_fail()
        rec = st.record
        if rec.finished:
            raise InvalidExecutionState(f"execution {rec.id!r} is {rec.status.value}; there is "
                                        f"nothing to {action}")
        if action == "pause":
            if rec.paused:
                raise InvalidExecutionState(f"execution {rec.id!r} is already paused "
                                            f"({rec.paused}); resume it first")
            rec.paused, rec.paused_ms = reason or f"paused by {actor}", self.ctx.now_ms()
        elif action == "resume":
            if not rec.paused:
                raise InvalidExecutionState(f"execution {rec.id!r} is not paused; nothing to "
                                            "resume")
            rec.paused = rec.paused_ms = None
        else:
            raise InvalidExecutionState(f"unknown control action {action!r}")
        await self._save_and_rearm(st)
        self.engine.announce(rec, f"execution.{action}d", reason=reason, by=actor)
        return {"execution_id": rec.id, "status": rec.status.value, "paused": bool(rec.paused)}

    async def move_timer(self, op_id: str | None, kind: str, at_ms: int,
                         actor: str) -> dict[str, Any]:
        """Move one of the execution's timers (a row of `timers`) to `at_ms`: fire it now
        or snooze it. Nothing runs here: the alarm is pointed at the soonest timer, and
        a paused execution keeps the new time for its resume."""
        from alarmtop.core.model.execution_timers import (
            EXECUTION_TIMER,
            execution_timers,
            op_timers,
        )
        st = await self._state_or_fail()
        rec = st.record
        if rec.finished:
            raise InvalidExecutionState(f"execution {rec.id!r} is {rec.status.value}; it has no "
                                        "timers")
        ops: list[OperationRecord] = []
        if not op_id or op_id == EXECUTION_TIMER:
            if not any(t.kind == kind for t in execution_timers(rec)):
                raise InvalidExecutionState(f"execution {rec.id!r} has no {kind} timer")
            # The timeout counts from its start: moving the start moves the deadline.
            start = rec.created_ms if rec.timeout_start_ms is None else rec.timeout_start_ms
            before = rec.timeout_at_ms
            assert before is not None
            rec.timeout_start_ms = start + (at_ms - before)
        else:
            op = st.ops.get(op_id)
            if op is None or not any(t.kind == kind for t in op_timers(op)):
                raise InvalidExecutionState(f"execution {rec.id!r} has no pending {kind} timer "
                                            f"on operation {op_id!r} (it may have fired)")
            before = {"wait": op.scheduled_end_ms, "retry": op.next_attempt_ms,
                      "poll": op.next_attempt_ms, "callback_timeout": op.timeout_at_ms,
                      "heartbeat": op.heartbeat_at_ms}.get(kind)
            if kind == "wait":
                op.scheduled_end_ms = at_ms
            elif kind in ("retry", "poll"):
                op.next_attempt_ms = at_ms
            elif kind == "callback_timeout":
                op.timeout_at_ms = at_ms
            else:
                op.heartbeat_at_ms = at_ms
            ops.append(op)
        await self._save_and_rearm(st, ops)
        self.engine.announce(rec, "execution.timer_moved", op_id=op_id or None, kind=kind,
                             previous_ms=before, due_ms=at_ms, by=actor)
        return {"execution_id": rec.id, "op_id": op_id or None, "kind": kind,
                "previous_ms": before, "due_ms": at_ms, "paused": bool(rec.paused)}

    async def redrive(self, version: str | None, force: bool, deadline_s: float,
                      actor: str) -> dict[str, Any]:
        """Carry a failed or timed-out execution on from its first failed operation:
        results before it are kept, it and what follows are reset, the timeout
        restarts. Refused when the replay check fails, unless `force`."""
        st = await self._state_or_fail()
        rec, engine = st.record, self.engine
        if rec.status not in (ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT):
            raise InvalidExecutionState(
                f"execution {rec.id!r} is {rec.status.value}; only a failed or timed-out "
                "execution can be redriven (fork it to run a copy from a step)")
        fn = engine.pick_version(rec.name, rec.version, version)
        plan = redrive_plan(st.ops.values(), st.marks)
        report = await replay_check(
            fn, rec, {i: st.ops[i] for i in plan.kept}, {k: st.marks[k] for k in plan.kept_marks},
            store=engine.store, clock=engine.clock, faults=engine.faults, deadline_s=deadline_s)
        if not report["clean"] and not force:
            raise ReplayDivergence(rec.id, "redrive", report)
        for op_id in plan.reset:
            del st.ops[op_id]
        for key in plan.reset_marks:
            del st.marks[key]
        now = self.ctx.now_ms()
        rec.status = advance_execution(rec.status, ExecutionStatus.RUNNING, rec.id)
        rec.result = rec.error = rec.ended_ms = rec.blocked_on = rec.human_hold = None
        rec.version, rec.redrives, rec.timeout_start_ms = fn.version, rec.redrives + 1, now
        rec.invoke_requested, rec.in_invocation = True, False
        event = self._event(st, "ExecutionRedriven", None, {
            "RedriveCount": rec.redrives, "FromOperationId": plan.from_id,
            "ResetOperations": list(plan.reset), "Version": fn.version, "RequestedBy": actor,
            "Forced": bool(force and not report["clean"])})
        self._defer(st, [], [event], drop_ops=plan.reset, drop_marks=plan.reset_marks)
        await self._rearm(st)
        engine.announce(rec, "execution.redriven", from_operation=plan.from_id, by=actor)
        return {"execution_id": rec.id, "status": rec.status.value, "version": fn.version,
                "from_operation": plan.from_id, "reset": list(plan.reset),
                "redrives": rec.redrives, "paused": bool(rec.paused), "replay_check": report}

    async def snapshot(self) -> dict[str, Any]:
        """The record, operations, recorded values and history, as of between events
        (a fork's consistent copy of its source)."""
        st = await self._state_or_fail()
        return {"record": st.record.to_dict(), "ops": [op.to_dict() for op in st.ops.values()],
                "marks": dict(st.marks), "history": await self.engine.store.history(self.ctx.id)}

    async def begin_fork(self, name: str, version: str, input_text: str,
                         timeout_s: int | None, source: dict[str, Any],
                         ops: list[dict[str, Any]], marks: dict[str, str],
                         events: list[dict[str, Any]]) -> dict[str, Any]:
        """Start this execution as a fork: `ops` (and `marks`) are the source's kept
        records, `events` their history, renumbered after `ExecutionStarted`."""
        if await self._load() is not None:
            raise InvalidExecutionState(f"execution id {self.ctx.id!r} is already used; choose "
                                        "another execution_id for the fork")
        now = self.ctx.now_ms()
        rec = ExecutionRecord(self.ctx.id, name, version, ExecutionStatus.RUNNING, input_text,
                              now, now, timeout_s=timeout_s, invoke_requested=True,
                              forked_from=source, has_marks=bool(marks),
                              trace=self._carried(name, version))
        kept = [_adopt(OperationRecord.from_dict(d), self.ctx.id) for d in ops]
        st = self._state = _Loaded(rec, {op.id: op for op in kept}, 1, dict(marks))
        details: dict[str, Any] = {"Input": payload(input_text), "ForkedFrom": source}
        if timeout_s:
            details["ExecutionTimeout"] = timeout_s
        history = [self._event(st, "ExecutionStarted", None, details)]
        callback_ids = {op.id: op.callback_id for op in kept if op.callback_id}
        for ev in events:
            history.append(_renumbered(ev, st.next_event_id, callback_ids))
            st.next_event_id += 1
        self._defer(st, kept, history, marks=marks)
        await self._rearm(st)
        self.engine.announce(rec, "execution.started", forked_from=source)
        return {"execution_id": self.ctx.id, "created": True}


def _adopt(op: OperationRecord, execution_id: str) -> OperationRecord:
    """A forked copy of a source's operation: its callback answers to the fork."""
    if op.callback_id is not None:
        op.callback_id = encode_callback_id(execution_id, op.id)
    return op


def _renumbered(ev: dict[str, Any], event_id: int, callback_ids: Mapping[str, str | None]
                ) -> dict[str, Any]:
    """A source's history event as the fork's: its own number and callback id."""
    out = dict(ev, EventId=event_id)
    started = out.get("CallbackStartedDetails")
    if isinstance(started, dict) and "CallbackId" in started:
        out["CallbackStartedDetails"] = dict(started,
                                             CallbackId=callback_ids.get(out.get("Id", "")))
    return out


def make_execution_class(engine: ExecutionEngine) -> type[ExecutionObject]:
    """The per-runtime class named `Execution` whose instances host executions."""
    return type("Execution", (ExecutionObject,), {"engine": engine})

