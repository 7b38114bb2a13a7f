"""An operator holding, releasing and moving an object's alarm (pure).

These are the runtime's own decisions about an alarm (DESIGN section 11): records
of the runtime database, written without waking the object.

- **Pause** keeps the alarm as it is (its time, retry count, attempts, dead
  letter) and makes it never due: nothing fires until it is resumed.
- **Resume** lets it be due again at the time it kept; one that fell due while
  paused fires at once, with the retry count it had.
- **Snooze** moves the next attempt of a pending or retrying alarm later, keeping
  its retries and attempts. From its due time, or from now when it is overdue:
  snoozing a timer that is 40 s late by a minute means "a minute from now".

A pause belongs to the object's alarm, not to one record of it: an object that sets
a new alarm while paused replaces the time (a fresh retry count, as `set_alarm`
always gives) and the new alarm stays paused; one that deletes its alarm removes
the pause with it. `carry` is that rule: the scheduler applies it to every write
of a paused alarm except the resume itself.
"""

from __future__ import annotations

from alarmtop.core.model.alarm_policy import AlarmRecord, AlarmState, Transition, ann
from alarmtop.core.model.errors import InvalidArgument

MAX_SNOOZE_MS = 365 * 24 * 3600 * 1000  # a year: longer is a mistake, not a snooze


def pause(rec: AlarmRecord, now_ms: int, reason: str | None = None) -> Transition | None:
    """Hold the alarm; None when it is paused already (nothing to write)."""
    if rec.paused_ms is not None:
        return None
    held = rec._replace(paused_ms=now_ms)
    return Transition(held, (ann("alarm.paused", held, reason=reason, state=rec.state.value,
                                 retry_count=rec.retry_count,
                                 next_attempt_ms=rec.next_attempt_ms),))


def resume(rec: AlarmRecord, now_ms: int, reason: str | None = None) -> Transition | None:
    """Release the alarm; None when it is not paused (nothing to write)."""
    if rec.paused_ms is None:
        return None
    free = rec._replace(paused_ms=None)
    return Transition(free, (ann("alarm.resumed", free, reason=reason,
                                 paused_for_ms=max(0, now_ms - rec.paused_ms),
                                 next_attempt_ms=rec.next_attempt_ms,
                                 overdue=(rec.next_attempt_ms or now_ms) <= now_ms),))


def check_snooze(by_ms: object) -> int:
    """`by_ms` as a snooze: whole milliseconds, more than 0, at most a year."""
    if not isinstance(by_ms, int) or isinstance(by_ms, bool) or not 0 < by_ms <= MAX_SNOOZE_MS:
        raise InvalidArgument(f"a snooze is a whole number of milliseconds from 1 to "
                              f"{MAX_SNOOZE_MS:,} (a year), not {by_ms!r}")
    return by_ms


def snoozed_until(due_ms: int, now_ms: int, by_ms: int) -> int:
    """Where a snooze of `by_ms` moves a timer due at `due_ms`."""
    return max(due_ms, now_ms) + by_ms


def snooze(rec: AlarmRecord, now_ms: int, by_ms: int,
           reason: str | None = None) -> Transition:
    """Move the next attempt later; refused for a dead letter (it has none)."""
    by_ms = check_snooze(by_ms)
    obj = f"{rec.object_class}/{rec.object_name}"
    if rec.state is AlarmState.DEAD or rec.next_attempt_ms is None:
        raise InvalidArgument(f"{obj}'s alarm is a dead letter: it has no next attempt to "
                              "snooze; re-arm it for a later time instead (rearm at_ms=...)")
    at = snoozed_until(rec.next_attempt_ms, now_ms, by_ms)
    # A wake hint stays: an intent committed meanwhile must still be looked at (it may
    # ask for an earlier time, which the object's own code is entitled to).
    # `scheduled_ms` stays: the handler is told when the alarm was meant for.
    moved = rec._replace(next_attempt_ms=at)
    return Transition(moved, (ann("alarm.snoozed", moved, by_ms=by_ms, reason=reason,
                                  previous_ms=rec.next_attempt_ms, next_attempt_ms=at,
                                  state=rec.state.value, retry_count=rec.retry_count),))


def carry(tr: Transition, paused_ms: int | None) -> Transition:
    """A write of an alarm that is paused (since `paused_ms`) keeps the pause: an
    object's new alarm replaces the record and stays held. A delete takes it away."""
    rec = tr.record
    if paused_ms is None or rec is None or rec.paused_ms is not None:
        return tr
    return Transition(rec._replace(paused_ms=paused_ms), tr.events)


def refuse_fire_now(rec: AlarmRecord) -> None:
    """Firing a paused alarm now would undo the pause behind the operator's back."""
    if rec.paused_ms is not None:
        raise InvalidArgument(f"{rec.object_class}/{rec.object_name}'s alarm is paused; resume "
                              "it first (resume_alarm), and it fires at once if it is due")
