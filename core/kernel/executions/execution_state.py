"""An execution's object: its state as loaded from the log, and how an event of it
checkpoints and points its alarm at what comes next (one commit for both).

`ExecutionObject` (`execution_object`) drives invocations on top of it; operators'
calls are `operator_calls.OperatorCalls`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from alarmtop.core.kernel.executions import execution_hooks
from alarmtop.core.kernel.objects.durable_object import DurableObject, ObjectContext
from alarmtop.core.model import hook_info
from alarmtop.core.model.execution_errors import UnknownExecution
from alarmtop.core.model.operations import (
    ExecutionRecord,
    ExecutionStatus,
    OperationRecord,
    error_payload,
    make_event,
    payload,
)
from alarmtop.core.model.replay import advance_execution
from alarmtop.core.model.storage_values import LogChain

if TYPE_CHECKING:
    from alarmtop.core.kernel.executions.engine import ExecutionEngine




@dataclass
class Loaded:
    record: ExecutionRecord
    ops: dict[str, OperationRecord]
    next_event_id: int
    marks: dict[str, str] = field(default_factory=dict)  # recorded now()/random() values



class ExecutionState(DurableObject):
    """The state of one execution's object and its checkpoints (see the module docstring)."""

    engine: ExecutionEngine

    def __init__(self, ctx: ObjectContext, env: Any) -> None:
        super().__init__(ctx, env)
        self._state: Loaded | None = None
        # The running invocation's log chain: what this event defers lands after the
        # invocation's own checkpoints, or not at all.
        self._chain: LogChain | None = None
        self._told: hook_info.InvocationStartInfo | None = None  # the invocation hook's

    async def _load(self) -> Loaded | None:
        if self._state is None:
            store = self.engine.store
            record = await store.get(self.ctx.id)
            if record is None:
                return None
            ops = {op.id: op for op in await store.operations(self.ctx.id)}
            marks = await store.marks(self.ctx.id) if record.has_marks else {}
            self._state = Loaded(record, ops, await store.max_event_id(self.ctx.id) + 1,
                                  marks)
        return self._state

    async def _state_or_fail(self) -> Loaded:
        st = await self._load()
        if st is None:
            raise UnknownExecution(repr(self.ctx.id), "start it with executions.start()")
        return st

    def _event(self, st: Loaded, event_type: str, op: OperationRecord | None = None,
               details: dict[str, Any] | None = None) -> dict[str, Any]:
        ev = make_event(st.next_event_id, event_type, self.ctx.now_ms(), op, details)
        st.next_event_id += 1
        self.engine.announce_history(st.record, ev)
        return ev

    def _queue(self, st: Loaded, ops: Sequence[OperationRecord] = (),
               events: Sequence[dict[str, Any]] = (),
               chain: LogChain | None = None) -> asyncio.Future[None]:
        """Queue a checkpoint of the record, `ops` and `events`; await it for durability."""
        st.record.updated_ms = self.ctx.now_ms()
        for op in ops:
            st.ops[op.id] = op
        return self.engine.store.checkpoint(st.record.id, st.record, ops, events, chain)

    def _defer(self, st: Loaded, ops: Sequence[OperationRecord] = (),
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

    def _next_alarm(self, st: Loaded) -> int | None:
        """The next thing the service must do for the execution, if anything."""
        rec = st.record
        if rec.finished or rec.paused:
            return None  # a paused execution runs nothing; its timers wait for resume
        times = [t for op in st.ops.values() for t in op.deadlines()]
        if rec.timeout_at_ms is not None:
            times.append(rec.timeout_at_ms)
        # An invocation cut off (a crash, an interrupt) runs again, as one requested.
        if (rec.invoke_requested or rec.in_invocation) and not rec.human_hold:
            times.append(self.ctx.now_ms())
        return min(times) if times else None

    async def _rearm(self, st: Loaded) -> None:
        """Point the alarm at `_next_alarm` when the running alarm attempt ends."""
        at = self._next_alarm(st)
        if at is None:
            await self.ctx.storage.delete_alarm()
        else:
            await self.ctx.storage.set_alarm(at)

    async def _save_and_rearm(self, st: Loaded, ops: Sequence[OperationRecord] = (),
                              events: Sequence[dict[str, Any]] = (), *,
                              marks: Mapping[str, str] | None = None) -> None:
        """Checkpoint, and point the alarm at what comes next, in the event's one commit
        (a call's, or the alarm attempt's end)."""
        self._defer(st, ops, events, marks=marks)
        await self._rearm(st)

    def _carried(self, name: str, version: str) -> dict[str, str] | None:
        """What the plugins carry from the starter to the invocations (its trace)."""
        return self.engine.hooks_of(name, version).propagation()

    def _ended(self, st: Loaded, ops: Sequence[OperationRecord]) -> None:
        """The service completed `ops` in this event: told once its commit landed."""
        rec = st.record
        hooks = self.engine.hooks_of(rec.name, rec.version)
        if hooks.on_operation_end:
            execution_hooks.operations_ended_after_commit(hooks, rec, [op for op in ops if op.done],
                                                    self.ctx.now_ms)

    async def _finish(self, st: Loaded, status: ExecutionStatus, result: str | None,
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
