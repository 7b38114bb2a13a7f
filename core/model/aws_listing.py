"""An execution's status as the Lambda API says it, and the filters and markers of
ListDurableExecutionsByFunction (pure).

alarmtop's statuses are finer than AWS's: running, suspended (between
invocations) and needs-a-human are all AWS's RUNNING, or PAUSED while an operator
holds the execution. A listing by function is served by an index of the
executions by (function, start time, id), newest first: its marker is the key of
the last row of the page before (`encode_marker`), so a page deep in the list
costs what the first does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from alarmtop.core.model.aws_errors import invalid

# ExecutionStatus of the Lambda API's model, in its order.
AWS_STATUSES = ("RUNNING", "SUCCEEDED", "FAILED", "TIMED_OUT", "STOPPED", "DELETING",
                "PAUSING", "PAUSED")
LIVE = ("running", "suspended", "needs_human")  # alarmtop's statuses AWS calls RUNNING
FINISHED_AS = {"succeeded": "SUCCEEDED", "failed": "FAILED", "timed_out": "TIMED_OUT",
               "aborted": "STOPPED"}
MAX_STATUSES = 10
_MARKER = re.compile(r"(-?\d{1,19})\.([a-zA-Z0-9_-]{1,64})")


def aws_status(status: str, paused: bool) -> str:
    """The Lambda API's status of an execution of alarmtop `status`."""
    if status in FINISHED_AS:
        return FINISHED_AS[status]
    return "PAUSED" if paused else "RUNNING"


@dataclass(frozen=True)
class StatusFilter:
    """Which executions a `Statuses` filter keeps: those of a finished status in
    `finished` (alarmtop's names), the live ones not paused (`running`), the live
    ones paused (`paused`)."""

    finished: tuple[str, ...] = ()
    running: bool = False
    paused: bool = False

    @property
    def nothing(self) -> bool:
        """True when no execution can match (say, only DELETING was asked for)."""
        return not (self.finished or self.running or self.paused)

    def keeps(self, status: str, paused: bool) -> bool:
        if status in FINISHED_AS:
            return status in self.finished
        return self.paused if paused else self.running


def status_filter(statuses: Any) -> StatusFilter | None:
    """The filter of a `Statuses` list (None: keep every status); refuses what is not
    a list of 1-10 of AWS's statuses."""
    if statuses is None:
        return None
    if not isinstance(statuses, (list, tuple)) or not 0 < len(statuses) <= MAX_STATUSES:
        raise invalid(f"Statuses is a list of 1-{MAX_STATUSES} of {', '.join(AWS_STATUSES)}")
    wrong = [s for s in statuses if s not in AWS_STATUSES]
    if wrong:
        raise invalid(f"Statuses: {wrong[0]!r} is not one of {', '.join(AWS_STATUSES)}")
    finished = tuple(sorted(k for k, v in FINISHED_AS.items() if v in statuses))
    return StatusFilter(finished, "RUNNING" in statuses, "PAUSED" in statuses)


def encode_marker(created_ms: int, execution_id: str) -> str:
    """The marker of a page that ends with this execution."""
    return f"{created_ms}.{execution_id}"


def decode_marker(marker: Any) -> tuple[int, str] | None:
    """The key a marker names (None: from the start); refuses anything else."""
    if marker in (None, ""):
        return None
    m = _MARKER.fullmatch(marker) if isinstance(marker, str) else None
    if m is None:
        raise invalid("Invalid Marker: give the NextMarker of the page before")
    return int(m.group(1)), m.group(2)


def epoch_ms(value: Any, name: str) -> int | None:
    """Epoch seconds (a number; None: unset) as milliseconds; refuses anything else."""
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
        raise invalid(f"{name} is a timestamp (epoch seconds), not {value!r}")
    return round(value * 1000)
