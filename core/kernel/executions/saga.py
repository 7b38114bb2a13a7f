"""Sagas: a compensation stack rebuilt by replay, never stored.

`push` after a step succeeded; `compensate` runs the stack in reverse, each entry
as its own checkpointed step `compensate_<name>`. Once compensation starts (or
the pivot is passed) the saga is no longer compensable. A compensation that
still fails after its retries does not restart the rollback: it waits for a
human (retry it, resolve it by hand, or abort), and what was already
compensated is never run again, because replay returns those steps' records.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from alarmtop.core.kernel.executions.scope import OperationScope
from alarmtop.core.model.execution_config import Duration, RetryPresets, StepConfig
from alarmtop.core.model.execution_errors import StepError, ValidationError


class StepRunner(Protocol):
    """What a saga runs its compensations with: the context's own `step`."""

    async def step(self, fn: Callable[..., Any], *args: Any, name: str | None = None,
                   config: StepConfig | None = None) -> Any: ...

# Compensations retry 3 attempts, 1 s apart, before a human is asked.
COMPENSATION_CONFIG = StepConfig(retry_strategy=RetryPresets.fixed(Duration(1), max_attempts=3))


class EntryState(enum.StrEnum):
    PENDING = "pending"
    COMPENSATING = "compensating"
    COMPENSATED = "compensated"
    FAILED = "failed"
    RESOLVED = "resolved"


@dataclass
class SagaEntry:
    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    state: EntryState = EntryState.PENDING
    note: str | None = None
    error: str | None = None
    rounds: int = 0  # how many times an operator asked for a retry

    def view(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "state": self.state.value,
                               "step": f"compensate_{self.name}"}
        if self.error:
            out["error"] = self.error
        if self.note:
            out["note"] = self.note
        if self.rounds:
            out["operator_retries"] = self.rounds
        return out


@dataclass
class Saga:
    ctx: StepRunner
    scope: OperationScope  # the context's operations (a failed compensation asks a human)
    entries: list[SagaEntry] = field(default_factory=list)
    pivoted: bool = False
    compensating: bool = False

    @property
    def compensable(self) -> bool:
        return not (self.pivoted or self.compensating)

    def push(self, name: str, fn: Callable[..., Any], *args: Any) -> None:
        """Register the compensation of step `name`; call it after that step succeeded."""
        if not self.compensable:
            raise ValidationError(f"cannot push {name!r}: the saga is past its pivot or "
                                  "already compensating")
        self.entries.append(SagaEntry(name, fn, args))

    def pivot(self) -> None:
        """From here on the saga goes forward only: nothing will be compensated."""
        self.pivoted = True

    async def compensate(self) -> list[dict[str, Any]]:
        """Undo the pushed steps in reverse; returns the final stack view."""
        self.compensating = True
        for entry in reversed(self.entries):
            await self._undo(entry)
        return self.view()

    async def _undo(self, entry: SagaEntry) -> None:
        while True:
            entry.state = EntryState.COMPENSATING
            try:
                await self.ctx.step(entry.fn, *entry.args, name=f"compensate_{entry.name}",
                                    config=COMPENSATION_CONFIG)
            except StepError as exc:
                entry.state, entry.error = EntryState.FAILED, exc.message
                decision = await self.scope.human_decision(f"compensate_{entry.name}", exc)
                if decision.get("action") == "retry":
                    entry.rounds += 1
                    continue
                entry.state, entry.note = EntryState.RESOLVED, decision.get("note")
                return
            entry.state, entry.error = EntryState.COMPENSATED, None
            return

    def view(self) -> list[dict[str, Any]]:
        """The stack as operators see it, top (last pushed) first."""
        return [e.view() for e in reversed(self.entries)]
