"""Log records on the standard `logging` module: a whole sentence, and the fields as data.

A user who configured nothing sees only the message (Python's last-resort handler
prints WARNING and above to stderr, message alone), so each message says what
happened, to what, and what to do about it: "alarm failed: Flaky/payments-0,
attempt 3 of 7: RuntimeError: ...". The same facts are also fields in
`record.alarmtop` (a dict); `kernel.logs.JsonFormatter` writes one JSON object per line with
those fields at the top level, so alerting can key on, say,
`event == "alarm.failed" and last_attempt`.

The messages are built by the pure functions below, which the tests read as the
catalogue of what a user sees.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

ALARM_LOG = logging.getLogger("alarmtop.alarms")
RUNTIME_LOG = logging.getLogger("alarmtop.runtime")
EXECUTION_LOG = logging.getLogger("alarmtop.executions")

NAMED_DEAD_LETTERS = 3  # the reminder names this many; rt.dead_letters() has them all
HUMAN_PREFIX = "needs a human: "


def log_event(logger: logging.Logger, level: int, message: str, **fields: Any) -> None:
    logger.log(level, message, extra={"alarmtop": fields})


def alarm_failed_message(obj: str, attempt: int, attempts: int, error: str,
                         last: bool) -> str:
    """One failed attempt of `obj`'s alarm ("Class/name"); `last`: it is now dead."""
    head = f"alarm failed: {obj}, attempt {attempt} of {attempts}: {error}"
    if not last:
        return head
    cls, _, name = obj.partition("/")
    return (f"{head}; that was the last attempt: the alarm is a dead letter until an "
            f"operator re-arms it (rt.rearm({cls!r}, {name!r}), or r in the console)")


def dead_letters_message(count: int, named: Sequence[str]) -> str:
    """The sweeper's reminder: how many dead letters, and the first few by name."""
    names = ", ".join(named)
    if count > len(named):
        names += f" and {count - len(named)} more"
    noun, verb = ("dead letter", "waits") if count == 1 else ("dead letters", "wait")
    return (f"{count} {noun} {verb} for an operator: {names} (rt.dead_letters() lists "
            "them; rt.rearm(...), or r in the console, re-arms one)")


def execution_message(event: str, execution_id: str, name: str,
                      error: dict[str, Any] | None, reason: str | None) -> str | None:
    """What a user must hear of an execution event, or None for events that are
    routine (started, suspended, succeeded) or an operator's own doing (aborted)."""
    who = f"execution {execution_id} ({name})"
    err = error or {}
    what = ": ".join(str(part) for part in (err.get("ErrorType"), err.get("ErrorMessage"))
                     if part)
    if event == "execution.failed":
        return f"{who} failed: {what or 'no error recorded'}"
    if event == "execution.timed_out":
        return f"{who} timed out: {what or 'it ran past its timeout'}"
    if event == "execution.needs_human":
        why = (reason or "handed to a human").removeprefix(HUMAN_PREFIX)
        return (f"{who} needs a human: {why}; an operator resolves it by hand, retries "
                "a failed compensation or aborts it (rt.executions.resolve / "
                "retry_compensation / abort, or h, R, a in the console)")
    return None


def log_execution(event: str, execution_id: str, name: str, error: dict[str, Any] | None,
                  reason: str | None) -> None:
    """Log an execution's failure or hold for a human, the counterparts of a dead letter;
    other execution events are left to the event stream."""
    message = execution_message(event, execution_id, name, error, reason)
    if message is not None:
        log_event(EXECUTION_LOG, logging.ERROR, message, event=event,
                  execution_id=execution_id, name=name, error=error, reason=reason)
