"""An AWS SDK execution's object, part two: its alarm and its invocations.

The execution's one alarm is the soonest of what the service must do: its waits'
ends, its steps' next attempts, its callbacks' deadlines, its timeout, a failed
invocation's retry, and, while an invocation runs, its liveness check. When it
fires it completes what fell due, then (unless an invocation runs, or the
execution is paused or held) starts one invocation: the start is committed, and
only then does the handler run, in the service's invoker, off this object's turn.
The handler's answer is one more event (`aws_ended`). An invocation that does not
answer (its process died, the runtime stopped, it ran past its timeout) is found
by the liveness check and counts as a failed one; a run of failures ends in a dead
letter that an operator re-arms.
"""

from __future__ import annotations

from typing import Any

from alarmtop.core.kernel import outbox
from alarmtop.core.kernel.executions.aws.calls import AwsCalls
from alarmtop.core.kernel.executions.aws.functions import INVOCATION_RETRIES
from alarmtop.core.kernel.executions.execution_state import Loaded
from alarmtop.core.kernel.objects.durable_object import AlarmInfo
from alarmtop.core.model import aws_delta, aws_invocation
from alarmtop.core.model.aws_arn import run_id
from alarmtop.core.model.aws_state import AwsState, current_token
from alarmtop.core.model.aws_wire import execution_wire
from alarmtop.core.model.errors import GiveUp
from alarmtop.core.model.operations import (
    ExecutionStatus,
    OperationRecord,
    error_payload,
    iso,
)
from alarmtop.core.model.replay import advance_execution, suspend_reason


class AwsInvocations(AwsCalls):
    """The alarm and the invocations of an AWS SDK execution (see the module)."""

    # -- the alarm -------------------------------------------------------------------------

    def _next_alarm(self, st: Loaded) -> int | None:
        rec = st.record
        if rec.aws is None:
            return super()._next_alarm(st)
        if rec.finished or rec.paused:
            return None
        aws = self._aws(st)
        times = [t for t in (aws_delta.next_due(st.ops.values()), rec.timeout_at_ms)
                 if t is not None]
        if rec.in_invocation:
            if aws.watchdog_ms is not None:
                times.append(aws.watchdog_ms)
        elif aws.dead_pending is not None:
            times.append(self.ctx.now_ms())
        elif rec.invoke_requested and not rec.human_hold:
            times.append(max(aws.retry_at_ms or 0, self.ctx.now_ms()))
        return min(times) if times else None

    async def _rearm(self, st: Loaded) -> None:
        if st.record.aws is not None and self._aws(st).dead is not None:
            return  # a dead letter stays one until an operator re-arms it
        await super()._rearm(st)

    async def _aws_alarm(self, st: Loaded, info: AlarmInfo) -> None:
        rec, aws, now = st.record, self._aws(st), self.ctx.now_ms()
        if rec.finished:
            return
        if aws.dead is not None:  # a dead letter fires only when an operator re-arms it
            aws.dead, rec.invoke_requested = None, True
            aws_invocation.succeeded(aws)
            self.engine.announce(rec, "execution.rearmed")
        if aws.dead_pending is not None:
            aws.dead, aws.dead_pending = aws.dead_pending, None
            self._keep(st, aws)
            self._defer(st)
            self.engine.announce(rec, "execution.dead_letter", error=aws.dead)
            raise GiveUp(aws.dead)
        if rec.paused:
            self._keep(st, aws)
            await self._save_and_rearm(st)
            return
        events: list[dict[str, Any]] = []
        changed: list[OperationRecord] = []
        live = self.engine.aws.live(rec.id, aws.invocation)
        if rec.in_invocation and not live:
            self._cut_short(st, aws, aws_invocation.EXIT_ERROR, events, now)
        elif rec.in_invocation and aws.invocation_started_ms is not None and \
                now >= aws.invocation_started_ms + self._timeout_ms():
            self.engine.aws.abandon(rec.id)
            self._cut_short(st, aws, {
                "ErrorType": aws_invocation.TIMEOUT_ERROR,
                "ErrorMessage": f"the invocation ran longer than "
                                f"{self.engine.aws.invocation_timeout_s:g}s"}, events, now)
        due, made = aws_delta.complete_due(st.ops, aws, now)
        for op in due:
            st.ops[op.id] = op
            changed.append(op)
            if not rec.in_invocation:
                aws.updated.append(op.id)
        events += self._aws_events(st, made)
        if due:
            rec.invoke_requested = True
        if rec.timeout_at_ms is not None and now >= rec.timeout_at_ms:
            await self._aws_finish(st, aws, ExecutionStatus.TIMED_OUT, None, {
                "ErrorType": "Execution.Timeout",
                "ErrorMessage": f"execution ran longer than {rec.timeout_s}s"}, events, changed)
            return
        if aws.outcome is not None and not rec.in_invocation:
            await self._aws_outcome(st, aws, events, changed)
            return
        if rec.in_invocation:  # still running here: check on it again later
            aws.watchdog_ms = self._watchdog(aws, now)
        elif self._may_invoke(st, aws, now):
            await self._aws_invoke(st, aws, events, changed)
            return
        self._keep(st, aws)
        await self._save_and_rearm(st, changed, events)

    def _timeout_ms(self) -> int:
        return round(self.engine.aws.invocation_timeout_s * 1000)

    def _watchdog(self, aws: AwsState, now: int) -> int:
        started = aws.invocation_started_ms or now
        return min(started + self._timeout_ms(), now + round(self.engine.aws.liveness_s * 1000))

    def _may_invoke(self, st: Loaded, aws: AwsState, now: int) -> bool:
        rec = st.record
        return bool(rec.invoke_requested and not rec.human_hold
                    and aws.dead_pending is None and (aws.retry_at_ms or 0) <= now)

    def _cut_short(self, st: Loaded, aws: AwsState, error: dict[str, Any],
                   events: list[dict[str, Any]], now: int) -> None:
        """The running invocation will never answer: it failed."""
        st.record.in_invocation = False
        events.append(self._invocation_completed(st, aws, now, error))
        aws.watchdog_ms = None
        if aws.outcome is None:
            aws_invocation.failed(aws, error, self._retries(st), now, self.engine.rng)
            st.record.invoke_requested = True

    def _retries(self, st: Loaded) -> Any:
        fns = self.engine.aws.functions
        name = st.record.name
        return fns.get(name).retries if name in fns else INVOCATION_RETRIES

    def _invocation_completed(self, st: Loaded, aws: AwsState, now: int,
                              error: dict[str, Any] | None = None) -> dict[str, Any]:
        details: dict[str, Any] = {
            "StartTimestamp": iso(aws.invocation_started_ms or now), "EndTimestamp": iso(now),
            "RequestId": f"{st.record.id}/{aws.invocation}"}
        if error is not None:
            details["Error"] = error_payload(error)
        return self._event(st, "InvocationCompleted", None, details)

    # -- an invocation starts --------------------------------------------------------------

    async def _aws_invoke(self, st: Loaded, aws: AwsState, events: list[dict[str, Any]],
                          changed: list[OperationRecord]) -> None:
        rec, service, now = st.record, self.engine.aws, self.ctx.now_ms()
        fn = service.functions.get(rec.name)
        aws.invocation += 1
        aws.seq += 1
        aws.revoked, aws.retry_at_ms, aws.invocation_started_ms = False, None, now
        aws.watchdog_ms = self._watchdog(aws, now)
        aws.seen = aws.touch  # the input carries every operation
        rec.in_invocation, rec.invoke_requested = True, False
        rec.status = advance_execution(rec.status, ExecutionStatus.RUNNING, rec.id)
        rec.invocations += 1
        rec.blocked_on = None
        payload = self._invocation_input(st, aws)
        self._keep(st, aws)
        self._defer(st, changed, events)
        await self._rearm(st)
        invocation, arn = aws.invocation, aws.arn
        box = outbox.current()
        assert box is not None

        def go(landed: bool) -> None:
            if landed:  # only a start that is durable runs the handler
                service.launch(fn, rec.id, invocation, payload, arn)
        box.hold(go)

    def _invocation_input(self, st: Loaded, aws: AwsState) -> dict[str, Any]:
        rec = st.record
        if aws.plain:
            import json
            return {"Input": json.loads(rec.input)}
        wires = [execution_wire(rec, run_id(rec.id), "STARTED"), *aws_delta.wires(st.ops)]
        first, marker = aws_delta.page(wires, 0, self.engine.aws.limits.response_bytes, None,
                                       aws.seq)
        return aws_invocation.envelope(aws.arn, current_token(rec.id, aws), first, marker,
                                       aws.updated)

    # -- RPC: an invocation ended ----------------------------------------------------------

    async def aws_ended(self, invocation: int, output: dict[str, Any] | None,
                        error: dict[str, Any] | None, started_ms: int) -> None:
        st = await self._load()
        if st is None or st.record.aws is None:
            return
        rec, aws, now = st.record, self._aws(st), self.ctx.now_ms()
        if rec.finished or not rec.in_invocation or aws.invocation != invocation:
            return  # an invocation already given up on (cut short, timed out, stopped)
        rec.in_invocation, aws.watchdog_ms, aws.updated = False, None, []
        ending = aws_invocation.read_output(output, self.engine.aws.limits) \
            if error is None else aws_invocation.Ending("invalid", error=error)
        failure = ending.error if ending.kind == "invalid" else None
        if ending.kind == "pending" and aws.outcome is None:
            pending, ready = aws_invocation.waiting_on(st.ops.values())
            if ready:
                rec.invoke_requested = True
            elif not (pending or rec.paused or aws.revoked or rec.invoke_requested):
                failure = {"ErrorType": "Runtime.InvalidResponse", "ErrorMessage":
                           "the invocation answered PENDING with nothing to wait for"}
        events = [self._invocation_completed(st, aws, now, failure)]
        if aws.outcome is not None:
            await self._aws_outcome(st, aws, events, [])
            return
        if failure is not None:
            aws_invocation.failed(aws, failure, self._retries(st), now, self.engine.rng)
            rec.invoke_requested = True
            self.engine.announce(rec, "execution.invocation_failed",
                                 error=failure.get("ErrorMessage"), failures=aws.failures)
        elif ending.kind == "succeeded":
            aws_invocation.succeeded(aws)
            await self._aws_finish(st, aws, ExecutionStatus.SUCCEEDED, ending.result, None,
                                   events, [])
            return
        elif ending.kind == "failed":
            aws_invocation.succeeded(aws)
            await self._aws_finish(st, aws, ExecutionStatus.FAILED, None, ending.error,
                                   events, [])
            return
        else:
            aws_invocation.succeeded(aws)
            self._suspended(st)
        self._keep(st, aws)
        await self._save_and_rearm(st, [], events)

    def _suspended(self, st: Loaded) -> None:
        rec = st.record
        waiting = sorted((op for op in st.ops.values() if not op.done),
                         key=aws_delta.order)
        rec.status = advance_execution(rec.status, ExecutionStatus.SUSPENDED, rec.id)
        rec.blocked_on = suspend_reason(waiting[-1]) if waiting else (
            f"paused: {rec.paused}" if rec.paused else None)
        self.engine.announce(rec, "execution.suspended", reason=rec.blocked_on)

    async def _aws_outcome(self, st: Loaded, aws: AwsState, events: list[dict[str, Any]],
                           changed: list[OperationRecord]) -> None:
        """The execution's end a checkpoint's EXECUTION update (or a limit) decided."""
        outcome = aws.outcome or {}
        ok = outcome.get("status") == "SUCCEEDED"
        await self._aws_finish(st, aws, ExecutionStatus.SUCCEEDED if ok else
                               ExecutionStatus.FAILED, outcome.get("result") if ok else None,
                               None if ok else outcome.get("error"), events, changed)

    async def _aws_finish(self, st: Loaded, aws: AwsState, status: ExecutionStatus,
                          result: str | None, error: dict[str, Any] | None,
                          events: list[dict[str, Any]], changed: list[OperationRecord]) -> None:
        aws.outcome, aws.cached, aws.watchdog_ms, aws.retry_at_ms = None, None, None, None
        aws.revoked = True  # a handler still running is refused from now on
        st.record.in_invocation = False
        self._keep(st, aws)
        await self._finish(st, status, result, error, events, changed)
