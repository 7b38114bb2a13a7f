"""An object's alarm intent and how the alarm index is kept true to it (pure).

What an object's code sets or deletes is its *intent*: `(gen, at_ms)`, written in
the same commit as the event's storage writes (in the object's own database, or,
for an object that never touched its storage, in its alarm index row). Each
change takes the next generation. The alarm index is derived from the intents and
is never later than the truth:

- setting an alarm, or moving it earlier, reaches the index *before* the object
  commits (a wake hint, or a fresh record where there was none);
- moving it later or deleting it reaches the index *after* the object commits.

So a crash or a failed write between the two can leave the index early, never
late. When a record falls due, the dispatcher compares it with the intent
(`reconcile`): a record the intent has moved on from is corrected and no handler
runs; a record the runtime owns (a retry, a dead letter, an operator's re-arm,
all made for the intent's generation) fires.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from alarmtop.core.model import alarm_policy
from alarmtop.core.model.alarm_policy import (
    DEFAULT_KEEP,
    AlarmKey,
    AlarmRecord,
    AlarmState,
    RetryPolicy,
    Transition,
    ann,
)


class Intent(NamedTuple):
    """What the object's code last asked for: an alarm at `at_ms`, or none."""

    gen: int
    at_ms: int | None


NO_INTENT = Intent(0, None)


def intent_of_row(rec: AlarmRecord | None) -> Intent:
    """The intent of an object whose intent is its index row (it has no database).

    A row is written in one commit with the intent it was made from, so the row's
    own generation and time are the intent. No row: no alarm."""
    if rec is None:
        return NO_INTENT
    return Intent(rec.gen, rec.scheduled_ms)


def user_view(intent: Intent, rec: AlarmRecord | None) -> int | None:
    """What `get_alarm()` shows: the intent's time as the runtime is carrying it out.

    A record made from this intent shows its next attempt (a retry's time; None for a
    dead letter). No record for a set intent means the alarm was carried out (or
    cleared by an operator): the index is never behind a set intent. A record from
    an older generation means a later change has not reached the index yet: the
    intent is the truth.
    """
    if intent.at_ms is None or rec is None:
        return None
    if rec.gen == intent.gen:
        return rec.user_view()
    if rec.gen > intent.gen:
        return None  # written ahead of a commit that never landed: not the object's
    return intent.at_ms


class Verdict(enum.Enum):
    RUN = "run"  # the record is the intent's own and due: run the handler
    FIX = "fix"  # the record is out of date or early: write `fixed`, run nothing
    WAIT = "wait"  # nothing is due after all (a stale window entry): put it back


class Reconciled(NamedTuple):
    verdict: Verdict
    fixed: Transition | None = None


_RUN = Reconciled(Verdict.RUN, None)
_WAIT = Reconciled(Verdict.WAIT, None)


def reconcile(rec: AlarmRecord, intent: Intent, now_ms: int) -> Reconciled:
    """Whether a due record may run its handler, given the object's intent on disk.

    - The intent is newer than the record: an event changed the alarm and the index
      missed the change (a crash or a failed write after the object's commit). The
      intent wins: its alarm replaces the record (and runs if due), or the record
      goes when the intent deleted it.
    - The record is newer than the intent: an event wrote it before its object's
      commit (where no alarm was), and the commit never landed. It goes.
    - The record is the intent's own (the runtime's retries, dead letter, re-arm): a
      hint on it from a newer generation never committed, so it is dropped; the
      record runs when its own time has come.

    A paused record never runs (it is never due, so it only gets here from a stale
    window entry): it goes back, to be compared with the intent once resumed.
    """
    if rec.paused_ms is not None:
        return _WAIT
    if rec.gen > intent.gen:
        return Reconciled(Verdict.FIX, Transition(None, (ann(
            "alarm.reconciled", rec, action="never committed", gen=rec.gen),)))
    if intent.gen > rec.gen:
        if intent.at_ms is None:
            return Reconciled(Verdict.FIX, Transition(None, (ann("alarm.reconciled", rec,
                                                           action="deleted", gen=intent.gen),)))
        fresh = alarm_policy.set_alarm(rec.key, intent.at_ms, intent.gen, rec.in_file).record
        assert fresh is not None
        if intent.at_ms <= now_ms:
            return Reconciled(Verdict.RUN, Transition(fresh))
        return Reconciled(Verdict.FIX, Transition(fresh, (ann(
            "alarm.reconciled", fresh, action="moved", gen=intent.gen, at_ms=intent.at_ms),)))
    if rec.hint_ms is not None:
        unhinted = AlarmRecord(rec.object_class, rec.object_name, rec.scheduled_ms, rec.state,
                               rec.retry_count, rec.next_attempt_ms, rec.last_error,
                               rec.attempts, rec.started_ms, rec.gen, None, 0, rec.in_file,
                               rec.attempt_count, rec.paused_ms)
        if unhinted.attempt_due and (unhinted.next_attempt_ms or 0) <= now_ms:
            return Reconciled(Verdict.RUN, Transition(unhinted))
        return Reconciled(Verdict.FIX, Transition(unhinted, (ann(
            "alarm.reconciled", rec, action="hint dropped", gen=rec.hint_gen),)))
    if rec.state is AlarmState.DEAD or (rec.next_attempt_ms or 0) > now_ms:
        return _WAIT
    return _RUN


def recover(rec: AlarmRecord, intent: Intent, now_ms: int, error: str, policy: RetryPolicy,
            keep: int = DEFAULT_KEEP) -> Transition:
    """An attempt left `running` by a death (or a failed write at its end): a failed
    attempt, retried at once, counted.

    If the object's commit of that attempt landed with a new intent, the intent is
    honoured: an alarm the handler deleted is gone (no handler runs for it), and an
    alarm it set is where the retry goes, counted as a retry.
    """
    if rec.gen > intent.gen:  # never committed (see `reconcile`)
        return Transition(None, (ann("alarm.reconciled", rec, action="never committed",
                                         gen=rec.gen),))
    if intent.gen > rec.gen:
        if intent.at_ms is None:
            return Transition(None, (ann("alarm.reconciled", rec, action="deleted",
                                              gen=intent.gen),))
        tr = alarm_policy.fail(rec, now_ms, error, policy, new_alarm_ms=intent.at_ms, crashed=True,
                    gen=intent.gen, keep=keep)
        if tr.record is not None and tr.record.state is AlarmState.RETRYING:
            # The commit landed, so the handler's own wish is known: the retry runs then.
            return Transition(tr.record._replace(next_attempt_ms=intent.at_ms), tr.events)
        return tr
    return alarm_policy.fail(rec, now_ms, error, policy, crashed=True, keep=keep)


class CommitPlan(NamedTuple):
    """The index writes around an object's commit of a new intent."""

    before: Transition | None  # made durable before the object commits
    after: Transition | None  # made durable once it has


def plan_change(key: AlarmKey, current: AlarmRecord | None, new: Intent,
                in_file: bool) -> CommitPlan:
    """Which index writes keep the index never later than the truth when an event
    commits intent `new` (for an object whose intent lives in its own database).

    `current` is the index row as the runtime knows it (None: no alarm). Setting an
    alarm where none is: the fresh record goes first (nothing of the runtime's to
    keep). Setting one earlier than the record's own time: a hint goes first, the
    fresh record after. Later, or deleted: only after.
    """
    if new.at_ms is None:
        if current is None:
            return CommitPlan(None, None)
        return CommitPlan(None, alarm_policy.delete_alarm(current))
    fresh = alarm_policy.set_alarm(key, new.at_ms, new.gen, in_file)
    if current is None:
        return CommitPlan(fresh, None)
    due = current.due_ms
    before = None if due is not None and due <= new.at_ms else alarm_policy.hint(current, new.at_ms,
                                                                      new.gen, in_file)
    return CommitPlan(before, fresh)


def index_behind(intent: Intent, rec: AlarmRecord | None) -> bool:
    """Whether the index is later than the object's own intent: the alarm the object
    asks for is missing from it, or its row would fire later than asked (or never).

    While its writes land the index is never later than the truth (see the module's
    docs): this is damage (a lost or damaged write-ahead log, a backup restored without
    it), found at start or when the object wakes. A row written ahead of a commit, a
    hint, or an early row are not: the dispatcher reconciles those when they fall due."""
    if intent.at_ms is None:
        return False
    if rec is None:
        return True
    if rec.gen >= intent.gen:
        return False
    if rec.hint_ms is not None and rec.hint_gen >= intent.gen and rec.hint_ms <= intent.at_ms:
        return False
    due = rec.due_ms
    return due is None or due > intent.at_ms


def restore(key: AlarmKey, intent: Intent, rec: AlarmRecord | None) -> Transition:
    """The row the index lost, made again from the object's intent (a pause the row
    carried stays); announced as `alarm.restored`."""
    assert intent.at_ms is not None
    fresh = alarm_policy.set_alarm(key, intent.at_ms, intent.gen, True).record
    assert fresh is not None
    if rec is not None and rec.paused_ms is not None:
        fresh = fresh._replace(paused_ms=rec.paused_ms)
    return Transition(fresh, (ann("alarm.restored", fresh, gen=intent.gen,
                                  at_ms=intent.at_ms, lost=rec is None),))


def consumed(intent: Intent, rec: AlarmRecord | None) -> Intent | None:
    """The intent an alarm attempt that succeeded leaves in the object's file, when the
    alarm it served is over (None: the file already says no alarm). A file that still
    asked for an alarm carried out would bring it back if the index were ever
    re-derived from the files; the next generation says it is done."""
    if intent.at_ms is None:
        return None
    gen = intent.gen + 1
    if rec is not None:
        gen = max(gen, rec.gen + 1, rec.hint_gen + 1)
    return Intent(gen, None)
