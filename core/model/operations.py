"""Operation records (the checkpoint log) and history events, as plain data.

An operation is keyed by its id (its position among its siblings, prefixed by
its parent's id), never by time, so replay finds the same record for the same
call. History events follow the AWS durable execution model: PascalCase keys,
`EventId` numbered from 1 per execution, a `<EventType>Details` object on every
event, payloads as serialized text.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

# The class name every execution's durable object is registered under.
EXECUTION_CLASS = "Execution"


class OpType(enum.StrEnum):
    STEP = "STEP"
    WAIT = "WAIT"
    CALLBACK = "CALLBACK"
    CONTEXT = "CONTEXT"
    CHAINED_INVOKE = "CHAINED_INVOKE"


class OpStatus(enum.StrEnum):
    STARTED = "STARTED"
    PENDING = "PENDING"  # a retry is scheduled
    READY = "READY"  # the retry time has come
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"
    CANCELLED = "CANCELLED"
    STOPPED = "STOPPED"  # an invoke whose child execution was stopped


TERMINAL = frozenset({OpStatus.SUCCEEDED, OpStatus.FAILED, OpStatus.TIMED_OUT,
                      OpStatus.CANCELLED, OpStatus.STOPPED})


@dataclass
class OperationRecord:
    id: str
    type: OpType
    sub_type: str
    name: str | None
    parent_id: str | None
    status: OpStatus = OpStatus.STARTED
    attempt: int = 0
    result: str | None = None  # serialized payload
    error: dict[str, Any] | None = None  # ErrorObject
    next_attempt_ms: int | None = None
    scheduled_end_ms: int | None = None
    duration_s: int | None = None
    callback_id: str | None = None
    timeout_s: int | None = None
    heartbeat_timeout_s: int | None = None
    timeout_at_ms: int | None = None
    heartbeat_at_ms: int | None = None
    started_ms: int | None = None
    ended_ms: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.status in TERMINAL

    def deadlines(self) -> list[int]:
        """Times at which the service must act on this operation."""
        if self.status is OpStatus.PENDING and self.next_attempt_ms is not None:
            return [self.next_attempt_ms]
        if self.status is OpStatus.STARTED:
            return [t for t in (self.scheduled_end_ms, self.timeout_at_ms, self.heartbeat_at_ms)
                    if t is not None]
        return []

    def to_dict(self) -> dict[str, Any]:
        """The stored form: unset fields are left out (`from_dict` restores them).

        Shallow on purpose: it is serialized at once, and a deep copy of every record
        at every checkpoint was the largest cost of a durable step.
        """
        d = {k: v for k, v in self.__dict__.items() if v is not None}
        if not self.extra:
            del d["extra"]
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> OperationRecord:
        d = dict(d)
        d["type"], d["status"] = OpType(d["type"]), OpStatus(d["status"])
        d.setdefault("name", None)
        d.setdefault("parent_id", None)
        return OperationRecord(**d)


@functools.lru_cache(maxsize=64)
def iso(ms: int) -> str:
    # Cached: the events of one checkpoint, and of executions running side by side,
    # mostly share their millisecond.
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def payload(text: str | None) -> dict[str, Any]:
    return {"Payload": text, "Truncated": False}


def error_payload(error: dict[str, Any] | None) -> dict[str, Any]:
    return {"Payload": error or {}, "Truncated": False}


def make_event(event_id: int, event_type: str, at_ms: int, op: OperationRecord | None = None,
               details: dict[str, Any] | None = None) -> dict[str, Any]:
    """One history event; `<EventType>Details` is always present, even when empty."""
    ev: dict[str, Any] = {"EventId": event_id, "EventType": event_type,
                          "EventTimestamp": iso(at_ms)}
    if op is not None:
        ev["Id"] = op.id
        ev["SubType"] = op.sub_type
        if op.name is not None:
            ev["Name"] = op.name
        if op.parent_id is not None:
            ev["ParentId"] = op.parent_id
    ev[f"{event_type}Details"] = details or {}
    return ev


class ExecutionStatus(enum.StrEnum):
    RUNNING = "running"
    SUSPENDED = "suspended"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    NEEDS_HUMAN = "needs_human"
    ABORTED = "aborted"


FINISHED = frozenset({ExecutionStatus.SUCCEEDED, ExecutionStatus.FAILED,
                      ExecutionStatus.TIMED_OUT, ExecutionStatus.ABORTED})


@dataclass
class ExecutionRecord:
    """One execution's row; `meta` holds the engine's small bookkeeping."""

    id: str
    name: str
    version: str
    status: ExecutionStatus
    input: str
    created_ms: int
    updated_ms: int
    result: str | None = None
    error: dict[str, Any] | None = None
    ended_ms: int | None = None
    timeout_s: int | None = None
    in_invocation: bool = False
    invoke_requested: bool = False
    invocations: int = 0
    human_hold: str | None = None  # why it was handed to a human, when it was
    blocked_on: str | None = None  # what the last invocation suspended on
    saga: list[dict[str, Any]] = field(default_factory=list)  # operator view only
    parent: str | None = None  # execution that invoked this one
    paused: str | None = None  # why an operator paused it, while paused
    paused_ms: int | None = None
    redrives: int = 0  # how many times it was redriven
    # When the execution timeout started counting (a redrive restarts it); None: at
    # creation.
    timeout_start_ms: int | None = None
    forked_from: dict[str, Any] | None = None  # {"execution_id", "from_operation"}
    # Whether ctx.now()/random() values were recorded: only then is the marks table
    # read when the execution loads (most executions never take one).
    has_marks: bool = False
    # What the lifecycle plugins asked to carry from the task that started it (say, the
    # caller's trace context): its invocations are told it. None: nothing asked.
    trace: dict[str, str] | None = None
    # An execution of a Lambda-style function (the AWS SDK's handlers): the service
    # side's bookkeeping, `model.aws_state.AwsState` as a dict. None: a native one.
    aws: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def timeout_at_ms(self) -> int | None:
        """When the execution times out, if it has a timeout."""
        if not self.timeout_s:
            return None
        start = self.created_ms if self.timeout_start_ms is None else self.timeout_start_ms
        return start + self.timeout_s * 1000

    def to_dict(self) -> dict[str, Any]:
        """Shallow, like `OperationRecord.to_dict`: it is serialized at once."""
        return dict(self.__dict__)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> ExecutionRecord:
        d = dict(d)
        d["status"] = ExecutionStatus(d["status"])
        return ExecutionRecord(**d)
