"""Where a redrive or a fork of an AWS SDK execution cuts its record (pure).

The SDK names operations by hash, so their order is the order they were first
checkpointed (`aws_delta.order`), not their ids. A cut at an operation drops it,
every operation created after it, and the contexts that hold it (a context kept
closed would replay its recorded result and never reach it again); the rest is
kept and the SDK replays it client-side. What was dropped is kept as the shapes
the re-run is expected to make again, in order: the service compares the re-run's
new operations with them as they come (the replay check of an SDK execution).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from alarmtop.core.model.aws_delta import order
from alarmtop.core.model.execution_errors import ValidationError
from alarmtop.core.model.operations import OperationRecord, OpStatus

FAILED = frozenset({OpStatus.FAILED, OpStatus.TIMED_OUT, OpStatus.CANCELLED, OpStatus.STOPPED})


@dataclass(frozen=True)
class Cut:
    from_id: str | None  # None: nothing is dropped (the re-run carries on)
    kept: tuple[str, ...]
    dropped: tuple[str, ...]
    expect: tuple[dict[str, Any], ...]


def _ancestors(ops: Mapping[str, OperationRecord], op_id: str) -> list[str]:
    out: list[str] = []
    parent = ops[op_id].parent_id
    while parent is not None and parent in ops and parent not in out:
        out.append(parent)
        parent = ops[parent].parent_id
    return out


def shape(op: OperationRecord) -> dict[str, Any]:
    return {"type": op.type.value, "sub_type": op.sub_type or "", "name": op.name,
            "parent_id": op.parent_id}


def cut_at(ops: Mapping[str, OperationRecord], from_id: str | None) -> Cut:
    ordered = sorted(ops.values(), key=order)
    if from_id is None:
        return Cut(None, tuple(op.id for op in ordered), (), ())
    at = order(ops[from_id])
    drop = {op.id for op in ordered if order(op) >= at} | set(_ancestors(ops, from_id))
    dropped = [op for op in ordered if op.id in drop]
    return Cut(from_id, tuple(op.id for op in ordered if op.id not in drop),
               tuple(op.id for op in dropped), tuple(shape(op) for op in dropped))


def first_failed(ops: Mapping[str, OperationRecord]) -> str | None:
    """The first failed operation that is not failed only because a child failed."""
    failed = [op for op in ops.values() if op.status in FAILED]
    holding = {a for op in failed for a in _ancestors(ops, op.id)}
    leaves = sorted((op for op in failed if op.id not in holding), key=order)
    return leaves[0].id if leaves else None


def redrive_cut(ops: Mapping[str, OperationRecord]) -> Cut:
    return cut_at(ops, first_failed(ops))


def fork_point(ops: Mapping[str, OperationRecord], from_step: Any) -> str:
    """The operation a fork starts from: an operation id, or a name that occurs once."""
    if not isinstance(from_step, str) or not from_step:
        raise ValidationError(f"from_step names an operation or gives its id, not "
                              f"{from_step!r}")
    if from_step in ops:
        return from_step
    named = sorted((op for op in ops.values() if op.name == from_step), key=order)
    if len(named) == 1:
        return named[0].id
    if not named:
        known = sorted({op.name for op in ops.values() if op.name}) or ["none"]
        raise ValidationError(f"the execution has no operation named or with id "
                              f"{from_step!r}; its names: {', '.join(known)}")
    raise ValidationError(f"the name {from_step!r} occurs {len(named)} times (operation ids "
                          f"{', '.join(op.id for op in named)}); give the operation id of the "
                          "one to fork from")


def replay_report(execution_id: str, aws: Mapping[str, Any]) -> dict[str, Any]:
    """The replay check of an SDK execution: its re-run compared with the record."""
    expect = aws.get("expect") or []
    divergence = aws.get("divergence")
    compared = int(aws.get("compared") or 0)
    if divergence is not None:
        summary = (f"the re-run made {divergence['found']} where the record had "
                   f"{divergence['expected']} (operation {divergence['index'] + 1} after the cut)")
    elif not expect:
        summary = ("nothing to compare: the SDK replays the kept operations itself and "
                   "refuses a handler that no longer matches them")
    else:
        summary = f"replays cleanly so far ({compared} of {len(expect)} operations compared)"
    return {"execution_id": execution_id, "clean": divergence is None, "summary": summary,
            "mode": "client-side", "compared": compared, "recorded": len(expect),
            "divergence": divergence}
