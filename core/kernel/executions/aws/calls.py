"""An AWS SDK execution's object, part one: its start, and the two calls the SDK makes
(checkpoint, get state), each one event of the object.

The decisions are the model's (`aws_checkpoint`, `aws_delta`, `aws_state`); here
they are applied: history events numbered and announced, operations and the
record checkpointed in the event's one commit with the alarm they imply, a chained
invoke's execution started before that commit (so a retried START finds it).
Refusals come back as data (`{"error": ...}`): they cross node links unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from alarmtop.core.kernel.executions.execution_state import ExecutionState, Loaded
from alarmtop.core.model import aws_delta
from alarmtop.core.model.aws_arn import run_id
from alarmtop.core.model.aws_checkpoint import Applied, Target, apply_checkpoint
from alarmtop.core.model.aws_errors import (
    AwsServiceError,
    ResourceNotFoundException,
    invalid,
    stale_token,
)
from alarmtop.core.model.aws_outcomes import invoke_ended
from alarmtop.core.model.aws_state import AwsState, check_token, current_token
from alarmtop.core.model.aws_wire import Update, execution_wire, operation_wire, parse_updates
from alarmtop.core.model.callback_ids import encode_aws_callback_id
from alarmtop.core.model.execution_errors import InvalidExecutionState
from alarmtop.core.model.operations import (
    ExecutionRecord,
    ExecutionStatus,
    OperationRecord,
    payload,
)

AWS_STATUS = {"running": "RUNNING", "suspended": "RUNNING", "needs_human": "RUNNING",
              "succeeded": "SUCCEEDED", "failed": "FAILED", "timed_out": "TIMED_OUT",
              "aborted": "STOPPED"}
MAX_ITEMS = 1000


def refusal(exc: AwsServiceError) -> dict[str, Any]:
    return {"error": exc.to_dict()}


class AwsCalls(ExecutionState):
    """Start, checkpoint and state reads of an AWS SDK execution (see the module)."""

    # -- the record's bookkeeping ----------------------------------------------------------

    @staticmethod
    def _aws(st: Loaded) -> AwsState:
        assert st.record.aws is not None
        return AwsState.from_dict(st.record.aws)

    @staticmethod
    def _keep(st: Loaded, aws: AwsState) -> None:
        st.record.aws = aws.to_dict()

    def _aws_events(self, st: Loaded, made: Sequence[tuple[str, OperationRecord | None,
                                                          dict[str, Any]]]
                    ) -> list[dict[str, Any]]:
        return [self._event(st, kind, op, details) for kind, op, details in made]

    def _execution_wire(self, st: Loaded) -> dict[str, Any]:
        rec = st.record
        return execution_wire(rec, run_id(rec.id), AWS_STATUS[rec.status.value]
                              if rec.finished else "STARTED")

    # -- RPC: start ------------------------------------------------------------------------

    async def aws_begin(self, function: str, version: str, input_text: str, timeout_s: int,
                        parent: str | None, plain: bool, arn: str) -> dict[str, Any]:
        existing = await self._load()
        if existing is not None:
            rec = existing.record
            if rec.name != function or rec.aws is None:
                raise InvalidExecutionState(
                    f"execution id {self.ctx.id!r} is already used by {rec.name!r}; choose "
                    "another execution name")
            return {"execution_id": rec.id, "created": False, "status": rec.status.value,
                    "result": rec.result, "error": rec.error}
        now = self.ctx.now_ms()
        aws = AwsState(function, version, arn, plain=plain)
        rec = ExecutionRecord(self.ctx.id, function, version, ExecutionStatus.RUNNING,
                              input_text, now, now, timeout_s=timeout_s, invoke_requested=True,
                              parent=parent, aws=aws.to_dict())
        st = self._state = Loaded(rec, {}, 1)
        details = {"Input": payload(input_text), "ExecutionTimeout": timeout_s}
        await self._save_and_rearm(st, [], [self._event(st, "ExecutionStarted", None, details)])
        self.engine.announce(rec, "execution.started", arn=arn)
        return {"execution_id": rec.id, "created": True, "status": rec.status.value,
                "result": None, "error": None}

    # -- RPC: CheckpointDurableExecution ---------------------------------------------------

    async def aws_checkpoint(self, token: Any, raw: Any, client_token: str | None,
                             revoke: bool = False) -> dict[str, Any]:
        st = await self._load()
        if st is None or st.record.aws is None:
            return refusal(ResourceNotFoundException(f"no durable execution {self.ctx.id}"))
        aws = self._aws(st)
        cached = aws.cached
        if client_token and cached and cached.get("client") == client_token \
                and cached.get("token") == token:
            return dict(cached["response"])  # a repeated call: the same answer
        try:
            if st.record.finished:
                raise stale_token(f"the execution is {st.record.status.value}")
            check_token(st.record.id, aws, token, st.record.in_invocation)
            updates = parse_updates(raw)
            applied = apply_checkpoint(updates, st.ops, aws, self.ctx.now_ms(),
                                       self.engine.aws.limits,
                                       lambda op_id: encode_aws_callback_id(st.record.id, op_id),
                                       self._resolver(st))
        except AwsServiceError as exc:
            return refusal(exc)
        return await self._checkpointed(st, aws, updates, applied, token, client_token, revoke)

    def _resolver(self, st: Loaded) -> Any:
        service, rec = self.engine.aws, st.record

        def resolve(ref: str, op_id: str) -> Target:
            return service.target(ref, rec.id, op_id, rec.redrives)
        return resolve

    async def _checkpointed(self, st: Loaded, aws: AwsState, updates: Sequence[Update],
                            applied: Applied, token: Any, client_token: str | None,
                            revoke: bool) -> dict[str, Any]:
        rec, now = st.record, self.ctx.now_ms()
        self._compare_with_record(aws, updates, st.ops)
        events = self._aws_events(st, applied.events)
        changed = dict(applied.changed)
        st.ops.update(changed)
        for op, target in applied.invokes:
            await self._start_invoke(st, aws, op, target, changed, events)
        due, made = aws_delta.complete_due(st.ops, aws, now)
        for op in due:
            st.ops[op.id] = changed[op.id] = op
        events += self._aws_events(st, made)
        aws.seq += 1
        withhold = applied.outcome is not None or revoke or rec.paused is not None
        if applied.outcome is not None:
            aws.outcome = applied.outcome
        if withhold and applied.outcome is None:
            # The invocation ends PENDING; another carries on (once resumed, if paused).
            aws.revoked, rec.invoke_requested = True, True
        answer = self._delta(st, aws)
        if not withhold:
            answer["CheckpointToken"] = current_token(rec.id, aws)
        aws.cached = {"client": client_token, "token": token, "response": answer} \
            if client_token else None
        self._keep(st, aws)
        self._defer(st, list(changed.values()), events)
        await self._rearm(st)
        return answer

    def _delta(self, st: Loaded, aws: AwsState) -> dict[str, Any]:
        """The operations the handler has not seen, within the response limit (what
        does not fit comes with the next checkpoint)."""
        fresh = sorted(aws_delta.unseen(st.ops, aws), key=lambda op: int(op.extra["t"]))
        wires = [operation_wire(op) for op in fresh]
        sent, rest = aws_delta.page(wires, 0, self.engine.aws.limits.response_bytes, None,
                                    aws.seq)
        aws.seen = aws.touch if rest is None else int(fresh[len(sent) - 1].extra["t"])
        return {"NewExecutionState": {"Operations": sent, "NextMarker": None}}

    async def _start_invoke(self, st: Loaded, aws: AwsState, op: OperationRecord,
                            target: Target, changed: dict[str, OperationRecord],
                            events: list[dict[str, Any]]) -> None:
        """Start the target before this checkpoint commits: a START retried after a crash
        finds it, and one that already ended completes the operation now."""
        child = await self.engine.aws.start_child(target, op.extra.get("input"),
                                                  f"{st.record.id}#{op.id}")
        if child["status"] in ("running", "suspended", "needs_human"):
            return
        made = invoke_ended(op, child["status"], child.get("result"), child.get("error"),
                            self.ctx.now_ms(), aws)
        changed[op.id] = op
        events.extend(self._aws_events(st, [made]))

    @staticmethod
    def _compare_with_record(aws: AwsState, updates: Sequence[Update],
                             ops: dict[str, OperationRecord]) -> None:
        """A redrive's or fork's re-run, compared with what the record had there."""
        expect = aws.expect
        if not expect:
            return
        for u in updates:
            if u.id in ops or u.type == "EXECUTION" or aws.compared >= len(expect):
                continue
            want = expect[aws.compared]
            found = {"type": u.type, "sub_type": u.sub_type or "", "name": u.name,
                     "parent_id": u.parent_id}
            if aws.divergence is None and any(want.get(k) != v for k, v in found.items()):
                aws.divergence = {"index": aws.compared, "op_id": u.id, "expected": want,
                                  "found": found}
            aws.compared += 1

    # -- RPC: GetDurableExecutionState -----------------------------------------------------

    async def aws_state(self, token: Any, marker: Any, max_items: Any) -> dict[str, Any]:
        st = await self._load()
        if st is None or st.record.aws is None:
            return refusal(ResourceNotFoundException(f"no durable execution {self.ctx.id}"))
        aws = self._aws(st)
        try:
            check_token(st.record.id, aws, token, st.record.in_invocation
                        and not st.record.finished)
            if max_items is None:
                max_items = MAX_ITEMS
            if not isinstance(max_items, int) or isinstance(max_items, bool) or \
                    not 0 < max_items <= MAX_ITEMS:
                raise invalid(f"MaxItems is 1-{MAX_ITEMS}, not {max_items!r}")
            wires = [self._execution_wire(st), *aws_delta.wires(st.ops)]
            start = aws_delta.marker_start(marker, aws.seq, len(wires))
        except AwsServiceError as exc:
            return refusal(exc)
        ops, nxt = aws_delta.page(wires, start, self.engine.aws.limits.response_bytes,
                                  max_items, aws.seq)
        return {"Operations": ops, "NextMarker": nxt}
