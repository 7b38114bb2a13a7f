"""An AWS SDK execution's object, part three: what comes from outside it (callbacks,
a chained invoke's end, operators' stop, redrive and fork), and the entry points
shared with native executions, which each kind answers its own way.

Every completion from outside counts as a change the handler has not seen and asks
for an invocation: one that runs meanwhile is followed by another (one invocation
at a time per execution).
"""

from __future__ import annotations

from typing import Any

from alarmtop.core.kernel.executions.aws.invocations import AwsInvocations
from alarmtop.core.kernel.executions.execution_state import Loaded
from alarmtop.core.kernel.objects.durable_object import AlarmInfo
from alarmtop.core.model.aws_outcomes import callback_ended, invoke_ended
from alarmtop.core.model.aws_redrive import redrive_cut, replay_report
from alarmtop.core.model.aws_state import AwsState
from alarmtop.core.model.callback_ids import encode_aws_callback_id
from alarmtop.core.model.execution_errors import (
    CallbackAlreadyCompleted,
    InvalidExecutionState,
    UnknownCallback,
)
from alarmtop.core.model.operations import (
    ExecutionRecord,
    ExecutionStatus,
    OperationRecord,
    OpType,
    payload,
)
from alarmtop.core.model.replay import advance_execution


class AwsOutside(AwsInvocations):
    """Callbacks, invokes' ends, operators' actions (see the module)."""

    def _changed_outside(self, st: Loaded, aws: AwsState, op: OperationRecord) -> None:
        rec = st.record
        st.ops[op.id] = op
        if not rec.in_invocation:
            aws.updated.append(op.id)
        rec.invoke_requested = True

    # -- the entry points ------------------------------------------------------------------

    async def alarm(self, info: AlarmInfo) -> None:
        st = await self._load()
        if st is not None and st.record.aws is not None:
            await self._aws_alarm(st, info)
            return
        await super().alarm(info)

    async def callback(self, op_id: str, callback_id: str, kind: str, result: str | None,
                       error: dict[str, Any] | None) -> dict[str, Any]:
        st = await self._load()
        if st is None or st.record.aws is None:
            out: dict[str, Any] = await super().callback(  # type: ignore[misc]
                op_id, callback_id, kind, result, error)
            return out
        op = st.ops.get(op_id)
        if op is None or op.type is not OpType.CALLBACK or op.callback_id != callback_id:
            raise UnknownCallback(callback_id)
        if op.done:
            raise CallbackAlreadyCompleted(callback_id, op.status.value.lower())
        if st.record.finished:
            raise CallbackAlreadyCompleted(callback_id, f"part of a {st.record.status.value} "
                                           "execution")
        aws, now = self._aws(st), self.ctx.now_ms()
        if kind == "heartbeat":
            if op.heartbeat_timeout_s:
                op.heartbeat_at_ms = now + op.heartbeat_timeout_s * 1000
                await self._save_and_rearm(st, [op])
            return {"status": "STARTED"}
        made = callback_ended(op, kind == "success", result, error, now, aws)
        self._changed_outside(st, aws, op)
        self._keep(st, aws)
        await self._save_and_rearm(st, [op], self._aws_events(st, [made]))
        self._ended(st, [op])
        return {"status": op.status.value}

    async def child_done(self, op_id: str, status: str, result: str | None,
                         error: dict[str, Any] | None) -> None:
        st = await self._load()
        if st is None or st.record.aws is None:
            await super().child_done(op_id, status, result, error)  # type: ignore[misc]
            return
        op = st.ops.get(op_id)
        if op is None or op.done or st.record.finished:
            return
        aws = self._aws(st)
        made = invoke_ended(op, status, result, error, self.ctx.now_ms(), aws)
        self._changed_outside(st, aws, op)
        self._keep(st, aws)
        await self._save_and_rearm(st, [op], self._aws_events(st, [made]))

    async def operate(self, action: str, text: str | None, actor: str) -> dict[str, Any]:
        st = await self._load()
        if st is None or st.record.aws is None or action != "abort":
            out: dict[str, Any] = await super().operate(action, text, actor)  # type: ignore[misc]
            return out
        rec = st.record
        if rec.finished:
            raise InvalidExecutionState(f"execution {rec.id!r} is {rec.status.value}; there is "
                                        "nothing to stop")
        self.engine.aws.abandon(rec.id)  # its handler's later calls are refused
        events = []
        if rec.in_invocation:
            events.append(self._invocation_completed(st, self._aws(st), self.ctx.now_ms(), {
                "ErrorType": "Execution.Stopped", "ErrorMessage": "stopped by an operator"}))
        await self._aws_finish(st, self._aws(st), ExecutionStatus.ABORTED, None, {
            "ErrorType": "ExecutionStopped", "ErrorMessage": text or "stopped by an operator"},
            events, [])
        return {"execution_id": rec.id, "status": rec.status.value}

    async def aws_delete(self) -> dict[str, Any]:
        """A finished execution and all of it deleted, in this event's one commit."""
        st = await self._state_or_fail()
        rec = st.record
        if rec.aws is None:
            raise InvalidExecutionState(f"execution {rec.id!r} is not of a Lambda-style "
                                        "function: only those are deleted")
        if not rec.finished:
            raise InvalidExecutionState(f"execution {rec.id!r} is {rec.status.value}: only a "
                                        "finished execution can be deleted (stop it first)")
        self.ctx.storage.defer_write(self.engine.store.delete_write(rec.id))
        await self.ctx.storage.delete_alarm()
        self._state = None
        self.engine.announce(rec, "execution.deleted")
        return {"execution_id": rec.id, "deleted": True}

    # -- redrive and fork ------------------------------------------------------------------

    async def redrive(self, version: str | None, force: bool, deadline_s: float,
                      actor: str) -> dict[str, Any]:
        st = await self._state_or_fail()
        if st.record.aws is None:
            out: dict[str, Any] = await super().redrive(  # type: ignore[misc]
                version, force, deadline_s, actor)
            return out
        rec, aws = st.record, self._aws(st)
        if rec.status not in (ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT):
            raise InvalidExecutionState(
                f"execution {rec.id!r} is {rec.status.value}; only a failed or timed-out "
                "execution can be redriven (fork it to run a copy from an operation)")
        cut = redrive_cut(st.ops)
        for op_id in cut.dropped:
            del st.ops[op_id]
        now = self.ctx.now_ms()
        rec.status = advance_execution(rec.status, ExecutionStatus.RUNNING, rec.id)
        rec.result = rec.error = rec.ended_ms = rec.blocked_on = rec.human_hold = None
        rec.redrives, rec.timeout_start_ms = rec.redrives + 1, now
        rec.invoke_requested, rec.in_invocation = True, False
        self._restart(aws, cut.expect)
        event = self._event(st, "ExecutionRedriven", None, {
            "RedriveCount": rec.redrives, "FromOperationId": cut.from_id,
            "ResetOperations": list(cut.dropped), "Version": rec.version,
            "RequestedBy": actor, "Forced": False})
        self._keep(st, aws)
        self._defer(st, [], [event], drop_ops=cut.dropped)
        await self._rearm(st)
        self.engine.announce(rec, "execution.redriven", from_operation=cut.from_id, by=actor)
        return {"execution_id": rec.id, "status": rec.status.value, "version": rec.version,
                "from_operation": cut.from_id, "reset": list(cut.dropped),
                "redrives": rec.redrives, "paused": bool(rec.paused),
                "replay_check": replay_report(rec.id, aws.to_dict())}

    @staticmethod
    def _restart(aws: AwsState, expect: Any) -> None:
        aws.outcome = aws.cached = aws.dead = aws.dead_pending = aws.divergence = None
        aws.updated, aws.expect, aws.compared, aws.revoked = [], list(expect), 0, False
        aws.failures, aws.last_failure, aws.retry_at_ms, aws.watchdog_ms = 0, None, None, None

    async def aws_begin_fork(self, function: str, version: str, input_text: str,
                             timeout_s: int, arn: str, source: dict[str, Any],
                             ops: list[dict[str, Any]], events: list[dict[str, Any]],
                             expect: list[dict[str, Any]]) -> dict[str, Any]:
        """Start this execution as a fork of an SDK execution: `ops` are the source's
        kept operations, `events` their history (renumbered after its start)."""
        if await self._load() is not None:
            raise InvalidExecutionState(f"execution id {self.ctx.id!r} is already used; "
                                        "choose another execution_id for the fork")
        now = self.ctx.now_ms()
        kept = [OperationRecord.from_dict(d) for d in ops]
        callback_ids: dict[str, str] = {}
        for op in kept:
            if op.callback_id is not None:
                op.callback_id = callback_ids[op.id] = encode_aws_callback_id(self.ctx.id, op.id)
        aws = AwsState(function, version, arn, created=max(
            [int(op.extra.get("n", 0)) for op in kept], default=0), touch=max(
            [int(op.extra.get("t", 0)) for op in kept], default=0), expect=list(expect))
        rec = ExecutionRecord(self.ctx.id, function, version, ExecutionStatus.RUNNING,
                              input_text, now, now, timeout_s=timeout_s, invoke_requested=True,
                              forked_from=source, aws=aws.to_dict())
        st = self._state = Loaded(rec, {op.id: op for op in kept}, 1)
        history = [self._event(st, "ExecutionStarted", None, {
            "Input": payload(input_text), "ExecutionTimeout": timeout_s, "ForkedFrom": source})]
        for ev in events:
            out = dict(ev, EventId=st.next_event_id)
            started = out.get("CallbackStartedDetails")
            if isinstance(started, dict) and out.get("Id") in callback_ids:
                out["CallbackStartedDetails"] = dict(started, CallbackId=callback_ids[out["Id"]])
            history.append(out)
            st.next_event_id += 1
        self._defer(st, kept, history)
        await self._rearm(st)
        self.engine.announce(rec, "execution.started", forked_from=source, arn=arn)
        return {"execution_id": self.ctx.id, "created": True}

    async def aws_replay_report(self) -> dict[str, Any]:
        st = await self._state_or_fail()
        return replay_report(st.record.id, st.record.aws or {})
