"""One context's operations: their ids, their records in the log, recorded values.

A `DurableContext` (the handler's API) keeps one; so do the parts that run
operations of their own inside it (`batch`, `saga`). Ids are positions among the
context's siblings, prefixed by the context's own id, so replay finds the same
record for the same call; a record that does not match raises a non-determinism
error (`model.replay.match`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from alarmtop.core.kernel.executions import execution_hooks
from alarmtop.core.kernel.executions.invocation import Invocation
from alarmtop.core.model.callback_ids import encode_callback_id
from alarmtop.core.model.execution_config import JSON_SERDES, SerDes
from alarmtop.core.model.execution_errors import (
    ChildContextError,
    DurableOperationError,
    ExecutionAborted,
    SuspendExecution,
    error_object,
)
from alarmtop.core.model.operations import (
    OperationRecord,
    OpStatus,
    OpType,
    error_payload,
    payload,
)
from alarmtop.core.model.replay import (
    HUMAN,
    Outcome,
    advance,
    mark_key,
    match,
    resolve,
    suspend_reason,
)

REPLAY_CHILDREN_BYTES = 256 * 1024
# Makes the context of a child operation: (invocation, its id, the id its records name
# as parent, when not its own: a FLAT batch branch's name the batch).
ContextOf = Callable[[Invocation, str, "str | None"], Any]


class OperationScope:
    """The operations of one context (see the module docstring)."""

    __slots__ = ("context_of", "counter", "inv", "marks_at", "marks_taken", "parent_id",
                 "record_parent")

    def __init__(self, inv: Invocation, parent_id: str | None, record_parent: str | None,
                 context_of: ContextOf) -> None:
        self.inv = inv
        self.parent_id = parent_id  # prefixes the ids of this context's operations
        # A FLAT batch branch has no record of its own: its operations name the batch.
        self.record_parent = record_parent or parent_id
        self.context_of = context_of
        self.counter = 0
        # How many values `now()`/`random()` took since operation `marks_at`.
        self.marks_at = 0
        self.marks_taken = 0

    def mark(self, kind: str, fresh: Callable[[], str]) -> str:
        """The recorded value of the next `kind` taken here, made by `fresh` the first
        time (outside the history: the AWS events are not touched)."""
        inv = self.inv
        n = self.marks_taken = self.marks_taken + 1 if self.marks_at == self.counter else 1
        self.marks_at = self.counter
        key = mark_key(self.parent_id, self.counter, kind, n)
        value = inv.marks.get(key)
        if value is None:
            value = fresh()
            if not inv.replay_only:
                inv.marks[key] = inv.new_marks[key] = value
        return value

    def clock_ms(self) -> int:
        """The clock for the engine's own bookkeeping (never recorded)."""
        return self.inv.clock.now_ms()

    def next_id(self) -> str:
        self.counter += 1
        return f"{self.parent_id}-{self.counter}" if self.parent_id else str(self.counter)

    def lookup(self, op_id: str, op_type: OpType, sub_type: str,
                name: str | None) -> OperationRecord | None:
        inv = self.inv
        rec = match(inv.ops.get(op_id), op_id, op_type, sub_type, name, inv.met)
        inv.met += 1
        if inv.replay_only:
            inv.visited.append(op_id)
        return rec

    def replayed(self, rec: OperationRecord | None, serdes: SerDes,
                  error: type[DurableOperationError],
                  timed_out: type[DurableOperationError] | None = None) -> tuple[bool, Any]:
        """The one check of a recorded outcome: `(True, value)` for a recorded result;
        raises the recorded error (`timed_out` for a timeout, when given) or suspends
        on what the log waits for; `(False, None)` when the operation must run."""
        if rec is None:
            return False, None  # nothing recorded: the common case, kept short
        found = resolve(rec, self.clock_ms())
        if found.outcome is Outcome.VALUE:
            return True, None if found.text is None else serdes.deserialize(found.text)
        if found.outcome is Outcome.ERROR:
            cls = timed_out if timed_out and found.status is OpStatus.TIMED_OUT else error
            raise cls.from_error_object(found.error or {})
        if found.outcome is Outcome.SUSPEND and rec is not None:
            raise SuspendExecution(suspend_reason(rec), found.until_ms, rec.id)
        return False, None

    def new(self, op_id: str, op_type: OpType, sub_type: str, name: str | None, *,
             parent_id: str | None = None, **fields: Any) -> OperationRecord:
        """The record of an operation the handler reaches for the first time: its start
        (never a replay's: a replayed operation has its record)."""
        inv = self.inv
        if inv.replay_only:
            inv.frontier(op_id)
        now = self.clock_ms()
        rec = OperationRecord(op_id, op_type, sub_type, name, parent_id or self.record_parent,
                              started_ms=now, **fields)
        if inv.hooks.on_operation_start:
            execution_hooks.operation_started(inv.hooks, inv.execution_id, rec, now)
        return rec

    async def child_at(self, op_id: str, fn: Callable[[Any], Awaitable[Any]],
                        name: str | None, sub_type: str, serdes: SerDes,
                        parent_id: str | None = None) -> Any:
        """A child context operation `op_id`: replayed whole once done, else (re)run.

        `parent_id` overrides the record's parent (a batch branch names its batch)."""
        inv = self.inv
        rec = self.lookup(op_id, OpType.CONTEXT, sub_type, name)
        if rec is not None and rec.status is OpStatus.SUCCEEDED and rec.extra.get(
                "replay_children"):
            # Too large to checkpoint: rebuilt by replaying the children's records.
            return serdes.deserialize(serdes.serialize(await fn(self.context_of(inv, op_id, None))))
        done, replayed = self.replayed(rec, serdes, ChildContextError)
        if done:
            return replayed
        if rec is None:
            rec = self.new(op_id, OpType.CONTEXT, sub_type, name, parent_id=parent_id)
            await inv.save(rec, inv.event("ContextStarted", rec), wait=False)
        try:
            value = await fn(self.context_of(inv, op_id, None))
        except Exception as exc:
            err = error_object(exc)
            advance(rec, OpStatus.FAILED)
            rec.error, rec.ended_ms = err, self.clock_ms()
            await inv.save(rec, inv.event("ContextFailed", rec, {"Error": error_payload(err)}))
            raise ChildContextError.from_error_object(err) from None
        text = serdes.serialize(value)
        details: dict[str, Any] = {"Result": payload(text)}
        advance(rec, OpStatus.SUCCEEDED)
        rec.result, rec.ended_ms = text, self.clock_ms()
        if len(text.encode()) > REPLAY_CHILDREN_BYTES:
            # As in the AWS SDK: keep the log small, rebuild the result on replay.
            rec.result, rec.extra = "", {**rec.extra, "replay_children": True}
            details = {"Result": payload(""), "ReplayChildren": True}
        await inv.save(rec, inv.event("ContextSucceeded", rec, details))
        return serdes.deserialize(text)

    async def human_decision(self, name: str, error: DurableOperationError) -> dict[str, Any]:
        """Suspend until an operator decides (retry, resolve, abort); returns the decision."""
        inv = self.inv
        op_id = self.next_id()
        rec = self.lookup(op_id, OpType.CALLBACK, HUMAN, name)
        if rec is None:
            rec = self.new(op_id, OpType.CALLBACK, HUMAN, name,
                            callback_id=encode_callback_id(inv.execution_id, op_id),
                            error=error.to_error_object())
            await inv.save(rec, inv.event("CallbackStarted", rec, {
                "CallbackId": rec.callback_id, "Reason": error.message}))
        _, decision = self.replayed(rec, JSON_SERDES, DurableOperationError)
        if not isinstance(decision, dict):
            raise SuspendExecution(suspend_reason(rec), None, op_id)
        if decision.get("action") == "abort":
            raise ExecutionAborted(decision.get("reason") or "aborted by an operator")
        return decision
