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
import math
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol

from alarmtop.core.kernel.events import EventBus
from alarmtop.core.kernel.supervisor import Wakeup
from alarmtop.core.model.errors import InvalidFault, UnknownFault

if TYPE_CHECKING:
    from alarmtop.core.kernel.clock import Clock

FAULT_KINDS: dict[str, str] = {
    "alarm_raise": "the object's alarm handler raises instead of running (times, or None: always)",
    "alarm_delay": "the object's alarm handler starts `seconds` late (counts toward its timeout)",
    "step_raise": "a step raises instead of running its body (step, times)",
    "step_crash": "the invocation dies at point A, B or C of a step (step, point, times)",
    "compensation_fail": "a compensation step raises instead of running (step, times)",
    "idempotency_off": "a step's idempotency key is not honoured (step)",
}
_STEP_KINDS = {"step_raise", "step_crash", "compensation_fail", "idempotency_off"}


class InjectedFault(RuntimeError):
    """Raised in place of a handler or step body by an injected fault."""

    def __init__(self, fault_id: str, kind: str, target: str) -> None:
        super().__init__(f"injected fault {fault_id} ({kind}) on {target}")
        self.fault_id = fault_id
        self.kind = kind
        self.target = target


@dataclass
class Fault:
    id: str
    target: str
    kind: str
    times: int | None  # None: every time until cleared
    remaining: int | None
    seconds: float | None = None
    step: str | None = None
    point: str | None = None
    triggered: int = 0
    created_ms: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fault:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


class FaultSink(Protocol):
    """Where a fleet's faults are kept; writes are queued, `flush` waits for them."""

    def saved(self, fault: Fault) -> None: ...

    def cleared(self, fault_id: str) -> None: ...

    async def flush(self) -> None: ...


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
        _validate(target, kind, times, seconds, step, point)
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


def _validate(target: str, kind: str, times: int | None, seconds: float | None,
              step: str | None, point: str | None) -> None:
    if kind not in FAULT_KINDS:
        raise InvalidFault(f"unknown fault kind {kind!r}; kinds: {', '.join(FAULT_KINDS)}")
    if not isinstance(target, str) or not target:
        raise InvalidFault("a fault needs a target: 'Class/name' or an execution id")
    if kind.startswith("alarm_") and "/" not in target:
        raise InvalidFault(f"{kind} targets an object: write it as 'Class/name', not {target!r}")
    if times is not None and (not isinstance(times, int) or isinstance(times, bool) or times < 1):
        raise InvalidFault(f"times must be a whole number >= 1 or None (always), not {times!r}")
    if kind == "alarm_delay" and (not isinstance(seconds, (int, float)) or isinstance(
            seconds, bool) or not math.isfinite(seconds) or seconds <= 0):
        raise InvalidFault("alarm_delay needs seconds > 0, e.g. seconds=5")
    if kind in _STEP_KINDS and not step:
        raise InvalidFault(f"{kind} needs the name of the step it applies to (step=...)")
    if kind == "step_crash" and (point or "").upper() not in ("A", "B", "C"):
        raise InvalidFault("step_crash needs point 'A' (before the body), 'B' (after the body, "
                           "before its checkpoint) or 'C' (after the checkpoint)")
