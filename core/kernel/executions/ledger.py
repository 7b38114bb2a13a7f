"""The idempotency ledger: keyed deliveries for side effects that must happen once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from alarmtop.core.kernel.executions.invocation import current_step
from alarmtop.core.model.serialization import to_json

if TYPE_CHECKING:
    from alarmtop.core.kernel.events import EventBus
    from alarmtop.core.kernel.faults import FaultRegistry
    from alarmtop.core.ports import Clock, ExecutionLog


class Ledger:
    """Keyed deliveries for side effects that must happen once.

    Exactly-once *effect* needs the receiver's help: it must remember keys it has
    seen. This ledger plays that receiver: `deliver(key, value)` returns True the
    first time a key is seen and False after, and counts every attempt, so a step
    that re-runs after a crash can be seen to have tried twice but delivered once.
    """

    def __init__(self, store: ExecutionLog, events: EventBus, faults: FaultRegistry,
                 clock: Clock) -> None:
        self._store = store
        self._events = events
        self._faults = faults
        self._clock = clock

    async def deliver(self, key: str, value: Any = None) -> bool:
        to_json(value, "the ledger value")
        step = current_step.get()
        honour = step is None or self._faults.find(step[0], "idempotency_off",
                                                   step[2]) is None
        first = await self._store.ledger_deliver(
            key, value, self._clock.now_ms(), honour_key=honour)
        self._events.emit("ledger.delivered" if first else "ledger.duplicate",
                          {"key": key, "honoured": honour})
        return first

    async def get(self, key: str) -> dict[str, Any] | None:
        """`{"value", "at_ms", "deliveries"}` for a key, or None."""
        return await self._store.ledger_get(key)
