"""What a lifecycle hook is told: one small frozen value per hook (see `core.hooks`).

The execution hooks mirror the AWS durable execution SDK's plugin interface
(`InvocationStartInfo`, `OperationEndInfo`, `UserFunctionEndInfo`, ... with the
same field names where they mean the same thing), so a plugin written for it
ports with few changes. Object events, alarm attempts and operator commands
have the same shape: a start value, and an end value that holds its start
(`end.start is` the value the start hook got) plus the outcome.

Infos compare by identity (`eq=False`): a plugin may key what it keeps between
a start and its end by the start value itself. They are built only when some
plugin has the hook, so their cost is not on the path of a runtime without one.
Times are epoch milliseconds of the runtime clock.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the durable package imports this module
    from alarmtop.core.model.operations import OpStatus, OpType

Carrier = Mapping[str, str]  # propagation metadata: text keys and values (W3C headers)


class Outcome(enum.StrEnum):
    """How an object event or an operator command ended."""

    OK = "ok"
    ERROR = "error"  # it raised; an object event's writes are kept (it committed)
    ABANDONED = "abandoned"  # nothing of it was kept: its commit failed, or it was cut off


class AlarmOutcome(enum.StrEnum):
    """What became of an alarm after one attempt."""

    OK = "ok"
    RETRY_SCHEDULED = "retry_scheduled"
    DEAD = "dead"
    # The attempt's end could not be made durable (or the runtime stopped during it):
    # it is counted and retried as after a crash.
    ABANDONED = "abandoned"


class InvocationStatus(enum.StrEnum):
    """The AWS SDK's invocation status tokens."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    PENDING = "PENDING"  # suspended: a wait, a callback, a retry, a human
    RETRY = "RETRY"  # the invocation died (a crash, a refused checkpoint): run again


class UserFunctionOutcome(enum.StrEnum):
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


# -- objects ----------------------------------------------------------------------------

@dataclass(frozen=True, eq=False, slots=True)
class ObjectEventInfo:
    """An event of an object starts: `event` is "call", "alarm" or "socket"."""

    object_class: str
    object_name: str
    event: str
    method: str | None
    start_ms: int
    propagation: Carrier | None = None  # what the calling node sent (fleet calls)


@dataclass(frozen=True, eq=False, slots=True)
class ObjectEventEndInfo:
    """The event ended, after its commit (or after its commit failed: `ABANDONED`)."""

    start: ObjectEventInfo
    outcome: Outcome
    end_ms: int
    error: BaseException | None = None

    @property
    def object_class(self) -> str:
        return self.start.object_class

    @property
    def object_name(self) -> str:
        return self.start.object_name


# -- alarms -----------------------------------------------------------------------------

@dataclass(frozen=True, eq=False, slots=True)
class AlarmAttemptInfo:
    """An attempt of an object's alarm starts; its start is durable already."""

    object_class: str
    object_name: str
    scheduled_ms: int
    retry_count: int
    max_retries: int
    start_ms: int

    @property
    def is_retry(self) -> bool:
        return self.retry_count > 0


@dataclass(frozen=True, eq=False, slots=True)
class AlarmAttemptEndInfo:
    """The attempt's end is recorded: what the alarm does next."""

    start: AlarmAttemptInfo
    outcome: AlarmOutcome
    end_ms: int
    error: str | None = None
    next_attempt_ms: int | None = None  # the retry's time, or the next alarm the handler set

    @property
    def retry_count(self) -> int:
        return self.start.retry_count


# -- executions -------------------------------------------------------------------------

@dataclass(frozen=True, eq=False, slots=True)
class InvocationStartInfo:
    """An invocation of an execution's handler starts (before the handler runs)."""

    execution_id: str
    name: str
    version: str
    invocation: int  # 1 for the first
    is_first_invocation: bool
    start_ms: int
    execution_start_ms: int
    propagation: Carrier | None = None  # recorded when the execution started

    @property
    def execution_arn(self) -> str:
        """The SDK's name for the execution's identity."""
        return self.execution_id

    @property
    def request_id(self) -> str:
        """As in the history's `InvocationCompleted` event."""
        return f"{self.execution_id}/{self.invocation}"


@dataclass(frozen=True, eq=False, slots=True)
class InvocationEndInfo:
    """The invocation ended and its outcome is durable (fired after the commit)."""

    start: InvocationStartInfo
    status: InvocationStatus
    end_ms: int
    execution_status: str  # the engine's finer status: suspended, needs_human, aborted...
    error: dict[str, Any] | None = None  # ErrorType, ErrorMessage

    @property
    def execution_id(self) -> str:
        return self.start.execution_id

    @property
    def execution_arn(self) -> str:
        return self.start.execution_id

    @property
    def is_first_invocation(self) -> bool:
        return self.start.is_first_invocation


@dataclass(frozen=True, eq=False, slots=True)
class OperationStartInfo:
    """An operation starts: the first time its handler reaches it (never on replay)."""

    execution_id: str
    operation_id: str
    operation_type: OpType
    sub_type: str
    name: str | None
    parent_id: str | None
    start_ms: int


@dataclass(frozen=True, eq=False, slots=True)
class OperationEndInfo:
    """An operation reached its terminal status, durably (once: never on replay)."""

    execution_id: str
    operation_id: str
    operation_type: OpType
    sub_type: str
    name: str | None
    parent_id: str | None
    status: OpStatus
    start_ms: int | None
    end_ms: int
    attempt: int | None = None
    error: dict[str, Any] | None = None
    propagation: Carrier | None = field(default=None, repr=False)


@dataclass(frozen=True, eq=False, slots=True)
class UserFunctionStartInfo:
    """One attempt of a step's body (or a condition's check) is about to run."""

    execution_id: str
    operation_id: str
    operation_type: OpType
    sub_type: str
    name: str | None
    parent_id: str | None
    attempt: int
    start_ms: int


@dataclass(frozen=True, eq=False, slots=True)
class UserFunctionEndInfo:
    """The attempt's body returned or raised (before its checkpoint)."""

    start: UserFunctionStartInfo
    outcome: UserFunctionOutcome
    end_ms: int
    error: dict[str, Any] | None = None
    exception: BaseException | None = None

    @property
    def operation_id(self) -> str:
        return self.start.operation_id

    @property
    def operation_type(self) -> OpType:
        return self.start.operation_type

    @property
    def attempt(self) -> int:
        return self.start.attempt


# -- operators --------------------------------------------------------------------------

@dataclass(frozen=True, eq=False, slots=True)
class CommandInfo:
    """An ops-channel command (or query) starts; `target` is what it acts on."""

    op: str
    target: str | None
    role: str
    client: str
    query: bool
    start_ms: int


@dataclass(frozen=True, eq=False, slots=True)
class CommandEndInfo:
    start: CommandInfo
    outcome: Outcome  # ABANDONED: no outcome within its deadline (it may still finish)
    end_ms: int
    error: BaseException | None = None
