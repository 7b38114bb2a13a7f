"""Faults injected on purpose, as data: their kinds, their record, their checks (pure).

The registry that holds them and applies them live is `kernel.faults`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from alarmtop.core.model.errors import InvalidFault

FAULT_KINDS: dict[str, str] = {
    "alarm_raise": "the object's alarm handler raises instead of running (times, or None: always)",
    "alarm_delay": "the object's alarm handler starts `seconds` late (counts toward its timeout)",
    "step_raise": "a step raises instead of running its body (step, times)",
    "step_crash": "the invocation dies at point A, B or C of a step (step, point, times)",
    "compensation_fail": "a compensation step raises instead of running (step, times)",
    "idempotency_off": "a step's idempotency key is not honoured (step)",
    # At the checkpoint boundary of an execution of the AWS SDK's handlers:
    "checkpoint_fail": "the service refuses the execution's next checkpoints as failing "
                       "(times): the invocation fails and runs again",
    "checkpoint_delay": "the execution's next checkpoints are answered `seconds` late (times)",
    "checkpoint_revoke": "the execution's next checkpoint is answered without its next token "
                         "(times): the invocation ends PENDING and another carries on",
}
_STEP_KINDS = {"step_raise", "step_crash", "compensation_fail", "idempotency_off"}
STEP_KINDS = tuple(k for k in FAULT_KINDS if k in _STEP_KINDS)  # they name a step
# What a fault may target: an object's alarm, a native execution's steps, or the
# checkpoint boundary of an execution of the AWS SDK's handlers.
TARGET_KINDS = ("object", "execution", "aws")


def kinds_for(target_kind: str) -> list[str]:
    """The fault kinds a target of `target_kind` (one of `TARGET_KINDS`) takes, in the
    order of `FAULT_KINDS`: what a console offers it."""
    if target_kind == "object":
        return [k for k in FAULT_KINDS if k.startswith("alarm_")]
    if target_kind == "aws":
        return [k for k in FAULT_KINDS if k.startswith("checkpoint_")]
    if target_kind == "execution":
        return [k for k in FAULT_KINDS if not k.startswith(("alarm_", "checkpoint_"))]
    raise InvalidFault(f"a fault targets one of {', '.join(TARGET_KINDS)}, not {target_kind!r}")


def needs_seconds(kind: str) -> bool:
    """Whether the kind waits (`seconds=`)."""
    return kind.endswith("_delay")


class InjectedFault(RuntimeError):
    """Raised in place of a handler or step body by an injected fault."""

    __module__ = "alarmtop.core"  # its public name, as histories and logs record it

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


def validate_fault(target: str, kind: str, times: int | None, seconds: float | None,
              step: str | None, point: str | None) -> None:
    if kind not in FAULT_KINDS:
        raise InvalidFault(f"unknown fault kind {kind!r}; kinds: {', '.join(FAULT_KINDS)}")
    if not isinstance(target, str) or not target:
        raise InvalidFault("a fault needs a target: 'Class/name' or an execution id")
    if kind.startswith("alarm_") and "/" not in target:
        raise InvalidFault(f"{kind} targets an object: write it as 'Class/name', not {target!r}")
    if times is not None and (not isinstance(times, int) or isinstance(times, bool) or times < 1):
        raise InvalidFault(f"times must be a whole number >= 1 or None (always), not {times!r}")
    if needs_seconds(kind) and (
            not isinstance(seconds, (int, float)) or isinstance(seconds, bool)
            or not math.isfinite(seconds) or seconds <= 0):
        raise InvalidFault(f"{kind} needs seconds > 0, e.g. seconds=5")
    if kind.startswith("checkpoint_") and "/" in target:
        raise InvalidFault(f"{kind} targets an execution: give its id, not {target!r}")
    if kind in _STEP_KINDS and not step:
        raise InvalidFault(f"{kind} needs the name of the step it applies to (step=...)")
    if kind == "step_crash" and (point or "").upper() not in ("A", "B", "C"):
        raise InvalidFault("step_crash needs point 'A' (before the body), 'B' (after the body, "
                           "before its checkpoint) or 'C' (after the checkpoint)")
