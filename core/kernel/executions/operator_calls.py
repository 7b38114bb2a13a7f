"""Operators' calls on an execution's object: retry a compensation, resolve, abort,
hand to a human, pause and resume, move a timer, redrive, and a fork's snapshot and
start. Each runs as one event of the execution's object: it never interleaves with
the execution's own events."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from alarmtop.core.kernel.executions.replay_check import replay_check
from alarmtop.core.model.callback_ids import encode_callback_id
from alarmtop.core.model.execution_errors import (
    InvalidExecutionState,
    ReplayDivergence,
)
from alarmtop.core.model.operations import (
    ExecutionRecord,
    ExecutionStatus,
    OperationRecord,
    OpStatus,
    payload,
)
from alarmtop.core.model.replay import HUMAN, advance, advance_execution, redrive_plan

if TYPE_CHECKING:
    pass




from alarmtop.core.kernel.executions.execution_state import ExecutionState, Loaded


class OperatorCalls(ExecutionState):
    """The RPCs operators' tools make on an execution's object."""

    def _waiting_human(self, st: Loaded) -> OperationRecord | None:
        for op in st.ops.values():
            if op.sub_type == HUMAN and op.status is OpStatus.STARTED:
                return op
        return None

    async def _decide(self, st: Loaded, op: OperationRecord, decision: dict[str, Any]) -> None:
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
        st = self._state = Loaded(rec, {op.id: op for op in kept}, 1, dict(marks))
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


