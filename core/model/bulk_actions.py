"""What a bulk action may be, and how a batch is asked for (pure).

Actions on alarms take keys `Class/name`; actions on executions take execution
ids. `clear_faults` exists for both, so a batch of it given by keys names its
`kind`. `plan_start` checks a request whole before anything is written: a bad
request changes nothing.

An item in flight when the runtime stopped is never applied blindly a second time.
An alarm item's outcome is written in the same transaction as the change it makes,
so it is done or not done, never half. An execution item is marked `running` (with
what it saw of the execution) before it acts, and on restart `already_applied`
decides from the execution as it is now whether that action had landed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from alarmtop.core.model.errors import InvalidArgument
from alarmtop.core.model.selection import KINDS, Selection, parse_selection

ALARM_ACTIONS = ("rearm", "fire_now", "clear_dead_letter", "pause_alarm", "resume_alarm",
                 "clear_faults")
EXECUTION_ACTIONS = ("retry_compensation", "resolve", "abort", "pause", "resume", "redrive",
                     "clear_faults")
ACTIONS = {"alarms": ALARM_ACTIONS, "executions": EXECUTION_ACTIONS}
DEFAULT_THROTTLE = 32
MAX_THROTTLE = 1000
MAX_KEYS = 100_000  # keys given one by one; a selection may match up to MAX_ITEMS
MAX_ITEMS = 1_000_000


@dataclass(frozen=True)
class StartPlan:
    """A checked request for a batch."""

    action: str
    kind: str
    keys: tuple[str, ...] | None
    selection: Selection | None
    throttle: int
    note: str | None
    reason: str | None
    at_ms: int | None  # rearm only: when the re-armed alarms fall due (None: now)

    def params(self) -> dict[str, Any]:
        """What the batch row keeps of the request, besides its own columns."""
        return {"selection": None if self.selection is None else self.selection.to_dict(),
                "keys_given": None if self.keys is None else len(self.keys),
                "at_ms": self.at_ms}


# Names an operator may also use on alarms: `pause`, `resume` and `clear` say the same
# as `pause_alarm`, `resume_alarm` and `clear_dead_letter` there.
ALIASES = {"pause": "pause_alarm", "resume": "resume_alarm", "clear": "clear_dead_letter"}


def action_name(action: Any, kind: Any) -> Any:
    """`action` under its own name, for a batch of `kind` (aliases resolved)."""
    if kind == "alarms" and isinstance(action, str) and action in ALIASES:
        return ALIASES[action]
    if action == "clear":
        return ALIASES[action]
    return action


def kind_of(action: Any, kind: Any = None) -> str:
    """The kind of thing `action` acts on (`kind` says it where both have it)."""
    if not isinstance(action, str) or not any(action in a for a in ACTIONS.values()):
        raise InvalidArgument(f"unknown bulk action {action!r}; on alarms: "
                              f"{', '.join(ALARM_ACTIONS)}; on executions: "
                              f"{', '.join(EXECUTION_ACTIONS)}")
    if kind is not None:
        if kind not in KINDS:
            raise InvalidArgument(f"kind is 'alarms' or 'executions', not {kind!r}")
        if action not in ACTIONS[kind]:
            raise InvalidArgument(f"{action} is not an action on {kind}; on {kind}: "
                                  f"{', '.join(ACTIONS[kind])}")
        return str(kind)
    kinds = [k for k, acts in ACTIONS.items() if action in acts]
    if len(kinds) > 1:
        raise InvalidArgument(f"{action} applies to alarms and to executions: give "
                              "kind='alarms' or kind='executions' (or a selection)")
    return kinds[0]


def check_throttle(throttle: Any) -> int:
    if throttle is None:
        return DEFAULT_THROTTLE
    if not isinstance(throttle, int) or isinstance(throttle, bool) or \
            not 1 <= throttle <= MAX_THROTTLE:
        raise InvalidArgument(f"throttle (items in flight at once) is 1-{MAX_THROTTLE}, not "
                              f"{throttle!r}")
    return throttle


def _keys(kind: str, keys: Any) -> tuple[str, ...]:
    if isinstance(keys, str) or not isinstance(keys, Sequence):
        raise InvalidArgument(f"keys is a list of {_what(kind)}, not {type(keys).__name__}")
    if not 0 < len(keys) <= MAX_KEYS:
        raise InvalidArgument(f"keys holds 1-{MAX_KEYS:,} {_what(kind)}, not {len(keys):,}; "
                              "select by query for more")
    for key in keys:
        if not isinstance(key, str) or not key or len(key) > 600:
            raise InvalidArgument(f"each key is one of the {_what(kind)}, not {key!r}")
        if kind == "alarms":
            cls, sep, name = key.partition("/")
            if not (cls and sep and name):
                raise InvalidArgument(f"alarm keys are written 'Class/name', not {key!r}")
    return tuple(dict.fromkeys(keys))  # each once, in the order given


def _what(kind: str) -> str:
    return "objects 'Class/name'" if kind == "alarms" else "execution ids"


def plan_start(action: Any, keys: Any = None, selection: Any = None, *, kind: Any = None,
               throttle: Any = None, note: Any = None, reason: Any = None,
               at_ms: Any = None) -> StartPlan:
    """The request as a `StartPlan`, or `InvalidArgument` saying what to change."""
    if (keys is None) == (selection is None):
        raise InvalidArgument("a bulk action takes either keys (a list) or a selection (a "
                              "query), not both and not neither")
    sel = None if selection is None else parse_selection(selection)
    if sel is not None and kind is not None and kind != sel.kind:
        raise InvalidArgument(f"kind {kind!r} does not match the selection's kind "
                              f"{sel.kind!r}")
    action = action_name(action, sel.kind if sel is not None else kind)
    what = kind_of(action, sel.kind if sel is not None else kind)
    if action == "resolve" and (not isinstance(note, str) or not note.strip()):
        raise InvalidArgument("resolve needs a note saying what was done by hand")
    for name, value in (("note", note), ("reason", reason)):
        if value is not None and not isinstance(value, str):
            raise InvalidArgument(f"{name} is text, not {value!r}")
    if at_ms is not None and (action != "rearm" or not isinstance(at_ms, int)
                              or isinstance(at_ms, bool)):
        raise InvalidArgument("at_ms (epoch ms) is for rearm only: when the re-armed alarms "
                              "fall due")
    return StartPlan(action, what, None if keys is None else _keys(what, keys), sel,
                     check_throttle(throttle), note, reason, at_ms)


class ExecutionState(NamedTuple):
    """What an execution item looks at, before acting and after a restart."""

    status: str
    paused: bool
    finished: bool
    redrives: int
    human_op: str | None  # the compensation (or hand-over) waiting for an operator
    hold: str | None  # hand_to_human's reason, while held

    def fingerprint(self) -> dict[str, Any]:
        return {"redrives": self.redrives, "human_op": self.human_op, "hold": self.hold}


def already_applied(action: str, before: dict[str, Any], now: ExecutionState) -> bool:
    """Whether an execution item that was in flight when the runtime stopped had acted,
    judged by the execution now against what the item saw before it acted (`before`,
    its `fingerprint`). `clear_faults` is simply done again (it changes nothing twice)."""
    if action == "pause":
        return now.paused or now.finished
    if action == "resume":
        return not now.paused or now.finished
    if action == "abort":
        return now.finished
    if action == "redrive":
        return now.redrives > int(before.get("redrives") or 0)
    if action in ("retry_compensation", "resolve"):
        # The decision completes the operation that waited for it (a new failure waits
        # on a new one), and a resolve of a held execution lifts the hold.
        return (now.human_op != before.get("human_op")
                or (before.get("hold") is not None and now.hold is None))
    return False
