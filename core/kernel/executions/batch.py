"""`parallel` and `map`: branches in child contexts with a completion policy.

The policy is the AWS SDK's: with no criteria a single failure ends the batch;
`tolerated_failure_count` and `tolerated_failure_percentage` compare strictly
(`>`); the batch is complete when every started branch finished or
`min_successful` succeeded. Branches start in index order, at most
`max_concurrency` at a time; a suspended branch keeps its slot; branches never
started are left out of the result. A branch failure never fails the parent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from alarmtop.core.kernel.executions.scope import OperationScope
from alarmtop.core.model.execution_config import JSON_SERDES, CompletionConfig, NestingType, SerDes
from alarmtop.core.model.execution_errors import (
    ChildContextError,
    SuspendExecution,
    ValidationError,
    error_object,
)
from alarmtop.core.model.operations import OpStatus, OpType, payload
from alarmtop.core.model.replay import advance

ALL_COMPLETED = "ALL_COMPLETED"
MIN_SUCCESSFUL_REACHED = "MIN_SUCCESSFUL_REACHED"
FAILURE_TOLERANCE_EXCEEDED = "FAILURE_TOLERANCE_EXCEEDED"


@dataclass
class BatchItem:
    index: int
    status: str  # SUCCEEDED | FAILED | STARTED
    result: Any = None
    error: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "status": self.status, "result": self.result,
                "error": self.error}


@dataclass
class BatchResult:
    all: list[BatchItem] = field(default_factory=list)
    completion_reason: str = ALL_COMPLETED

    def succeeded(self) -> list[BatchItem]:
        return [i for i in self.all if i.status == "SUCCEEDED"]

    def failed(self) -> list[BatchItem]:
        return [i for i in self.all if i.status == "FAILED"]

    def started(self) -> list[BatchItem]:
        return [i for i in self.all if i.status == "STARTED"]

    def get_results(self) -> list[Any]:
        return [i.result for i in self.succeeded()]

    def get_errors(self) -> list[dict[str, Any]]:
        return [i.error or {} for i in self.failed()]

    def throw_if_error(self) -> None:
        for item in self.failed():
            raise ChildContextError.from_error_object(item.error or {})

    @property
    def status(self) -> str:
        return "FAILED" if self.has_failure else "SUCCEEDED"

    @property
    def has_failure(self) -> bool:
        return bool(self.failed())

    @property
    def success_count(self) -> int:
        return len(self.succeeded())

    @property
    def failure_count(self) -> int:
        return len(self.failed())

    @property
    def started_count(self) -> int:
        return len(self.started())

    @property
    def total_count(self) -> int:
        return len(self.all)

    def to_dict(self) -> dict[str, Any]:
        return {"all": [i.to_dict() for i in self.all], "completionReason": self.completion_reason,
                "status": self.status, "successCount": self.success_count,
                "failureCount": self.failure_count, "totalCount": self.total_count}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> BatchResult:
        return BatchResult([BatchItem(**i) for i in d["all"]], d["completionReason"])


def completion(cfg: CompletionConfig, total: int, succeeded: int, failed: int,
               running: int, unstarted: int) -> str | None:
    """Why the batch is complete now, or None while it goes on (pure)."""
    no_criteria = (cfg.min_successful is None and cfg.tolerated_failure_count is None
                   and cfg.tolerated_failure_percentage is None)
    if failed and (no_criteria
                   or (cfg.tolerated_failure_count is not None
                       and failed > cfg.tolerated_failure_count)
                   or (cfg.tolerated_failure_percentage is not None and total
                       and failed / total * 100 > cfg.tolerated_failure_percentage)):
        return FAILURE_TOLERANCE_EXCEEDED
    if running == 0 and unstarted == 0:
        return ALL_COMPLETED
    if cfg.min_successful is not None and succeeded >= cfg.min_successful:
        return MIN_SUCCESSFUL_REACHED
    return None


# A branch: given its context (a `DurableContext`), its value.
Branch = Callable[[Any], Awaitable[Any]]


@dataclass
class BatchSpec:
    kind: str  # "Parallel" | "Map"
    item_sub_type: str  # "ParallelBranch" | "MapIteration"
    branches: Sequence[tuple[str | None, Branch]]
    completion: CompletionConfig
    max_concurrency: int | None
    nesting: NestingType
    serdes: SerDes | None
    item_serdes: SerDes | None


async def run_batch(scope: OperationScope, spec: BatchSpec, name: str | None) -> BatchResult:
    """The parent operation, in the context whose operations are `scope`: replayed whole
    once done, else (re)runs its branches."""
    cfg = spec.completion
    if cfg.min_successful is not None and cfg.min_successful > len(spec.branches):
        raise ValidationError(f"min_successful={cfg.min_successful} is more than the "
                              f"{len(spec.branches)} branches")
    inv = scope.inv
    op_id = scope.next_id()
    rec = scope.lookup(op_id, OpType.CONTEXT, spec.kind, name)
    done, recorded = scope.replayed(rec, spec.serdes or JSON_SERDES, ChildContextError)
    if done:
        return BatchResult.from_dict(recorded)
    if rec is None:
        rec = scope.new(op_id, OpType.CONTEXT, spec.kind, name)
        await inv.save(rec, inv.event("ContextStarted", rec), wait=False)

    item_serdes = spec.item_serdes or spec.serdes or JSON_SERDES
    results: dict[int, BatchItem] = {}
    suspended: dict[int, SuspendExecution] = {}
    running: dict[int, asyncio.Task[None]] = {}
    total = len(spec.branches)
    limit = spec.max_concurrency or total or 1
    next_index = 0

    async def run_one(index: int) -> None:
        bname, fn = spec.branches[index]
        branch_id = f"{op_id}-{index + 1}"
        try:
            if spec.nesting is NestingType.FLAT:
                value = await fn(scope.context_of(inv, branch_id, op_id))
                results[index] = BatchItem(index, "SUCCEEDED", value)
                return
            value = await scope.child_at(branch_id, fn, bname, spec.item_sub_type, item_serdes,
                                        parent_id=op_id)
            results[index] = BatchItem(index, "SUCCEEDED", value)
        except SuspendExecution as exc:
            suspended[index] = exc
        except Exception as exc:
            results[index] = BatchItem(index, "FAILED", None, error_object(exc))

    reason: str | None = None

    async def drive() -> str | None:
        nonlocal next_index
        # The batch owns its branches: when the policy ends it, or a branch dies of
        # something no branch may survive (a crash, a replay error), the branches still
        # running are cancelled and awaited before the batch returns or raises.
        async with asyncio.TaskGroup() as group:
            while True:
                succeeded = sum(1 for r in results.values() if r.status == "SUCCEEDED")
                failed = len(results) - succeeded
                active = len(running) + len(suspended)
                why = completion(cfg, total, succeeded, failed, active, total - next_index)
                if why is not None:
                    break
                while next_index < total and len(running) + len(suspended) < limit:
                    running[next_index] = group.create_task(run_one(next_index))
                    next_index += 1
                if not running:
                    break  # every started branch is suspended and no slot is free
                done, _ = await asyncio.wait(running.values(),
                                             return_when=asyncio.FIRST_COMPLETED)
                for index in [i for i, t in running.items() if t in done]:
                    running.pop(index)
            for task in running.values():
                task.cancel()
        return why

    try:
        reason = await drive()
    except BaseExceptionGroup as failure:
        raise _first_cause(failure) from None
    if reason is None:
        until = [s.until_ms for s in suspended.values() if s.until_ms is not None]
        first = next(iter(suspended.values()))
        raise SuspendExecution(f"{spec.kind.lower()} {name or op_id!r}: {first.reason}",
                               min(until) if until else None, first.op_id)
    items = [results.get(i) or BatchItem(i, "STARTED") for i in sorted(
        set(results) | set(suspended) | set(running))]
    batch = BatchResult(items, reason)
    text = (spec.serdes or JSON_SERDES).serialize(batch.to_dict())
    advance(rec, OpStatus.SUCCEEDED)
    rec.result, rec.ended_ms = text, scope.clock_ms()
    await inv.save(rec, inv.event("ContextSucceeded", rec, {"Result": payload(text)}))
    return batch


def _first_cause(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The branch error that ended the batch (the group wraps it; callers expect it)."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return _first_cause(exc)
        if not isinstance(exc, asyncio.CancelledError):
            return exc
    return group.exceptions[0]
