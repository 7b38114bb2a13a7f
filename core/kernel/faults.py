"""Live fault injection: make a target misbehave on purpose, visibly.

A fault names a target (`Class/name` for an object, an execution id for an
execution), a kind, and how often it applies. Faults may be injected before
their target exists; they wait for it. Every change is an event.

An `alarm_delay` is a sleep on the runtime clock (`FaultRegistry.delay`) that
clearing the fault ends at once: an operator who removes a 60 s delay does not
want the handler already held by it to sleep the rest of the minute. While a
delay runs, its fault stays listed (even once used up) so that it can be cleared.

In a fleet the faults are the fleet's: every change is written to the shared
database (`FaultSink`) and each node's registry is a mirror of it, brought up to
date when another node changes it. A fault applies where its target runs (the
owner of its shard), so one node uses it up; ids carry the node that made them.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from alarmtop.core.kernel.events import EventBus
from alarmtop.core.kernel.supervisor import Wakeup
from alarmtop.core.model.errors import UnknownFault
from alarmtop.core.model.faults import (
    FAULT_KINDS,
    Fault,
    InjectedFault,
    validate_fault,
)
from alarmtop.core.ports import FaultSink

if TYPE_CHECKING:
    from alarmtop.core.ports import Clock

class FaultRegistry:
    def __init__(self, events: EventBus, now_ms: Any) -> None:
        self._events = events
        self._now_ms = now_ms
        self._faults: dict[str, Fault] = {}
        self._ids = itertools.count(1)
        self.sink: FaultSink | None = None
        self.id_suffix = ""  # in a fleet "@node": ids unique across the nodes
        # Delays running now, by fault id: the fault (listed while it runs, even used
        # up) and the wakeups that clearing it pokes.
        self._delays: dict[str, tuple[Fault, set[Wakeup]]] = {}

    def inject(self, target: str, kind: str, times: int | None = 1, *,
               seconds: float | None = None, step: str | None = None,
               point: str | None = None) -> str:
        """Add a fault and return its id. Raises `InvalidFault` saying what is wrong."""
        validate_fault(target, kind, times, seconds, step, point)
        fid = f"f{next(self._ids)}{self.id_suffix}"
        fault = Fault(fid, target, kind, times, times, seconds, step,
                      point.upper() if point else None, 0, self._now_ms())
        self._faults[fid] = fault
        if self.sink is not None:
            self.sink.saved(fault)
        self._events.emit("fault.injected", fault.to_dict())
        return fid

    async def flush(self) -> None:
        """Wait until this node's fault changes are the fleet's (nothing on one node)."""
        if self.sink is not None:
            await self.sink.flush()

    def mirror(self, faults: list[Fault], keep: set[str]) -> None:
        """Take the fleet's faults as they are in the shared database, except `keep`
        (changed here, not written yet); a removed fault's running delay ends."""
        theirs = {f.id: f for f in faults}
        for fid in [fid for fid in self._faults if fid not in theirs and fid not in keep]:
            fault = self._faults.pop(fid)
            self._end_delay(fid)
            self._events.emit("fault.cleared", {**fault.to_dict(), "remote": True})
        for fid, fault in theirs.items():
            if fid in keep:
                continue
            known = self._faults.get(fid)
            if known is None:
                self._faults[fid] = fault
                self._events.emit("fault.injected", {**fault.to_dict(), "remote": True})
            elif known != fault:
                self._faults[fid] = fault

    @property
    def pending(self) -> bool:
        """Whether any fault waits to apply (the alarm path skips its look-ups when not)."""
        return bool(self._faults)

    def armed_for(self, target: str) -> bool:
        """Whether any fault waits for `target` (cheap: checked on every durable step)."""
        return any(f.target == target for f in self._faults.values())

    def list(self) -> list[dict[str, Any]]:
        spent = [f for fid, (f, _) in self._delays.items() if fid not in self._faults]
        return [f.to_dict() for f in [*self._faults.values(), *spent]]

    def clear(self, fault_id: str) -> None:
        """Remove a fault; a delay of it that is running ends now."""
        fault = self._faults.pop(fault_id, None)
        running = self._end_delay(fault_id)
        if running is not None:
            fault = running
        if fault is None:
            raise UnknownFault(fault_id)
        if self.sink is not None:
            self.sink.cleared(fault_id)
        self._events.emit("fault.cleared", fault.to_dict())

    def _end_delay(self, fault_id: str) -> Fault | None:
        running = self._delays.pop(fault_id, None)
        if running is None:
            return None
        for wakeup in running[1]:
            wakeup.poke()
        return running[0]

    async def delay(self, fault: Fault, clock: Clock) -> None:
        """Sleep `fault.seconds` on `clock`, or until the fault is cleared."""
        if not fault.seconds:
            return
        wakeup = Wakeup(clock)
        _, waiting = self._delays.setdefault(fault.id, (fault, set()))
        waiting.add(wakeup)
        try:
            await wakeup.wait(clock.now_ms() + round(fault.seconds * 1000))
        finally:
            waiting.discard(wakeup)
            entry = self._delays.get(fault.id)
            if entry is not None and not entry[1]:
                del self._delays[fault.id]

    def find(self, target: str, kind: str, step: str | None = None) -> Fault | None:
        for fault in self._faults.values():
            if fault.target == target and fault.kind == kind and (
                    step is None or fault.step == step):
                return fault
        return None

    def take(self, target: str, kind: str, step: str | None = None) -> Fault | None:
        """Use up one application of a matching fault, if any."""
        fault = self.find(target, kind, step)
        if fault is None:
            return None
        fault.triggered += 1
        used_up = False
        if fault.remaining is not None:
            fault.remaining -= 1
            if fault.remaining <= 0:
                del self._faults[fault.id]
                used_up = True
        if self.sink is not None and used_up:
            self.sink.cleared(fault.id)
        elif self.sink is not None:
            self.sink.saved(fault)
        self._events.emit("fault.triggered", fault.to_dict())
        return fault


__all__ = ["FAULT_KINDS", "Fault", "FaultRegistry", "InjectedFault"]
