"""Where a handler and its log disagree: the shape of an operation, and the first
operation at which replay diverged (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from alarmtop.core.model.operations import OpType


class Shape(NamedTuple):
    """What identifies an operation to replay: its type, sub-type and name."""

    type: OpType
    sub_type: str
    name: str | None

    def label(self) -> str:
        return f"{self.type.value} {self.sub_type} {self.name!r}"

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type.value, "kind": self.sub_type, "name": self.name}


@dataclass(frozen=True)
class Divergence:
    """Where a handler and a log disagree. `current` is None when the log holds an
    operation the handler no longer calls; `index` counts the operations met before."""

    op_id: str
    index: int
    recorded: Shape
    current: Shape | None

    def message(self) -> str:
        if self.current is None:
            return (f"replay diverged at operation {self.op_id}: the log has "
                    f"{self.recorded.label()}, which the handler no longer calls (operation "
                    f"index {self.index})")
        return (f"replay diverged at operation {self.op_id}: the log has "
                f"{self.recorded.label()}, the handler now calls {self.current.label()} "
                f"(operation index {self.index})")

    def to_dict(self) -> dict[str, Any]:
        return {"op_id": self.op_id, "index": self.index, "recorded": self.recorded.to_dict(),
                "current": None if self.current is None else self.current.to_dict()}
