"""Which alarms or executions a bulk action takes: a selection by query (pure).

A selection is a dict, checked here field by field (a field that is not known, or
a value of the wrong kind, is refused with what is allowed), then handed to the
backend as a `Selection` that each backend turns into its own SQL:

- ``{"kind": "alarms", ...}``: `state` (pending, retrying, dead or paused),
  `class` (the object class, exactly), `name` (text in the object's name),
  `error` (text in its last error), `due_from_ms`/`due_to_ms` (its next attempt),
  `updated_from_ms`/`updated_to_ms` (the start of its last attempt).
- ``{"kind": "executions", ...}``: `status` (running, suspended, needs_human,
  failed, ...), `class` (the handler's name), `name` (text in the execution id),
  `error` (text in its error message), `updated_from_ms`/`updated_to_ms`.

Time ranges include both ends; text matches are plain substrings (no wildcards).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from alarmtop.core.model.errors import InvalidArgument

KINDS = ("alarms", "executions")
ALARM_STATES = ("pending", "retrying", "dead", "paused")
EXECUTION_STATUSES = ("running", "suspended", "needs_human", "succeeded", "failed",
                      "timed_out", "aborted")
MAX_TEXT = 256
_TIMES = ("due_from_ms", "due_to_ms", "updated_from_ms", "updated_to_ms")
FIELDS: dict[str, tuple[str, ...]] = {
    "alarms": ("kind", "state", "class", "name", "error", *_TIMES),
    "executions": ("kind", "status", "class", "name", "error", "updated_from_ms",
                   "updated_to_ms"),
}


@dataclass(frozen=True)
class Selection:
    """A checked selection (see the module docstring); `cls` is the field `class`."""

    kind: str
    state: str | None = None
    status: str | None = None
    cls: str | None = None
    name: str | None = None
    error: str | None = None
    due_from_ms: int | None = None
    due_to_ms: int | None = None
    updated_from_ms: int | None = None
    updated_to_ms: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The selection as it was given (its set fields), JSON-ready."""
        out: dict[str, Any] = {"kind": self.kind}
        for name in FIELDS[self.kind][1:]:
            value = getattr(self, "cls" if name == "class" else name)
            if value is not None:
                out[name] = value
        return out


def parse_selection(value: Any) -> Selection:
    """A selection dict as a `Selection`, or `InvalidArgument` naming what is wrong."""
    if not isinstance(value, dict):
        raise InvalidArgument('a selection is a dict such as {"kind": "alarms", "state": '
                              f'"dead"}}, not {type(value).__name__}')
    kind = value.get("kind")
    if kind not in KINDS:
        raise InvalidArgument(f"a selection needs \"kind\": 'alarms' or 'executions', not "
                              f"{kind!r}")
    allowed = FIELDS[kind]
    unknown = sorted(str(k) for k in value if k not in allowed)
    if unknown:
        raise InvalidArgument(f"unknown selection field(s) {', '.join(unknown)} for {kind}; "
                              f"the fields are {', '.join(allowed)}")
    out: dict[str, Any] = {"kind": kind}
    for name in allowed[1:]:
        if value.get(name) is None:
            continue
        out["cls" if name == "class" else name] = _field(kind, name, value[name])
    _check_range(out, "due_from_ms", "due_to_ms")
    _check_range(out, "updated_from_ms", "updated_to_ms")
    return Selection(**out)


def _field(kind: str, name: str, value: Any) -> Any:
    if name in _TIMES:
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidArgument(f"selection field {name} is epoch milliseconds (a whole "
                                  f"number), not {value!r}")
        return value
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        raise InvalidArgument(f"selection field {name} is text of 1-{MAX_TEXT} characters, "
                              f"not {value!r}")
    if name == "state" and value not in ALARM_STATES:
        raise InvalidArgument(f"selection state is one of {', '.join(ALARM_STATES)}, not "
                              f"{value!r}")
    if name == "status" and value not in EXECUTION_STATUSES:
        raise InvalidArgument(f"selection status is one of {', '.join(EXECUTION_STATUSES)}, "
                              f"not {value!r}")
    return value


def _check_range(out: dict[str, Any], low: str, high: str) -> None:
    if low in out and high in out and out[low] > out[high]:
        raise InvalidArgument(f"selection {low} ({out[low]}) is after {high} ({out[high]}); "
                              "swap them")
