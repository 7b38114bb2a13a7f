"""One run of a handler: the log it replays, its event numbering, its checkpoints."""

from __future__ import annotations

import asyncio
import contextvars
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from alarmtop.core.kernel.executions import execution_hooks
from alarmtop.core.kernel.faults import FaultRegistry, InjectedFault
from alarmtop.core.kernel.hooks import NO_HOOKS, Hooks
from alarmtop.core.model.errors import StorageError
from alarmtop.core.model.execution_errors import CheckpointFailed, InvocationCrash, ReplayFrontier
from alarmtop.core.model.operations import ExecutionRecord, OperationRecord, make_event
from alarmtop.core.model.storage_values import LogChain
from alarmtop.core.ports import Clock, ExecutionLog

# The step whose body is running, for the idempotency ledger and faults.
current_step: contextvars.ContextVar[tuple[str, str, str] | None] = contextvars.ContextVar(
    "alarmtop_current_step", default=None)


class SagaView(Protocol):
    """A saga of the invocation, as the execution's record shows its stack."""

    def view(self) -> list[dict[str, Any]]: ...


# Announces history events once their checkpoint has landed.
Announce = Callable[[ExecutionRecord, Sequence[dict[str, Any]]], None]


class Invocation:
    """One run of a handler: the log it replays, event numbering, checkpoints."""

    def __init__(self, record: ExecutionRecord, ops: dict[str, OperationRecord],
                 next_event_id: int, store: ExecutionLog, clock: Clock,
                 faults: FaultRegistry, rng: random.Random,
                 marks: dict[str, str] | None = None, *, replay_only: bool = False,
                 hooks: Hooks = NO_HOOKS, announce: Announce | None = None,
                 start_child: Callable[..., Awaitable[str]] | None = None) -> None:
        self.record = record
        self.ops = ops
        self.next_event_id = next_event_id
        self.store = store
        self.clock = clock
        self.faults = faults
        self.rng = rng
        self.sagas: list[SagaView] = []
        self.chain = LogChain()  # its writes land in order or not at all
        self.replaying_until = len(ops)
        # Values `now()` and `random()` gave, by `replay.mark_key`; new ones ride the
        # next checkpoint (whatever used them lands with or after them).
        self.marks = marks if marks is not None else {}
        self.new_marks: dict[str, str] = {}
        # A replay-only run (the replay check) runs no body and writes nothing: it
        # stops (`ReplayFrontier`) where it would; `visited` says what it replayed.
        self.replay_only = replay_only
        self.visited: list[str] = []
        self.met = 0  # operations looked up so far (a divergence's index)
        self.announce = announce
        self.start_child = start_child  # starts another execution (for invoke)
        self.hooks = hooks  # the lifecycle hooks it reports to (a replay check has none)

    @property
    def execution_id(self) -> str:
        return self.record.id

    def event(self, event_type: str, op: OperationRecord | None,
              details: dict[str, Any] | None = None) -> dict[str, Any]:
        ev = make_event(self.next_event_id, event_type, self.clock.now_ms(), op, details)
        self.next_event_id += 1
        return ev

    def frontier(self, op_id: str) -> None:
        """In a replay-only run, stop where the handler would run or write something."""
        if self.replay_only:
            raise ReplayFrontier(f"operation {op_id} has no recorded outcome: it would run "
                                 "here", None, op_id)

    def take_marks(self) -> dict[str, str]:
        """The `now()`/`random()` values not yet given to a checkpoint."""
        taken, self.new_marks = self.new_marks, {}
        return taken

    async def save(self, op: OperationRecord, *events: dict[str, Any], wait: bool = True) -> None:
        """Checkpoint `op` with `events`; its events are announced once it has landed."""
        if self.replay_only:
            self.frontier(op.id)  # never written in a replay-only run
        self.ops[op.id] = op
        record = None
        if self.new_marks and not self.record.has_marks:
            # The record says so with the first values, in the same write: a later load
            # knows to read them, even if this invocation dies before its end.
            self.record.has_marks = True
            record = self.record
        fut = self.store.checkpoint(self.record.id, record, [op], events, self.chain,
                                    marks=self.take_marks() if self.new_marks else None)
        announce = self.announce if events else None
        ended = self.hooks if op.done and self.hooks.on_operation_end else None
        if wait:
            try:
                await fut
            except StorageError as exc:
                raise CheckpointFailed(str(exc)) from None
            if announce is not None:
                announce(self.record, events)
            if ended is not None:
                execution_hooks.operation_ended(ended, self.record, op, self.clock.now_ms())
        elif announce is not None or ended is not None:
            record, clock = self.record, self.clock

            def landed(f: asyncio.Future[None]) -> None:
                if not f.cancelled() and f.exception() is None:
                    if announce is not None:
                        announce(record, events)
                    if ended is not None:
                        execution_hooks.operation_ended(ended, record, op, clock.now_ms())
            fut.add_done_callback(landed)

    def faults_armed(self) -> bool:
        """Whether any fault is armed against this execution (a crash may come anywhere)."""
        return self.faults.armed_for(self.execution_id)

    def crash_point(self, step: str, point: str) -> None:
        fault = self.faults.find(self.execution_id, "step_crash", step)
        if fault is not None and fault.point == point:
            self.faults.take(self.execution_id, "step_crash", step)
            raise InvocationCrash(f"injected crash at point {point} of step {step!r}")

    def raise_fault(self, step: str) -> None:
        for kind in ("compensation_fail", "step_raise"):
            fault = self.faults.take(self.execution_id, kind, step)
            if fault is not None:
                raise InjectedFault(fault.id, kind, f"{self.execution_id}/{step}")


