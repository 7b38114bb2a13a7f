"""The replay check: replay a recorded log against a handler, running nothing.

Before a redrive or a fork (and on demand) the handler version that would run is
replayed over the log in replay-only mode: every operation with a recorded outcome
returns it, no step body runs, nothing is written, and the run stops
(`ReplayFrontier`) where it would first run or write something. A deadline bounds
it (handler code between operations could loop). The report names the first
place where handler and log disagree, or says "replays cleanly".
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from alarmtop.core.kernel.executions.context import DurableContext
from alarmtop.core.kernel.executions.invocation import Invocation
from alarmtop.core.model.divergence import Divergence
from alarmtop.core.model.execution_errors import (
    ExecutionAborted,
    NonDeterministicExecutionError,
    ReplayFrontier,
    SuspendExecution,
)
from alarmtop.core.model.operations import ExecutionRecord, OperationRecord
from alarmtop.core.model.replay import position, shape_of

if TYPE_CHECKING:
    from alarmtop.core.kernel.executions.functions import DurableFunction
    from alarmtop.core.kernel.faults import FaultRegistry
    from alarmtop.core.ports import Clock, ExecutionLog

CLEAN = "replays cleanly"
DEFAULT_DEADLINE_S = 10.0


def _copy(ops: Mapping[str, OperationRecord]) -> dict[str, OperationRecord]:
    # The run may advance a record before it reaches the write it stops at.
    return {k: OperationRecord.from_dict(v.to_dict()) for k, v in ops.items()}


async def replay_check(fn: DurableFunction, record: ExecutionRecord,
                       ops: Mapping[str, OperationRecord], marks: Mapping[str, str], *,
                       store: ExecutionLog, clock: Clock, faults: FaultRegistry,
                       input_text: str | None = None,
                       deadline_s: float = DEFAULT_DEADLINE_S) -> dict[str, Any]:
    """Replay `ops` (and `marks`) against `fn` in replay-only mode; a JSON-ready report.

    `store` and `faults` are never used by a replay-only run (it stops before any
    write or body); they fill the invocation's slots."""
    rec = ExecutionRecord.from_dict(record.to_dict())
    inv = Invocation(rec, _copy(ops), 1, store, clock, faults, random.Random(0), dict(marks),
                     replay_only=True)
    text = record.input if input_text is None else input_text
    ended, stop, divergence, result = "returned", None, None, None
    try:
        async with asyncio.timeout(deadline_s):
            result = await fn.fn(json.loads(text), DurableContext(inv))
    except NonDeterministicExecutionError as exc:
        ended, divergence = "diverged", exc.divergence
    except ReplayFrontier as exc:
        ended, stop = "frontier", {"op_id": exc.op_id, "reason": exc.reason}
    except SuspendExecution as exc:
        ended, stop = "suspended", {"op_id": exc.op_id, "reason": exc.reason}
    except ExecutionAborted:
        ended = "aborted"
    except TimeoutError:
        ended = "timeout"
    except Exception as exc:  # the handler raised: a recorded failure replayed, most often
        ended, stop = "raised", {"op_id": None, "reason": f"{type(exc).__name__}: {exc}"}
    if divergence is None and ended in ("returned", "raised", "aborted"):
        divergence = _not_called(ops, inv.visited)
    report = _report(fn, record, ops, inv.visited, ended, stop, divergence, deadline_s)
    if ended == "returned":
        report["result"] = _jsonable(result)  # what the replayed handler returned
    return report


def _jsonable(value: Any) -> Any:
    # The report crosses RPC and the wire: a value that is not JSON goes as its repr.
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return repr(value)


def _not_called(ops: Mapping[str, OperationRecord], visited: list[str]) -> Divergence | None:
    """The first top-level operation of the log the finished handler never called.

    Only top-level ones: a context replayed from its recorded result never visits
    its children, rightly."""
    seen = set(visited)
    missing = sorted((i for i in ops if "-" not in i and i not in seen), key=position)
    if not missing:
        return None
    return Divergence(missing[0], len(visited), shape_of(ops[missing[0]]), None)


def _report(fn: DurableFunction, record: ExecutionRecord, ops: Mapping[str, OperationRecord],
            visited: list[str], ended: str, stop: dict[str, Any] | None,
            divergence: Divergence | None, deadline_s: float) -> dict[str, Any]:
    replayed = len({v for v in visited if v in ops})
    if divergence is not None:
        summary = divergence.message()
    elif ended == "timeout":
        summary = (f"the replay did not finish within {deadline_s:g}s (the handler may wait "
                   "on something outside its operations); it cannot be called clean")
    else:
        summary = CLEAN
    return {"execution_id": record.id, "name": fn.name, "version": fn.version,
            "clean": summary == CLEAN, "summary": summary,
            "divergence": None if divergence is None else divergence.to_dict(),
            "ended": ended, "stopped_at": stop, "replayed": replayed, "recorded": len(ops)}
