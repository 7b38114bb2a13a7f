"""The execution tools as an operator reads them: pure, no Textual.

What a replay check found (`replay_check` answers, `core/durable/check.py`), in
words for a confirmation and a result line; the operations of an execution a
fork can start from (from its history); and whether a divergence matters to a
fork from a given operation (one the fork resets does not).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CLEAN = "replays cleanly"
# History event types that end in one of these name an operation's kind before them.
_PHASES = ("Started", "Succeeded", "Failed", "TimedOut", "Stopped", "Cancelled", "Scheduled",
           "Retried", "Redriven", "Completed")
_NOT_OPERATIONS = ("Execution", "Invocation")


def shape_text(shape: dict[str, Any] | None) -> str:
    """One operation's kind and name as the log or the handler has it: "Step 'charge'"."""
    if shape is None:
        return "nothing (the handler no longer calls it)"
    name = shape.get("name")
    return f"{shape.get('kind') or shape.get('type') or '?'} " + (
        repr(name) if name is not None else "(no name)")


def divergence_lines(report: dict[str, Any]) -> list[str]:
    """Where a replay check found the handler and the log disagree, as lines."""
    div = report.get("divergence")
    if not div:
        return []
    return [f"first divergence at operation {div.get('op_id')} "
            f"(operation index {div.get('index')}):",
            f"  recorded: {shape_text(div.get('recorded'))}",
            f"  handler now: {shape_text(div.get('current'))}"]


def replay_lines(report: dict[str, Any]) -> list[str]:
    """A replay check's whole answer: its verdict, then what it replayed."""
    version = f"version {report.get('version', '?')}"
    if report.get("clean"):
        lines = [f"{CLEAN} against {version}"]
    elif report.get("divergence"):
        lines = [f"does NOT replay against {version}", *divergence_lines(report)]
    else:
        lines = [f"not clean against {version}: {report.get('summary', '?')}"]
    replayed = (f"{report.get('replayed', '?')} of {report.get('recorded', '?')} recorded "
                "operations replayed")
    stop = report.get("stopped_at") or {}
    if stop.get("reason"):
        where = f" at operation {stop['op_id']}" if stop.get("op_id") else ""
        replayed += f"; it stopped{where}: {stop['reason']}"
    return [*lines, replayed]


def replay_verdict(report: dict[str, Any]) -> str:
    """One line for the status line: "replays cleanly", or where it first diverges."""
    if report.get("clean"):
        return f"{CLEAN} (version {report.get('version', '?')})"
    div = report.get("divergence")
    if div:
        return (f"diverges at operation {div.get('op_id')} (index {div.get('index')}): "
                f"recorded {shape_text(div.get('recorded'))}, handler now "
                f"{shape_text(div.get('current'))}")
    return str(report.get("summary") or "not clean")


@dataclass(frozen=True)
class Operation:
    """An operation of an execution, as its history names it."""

    op_id: str
    name: str | None
    kind: str  # Step, Wait, Callback, Context, ...

    def label(self) -> str:
        return f"{self.op_id}  {self.kind} {self.name or ''}".rstrip()


def event_kind(event_type: str) -> str:
    """"StepStarted" -> "Step", "ChainedInvokeSucceeded" -> "ChainedInvoke"."""
    for phase in _PHASES:
        if event_type.endswith(phase) and len(event_type) > len(phase):
            return event_type[:-len(phase)]
    return event_type


def operations(history: list[dict[str, Any]]) -> list[Operation]:
    """Every operation of a history, in the order it first appears (replay order)."""
    seen: dict[str, Operation] = {}
    for ev in history:
        op_id, kind = ev.get("Id"), str(ev.get("EventType", ""))
        if op_id is None or kind.startswith(_NOT_OPERATIONS) or str(op_id) in seen:
            continue
        seen[str(op_id)] = Operation(str(op_id), ev.get("Name"), ev.get("SubType")
                                     or event_kind(kind))
    return sorted(seen.values(), key=lambda op: position(op.op_id))


def position(op_id: str) -> tuple[int, ...]:
    """An operation id as its path of positions ("2-1" is (2, 1)): replay order. An id
    that is not such a path sorts last."""
    try:
        return tuple(int(p) for p in str(op_id).split("-"))
    except ValueError:
        return (1 << 62,)


def kept_by_fork(op_id: str, from_id: str) -> bool:
    """Whether a fork from `from_id` keeps `op_id`'s recorded result (the rule of
    `core/durable/replay.is_reset`: the operation, what follows it and the contexts
    holding it are reset)."""
    mine, start = position(op_id), position(from_id)
    return not (mine >= start or start[:len(mine)] == mine)


def fork_summary(report: dict[str, Any], ops: list[Operation], from_id: str) -> str:
    """What a fork from `from_id` keeps and what it runs anew, and whether what it keeps
    replays: the line of the fork form that follows its "from" (the check itself is of
    the whole log, the same whatever "from" says)."""
    kept = [op for op in ops if kept_by_fork(op.op_id, from_id)]
    what = (f"A fork from operation {from_id} keeps the recorded results of {len(kept)} of "
            f"{len(ops)} operations and runs the rest anew")
    if not kept:
        return what + ": it keeps nothing to replay."
    div = report.get("divergence")
    if report.get("clean"):
        return what + "; what it keeps replays cleanly."
    if div and not kept_by_fork(str(div.get("op_id")), from_id):
        return what + "; what it keeps replays cleanly (the divergence is after it)."
    if div:
        return what + f"; operation {div.get('op_id')}, among what it keeps, does NOT replay."
    return what + "; the check could not tell whether what it keeps replays."


def fork_needs_force(report: dict[str, Any], from_id: str) -> bool:
    """Whether a replay check of the whole log refuses a fork from `from_id`: only a
    divergence at an operation the fork keeps does (one it resets runs anew)."""
    if report.get("clean"):
        return False
    div = report.get("divergence")
    if not div:
        return True  # not clean and no place named (a timeout): it cannot be called clean
    return kept_by_fork(str(div.get("op_id")), from_id)
