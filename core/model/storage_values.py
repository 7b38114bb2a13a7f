"""Values storage hands back to the kernel: a statement's result, the counters, a
listed object, an invocation's chain of log writes (pure)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from alarmtop.core.model.alarm_policy import AlarmState


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one SQL statement run for an object."""

    columns: tuple[str, ...]
    rows: list[dict[str, Any]]
    rows_written: int


@dataclass(frozen=True)
class Counts:
    """The counts an operator watches, kept by the backend with the writes that change
    them (in the same transaction), so reading them costs nothing however many rows
    there are, and they are exact after any crash.

    `retries` counts alarms retrying or running a retry, by (class, retry count):
    whether such an alarm is near exhaustion depends on its class's policy, which
    the runtime knows and the backend does not (`near_exhaustion`).
    """

    alarms: Mapping[str, int] = field(default_factory=dict)  # by state
    retries: Mapping[tuple[str, int], int] = field(default_factory=dict)
    executions: Mapping[str, int] = field(default_factory=dict)  # by status
    stored: int = 0  # objects that have a database of their own
    known: int = 0  # objects known at all: a database, an alarm row or an execution

    def near_exhaustion(self, max_retries: Callable[[str], int]) -> int:
        """Alarms whose next failure makes them dead letters, given each class's limit."""
        return sum(n for (cls, retries), n in self.retries.items()
                   if retries >= max_retries(cls))

    def by_state(self) -> dict[str, int]:
        """Alarms by state, every state named (0 where there is none)."""
        counts = {s.value: 0 for s in AlarmState}
        counts.update(self.alarms)
        return counts

    def retry_rows(self) -> list[tuple[str, int, int]]:
        """(class, retry count, how many) over alarms retrying or running a retry."""
        return [(cls, retries, n) for (cls, retries), n in self.retries.items()]


class ObjectEntry(NamedTuple):
    """An object the runtime knows of, as the objects listing shows it."""

    object_class: str
    object_name: str
    stored: bool  # it has a database of its own
    execution: bool  # it is an execution (its log lives in the runtime's database)
    alarm_state: str | None
    next_attempt_ms: int | None
    alarm_paused: bool = False  # an operator paused its alarm


class LogChain:
    """The writes of one invocation's log, which land in order or not at all.

    An invocation queues some checkpoints without waiting for them (its start, a
    step's start): a later one implies the earlier ones. That holds for a death (the
    queue goes in order), not for a refused write (a lock fails one batch, the next
    lands). Once a write of the chain is refused, every later one refuses too, so the
    log never has a hole: the invocation is abandoned and retried from what landed."""

    __slots__ = ("broken",)

    def __init__(self) -> None:
        self.broken = False
