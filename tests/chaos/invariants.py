"""The invariants of a chaos run, checked from the workload's own record.

`check(record, state, seed)` compares what the workload wrote down (every call it
made and whether it was acknowledged, every handler and step body that ran, every
delivery) with the final state the settle phase read back from the runtime, and
returns a `Report` listing each violation in words.

A call with an intent but no ack has an unknown outcome: it may have happened or
not. For each thing the checker therefore asks which *candidate* last operations
are possible (the last acknowledged one, or any unacknowledged one after it) and
accepts the final state when one candidate explains it.

A call that raised (a ``nack``: its object's event failed, e.g. on a database
another connection held locked) is not acknowledged, and it is not unknown
either: an event that fails keeps nothing of it, so a failed call to an alarm,
writer, counter or lease object is never a candidate, and any trace of it (its
alarm firing, its row, its hits) is a violation. A nack is itself a violation
unless a transient lock the harness took explains it (the error says "locked",
and in record order the lock was asked for before the call failed and let go
after it began; on runtime.sqlite, or on the call's own object's database).

The harness's faults widen two expectations, and only by what they explain:

- a crash (a kill, a boundary death) or a lock at the end of an alarm attempt
  counts that attempt as a failed one and retries it, so an alarm may be retried
  more often than its plan says, and may even end as a dead letter its plan did
  not doom: each such extra retry must lie across a restart or a lock (in record
  order), and each attempt of a dead letter that its plan did not fail must have
  failed with a crash, a lock error, or an end that could not be recorded while a
  lock was held (in wall-clock time);
- nothing else: steps, checkpoints, keyed deliveries and the settle are judged as
  without locks.

On a fleet (`fleet.py`) a kill is written as a ``kill`` line and counts as a crash
for the retries; an attempt cut because its shard left its node (a ``handover``,
or a loss found at a renewal: ``shards`` lines; a ``lease_late`` renewal) may be
retried once more too, only for an object of that shard (the retries are counted
by how). A call whose node went away during it (``unknown``) has an unknown
outcome; one that failed with a lease or node error must have kept nothing, as
any failed call. And no two nodes may have run one object's handlers at once
(``span`` lines).

The core bugs the harness found (`test_found_*.py` reproduce each) are fixed; their
findings are plain violations like any other.
"""

from __future__ import annotations

import collections
import itertools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from alarmtop.core.storage.postgres.backend import shard_of
from tests.chaos.faults import RUNTIME_DB
from tests.chaos.workload import (
    ALARM_RETRIES,
    CHAOS_FAULT,
    COMPENSATION_ATTEMPTS,
    CRASH_ERROR,
    FESTIVAL,
    FLEET_SHARDS,
    HOTEL_ATTEMPTS,
    SETTLE_HORIZON_MS,
    TRIP,
    alarm_failures,
    festival_plan,
    hotel_failures,
)


@dataclass
class Op:
    """One recorded call: its intent line, and its ack when it was acknowledged."""

    id: str
    obj: str
    what: str
    args: dict[str, Any]
    pos: int
    ack_pos: int | None = None
    result: Any = None
    nack_pos: int | None = None  # the call raised: nothing of it was kept
    error: str | None = None

    @property
    def acked(self) -> bool:
        return self.ack_pos is not None

    @property
    def failed(self) -> bool:
        return self.nack_pos is not None

    @property
    def base_obj(self) -> str:
        """The object the call went to (a lease's key names its ledger and the lease)."""
        return self.obj.split("#", 1)[0]


@dataclass
class Lock:
    """A transient lock the harness took: asked for at record line `pos`, let go before
    line `end_pos`, held from `from_ms` to `to_ms` (wall clock)."""

    id: str
    db: str
    pos: int
    end_pos: float = float("inf")
    from_ms: int | None = None
    to_ms: int | None = None

    def spans(self, first_pos: int, last_pos: float) -> bool:
        """Whether the lock may have been held between two record lines."""
        return self.pos < last_pos and first_pos < self.end_pos

    def covers_ms(self, start_ms: int, end_ms: int | None) -> bool:
        """Whether it was held at some moment of [start_ms, end_ms] (end None: open)."""
        if self.from_ms is None or self.to_ms is None:
            return False
        return (self.from_ms <= (end_ms if end_ms is not None else float("inf")) + MS_SLACK
                and self.to_ms + MS_SLACK >= start_ms)


MS_SLACK = 5  # ms: the two clocks are one wall clock, read at slightly different moments
# What an attempt cut short by a failed write at its end says (a lock explains it).
UNRECORDED_END = ("the end of the attempt could not be recorded", "the attempt's commit failed",
                  "the end of the attempt was never recorded")


@dataclass
class Report:
    """What a run proved, and what it found wrong."""

    kills: int = 0
    alarms_checked: int = 0
    steps_checked: int = 0
    executions_checked: int = 0
    writes_checked: int = 0
    deliveries_checked: int = 0
    fires: int = 0
    dead_letters: int = 0
    # The faults the record shows: deaths at write boundaries (by kind and point),
    # boundaries armed but not reached (those rounds ended by a line-count kill),
    # starts refused under a lock, locks held (by database), calls a lock failed,
    # alarm retries beyond the plan explained by a restart or by a lock.
    boundary_deaths: collections.Counter[str] = field(default_factory=collections.Counter)
    boundaries_missed: int = 0
    starts_refused: int = 0
    locks: collections.Counter[str] = field(default_factory=collections.Counter)
    lock_failed_calls: int = 0
    stale_rows: int = 0  # index rows left early by a lost write, reconciled when due
    extra_retries: collections.Counter[str] = field(default_factory=collections.Counter)
    # On a fleet: the kills by node and by how they ended, calls whose node went away
    # (unknown outcome), calls a lease or node fault failed (nothing kept), handler
    # runs checked for overlaps across nodes.
    fleet_kills: collections.Counter[str] = field(default_factory=collections.Counter)
    unknown_calls: int = 0
    fleet_failed_calls: int = 0
    spans_checked: int = 0
    violations: list[str] = field(default_factory=list)

    def add(self, message: str) -> None:
        self.violations.append(message)

    def summary(self) -> str:
        deaths = sum(self.boundary_deaths.values())
        by_point = ", ".join(f"{k} {v}" for k, v in sorted(self.boundary_deaths.items()))
        locks = ", ".join(f"{k} {v}" for k, v in sorted(self.locks.items()))
        extra = ", ".join(f"{k} {v}" for k, v in sorted(self.extra_retries.items()))
        return (f"kills survived: {self.kills} ({deaths} at a write boundary"
                f"{': ' + by_point if by_point else ''}; {self.boundaries_missed} boundaries "
                f"not reached, killed by line count; {self.starts_refused} starts refused "
                f"under a lock); locks held: {sum(self.locks.values())}"
                f"{' (' + locks + ')' if locks else ''}, calls failed by a lock: "
                f"{self.lock_failed_calls}; alarms checked: {self.alarms_checked} "
                f"({self.fires} handler runs, {self.dead_letters} dead letters, extra retries "
                f"{extra or 'none'}, {self.stale_rows} index rows early, to reconcile); "
                f"steps checked: {self.steps_checked} in {self.executions_checked} executions; "
                f"storage writes checked: {self.writes_checked}; keyed deliveries checked: "
                f"{self.deliveries_checked}; {self.fleet_summary()}"
                f"violations found: {len(self.violations)}")

    def fleet_summary(self) -> str:
        if not self.fleet_kills:
            return ""
        kills = ", ".join(f"{k} {v}" for k, v in sorted(self.fleet_kills.items()))
        return (f"fleet: kills {kills}; calls of unknown outcome (their node went away): "
                f"{self.unknown_calls}, calls failed by a lease or node fault: "
                f"{self.fleet_failed_calls}; handler runs checked for overlap across nodes: "
                f"{self.spans_checked}; ")


class Record:
    """The record, indexed for the checks."""

    def __init__(self, lines: list[dict[str, Any]]) -> None:
        self.lines = lines
        self.ops: dict[str, Op] = {}
        self.by_obj: dict[str, list[Op]] = collections.defaultdict(list)
        self.fires: dict[tuple[str, int], list[tuple[int, dict[str, Any]]]] = \
            collections.defaultdict(list)
        self.bodies: dict[tuple[str, str], list[tuple[int, dict[str, Any]]]] = \
            collections.defaultdict(list)
        self.kind: dict[str, list[tuple[int, dict[str, Any]]]] = collections.defaultdict(list)
        self.locks: list[Lock] = []
        open_locks: dict[str, Lock] = {}
        for pos, line in enumerate(lines):
            k = line["k"]
            self.kind[k].append((pos, line))
            if k == "intent":
                args = {key: v for key, v in line.items() if key not in ("k", "op", "obj", "what")}
                op = Op(line["op"], line["obj"], line["what"], args, pos)
                self.ops[op.id] = op
                self.by_obj[op.obj].append(op)
            elif k == "ack":
                self.ops[line["op"]].ack_pos = pos
                self.ops[line["op"]].result = line.get("result")
            elif k == "nack":
                self.ops[line["op"]].nack_pos = pos
                self.ops[line["op"]].error = line.get("error")
            elif k == "lock":
                lock = open_locks[line["id"]] = Lock(line["id"], line["db"], pos)
                self.locks.append(lock)
            elif k == "unlock" and line["id"] in open_locks:
                lock = open_locks.pop(line["id"])
                lock.end_pos, lock.from_ms, lock.to_ms = pos, line.get("from_ms"), line.get("to_ms")
            elif k == "fire":
                self.fires[(line["obj"], line["at"])].append((pos, line))
            elif k == "body":
                self.bodies[(line["exec"], line["op"])].append((pos, line))

    def ops_of(self, obj: str, whats: Iterable[str]) -> list[Op]:
        wanted = set(whats)
        return [op for op in self.by_obj.get(obj, []) if op.what in wanted]

    def lock_explains(self, op: Op) -> bool:
        """Whether a lock the harness held can have made this call fail."""
        if op.nack_pos is None or "locked" not in (op.error or "").lower():
            return False
        return any(lock.db in (RUNTIME_DB, op.base_obj) and lock.spans(op.pos, op.nack_pos)
                   for lock in self.locks)

    def restart_between(self, first_pos: int, last_pos: int) -> bool:
        """A process started, or (on a fleet, where another node may run the retry
        before the dead one is back) was killed, between two record lines."""
        return any(first_pos < p < last_pos for kind in ("boot", "kill", "boundary")
                   for p, _ in self.kind[kind])

    def shard_moved(self, obj: str, first_pos: int, last_pos: int) -> str | None:
        """On a fleet: how the shard of `obj` left a node between two record lines
        ("hand-over" or "lease lost"), or None."""
        cls, _, name = obj.partition("/")
        shard = shard_of((cls, name), FLEET_SHARDS)
        handed: set[str] = set()
        for pos, line in sorted(self.kind["handover"] + self.kind["shards"],
                                key=lambda x: x[0]):
            if pos >= last_pos:
                break
            if line["k"] == "handover" and shard in line["shards"]:
                handed.add(line["node"])
            elif line["k"] == "shards" and shard in line["lost"]:
                if pos > first_pos:
                    return "hand-over" if line["node"] in handed else "lease lost"
                handed.discard(line["node"])
        return None

    def lock_between(self, db: str, first_pos: int, last_pos: int) -> bool:
        return any(lock.db in (RUNTIME_DB, db) and lock.spans(first_pos, last_pos)
                   for lock in self.locks)


def candidates(ops: list[Op]) -> list[Op | None]:
    """The operations that may have been the last one to take effect: the last
    acknowledged one or any later one of unknown outcome; never a failed one."""
    ops = [op for op in ops if not op.failed]
    last_acked = max((i for i, op in enumerate(ops) if op.acked), default=None)
    if last_acked is None:
        return [None, *ops]
    return list(ops[last_acked:])


def explain(ops: list[Op], pred: Callable[[Op | None], bool]) -> bool:
    return any(pred(c) for c in candidates(ops))


def describe_ops(ops: list[Op], limit: int = 6) -> str:
    tail = ops[-limit:]
    return "; ".join(f"{op.id} {op.what} {json.dumps(op.args, sort_keys=True)} "
                     f"{'acked' if op.acked else 'unacked'}" for op in tail)


# -- alarms ----------------------------------------------------------------------------------

def check_alarms(rec: Record, state: dict[str, Any], seed: int, report: Report) -> None:
    rows = {f"{a['object_class']}/{a['object_name']}": a for a in state["alarms"]}
    views: dict[str, int | None] = state["alarm_views"]
    now = state["now_ms"]
    objects = {obj for obj in rec.by_obj if obj.startswith("ChaosAlarm/")}
    objects |= {obj for obj, _ in rec.fires}
    for obj in sorted(objects):
        ops = rec.ops_of(obj, ("set", "delete"))
        row = rows.get(obj)
        report.alarms_checked += sum(1 for op in ops if op.what == "set" and op.acked)

        def fired_ok(at: int, obj: str = obj) -> bool:
            return any(line["ok"] for _, line in rec.fires.get((obj, at), []))

        # What the object's own code sees (its committed intent): the truth. The index
        # row may differ from it only by being early: a row an earlier set left behind
        # when the index write after a later commit failed (reconciled, running no
        # handler, when it falls due).
        view = views.get(obj)
        earlier_ats = {op.args["at"] for op in ops if op.what == "set" and not op.failed}

        def stale(row: dict[str, Any], earlier_ats: set[int] = earlier_ats) -> bool:
            return row["state"] in ("pending", "dead") and row["scheduled_ms"] in earlier_ats

        def holds(c: Op | None, row: Any = row, fired_ok: Any = fired_ok, view: Any = view,
                  stale: Any = stale) -> bool:
            if c is None or c.what == "delete":
                return view is None and (row is None or stale(row))
            at = c.args["at"]
            if row is None:
                return view is None and bool(fired_ok(at))
            if row["scheduled_ms"] != at:
                if view is None and fired_ok(at) and stale(row) and \
                        row["scheduled_ms"] > at:
                    # c fired; a later set wrote its fresh row first (there was none)
                    # and died before its commit: that row is early, reconciled (no
                    # handler) when it falls due.
                    return True
                return bool(view == at and stale(row) and row["state"] == "pending"
                            and row["next_attempt_ms"] <= at)
            if row["state"] == "dead":
                return view is None and len(row["attempts"]) == ALARM_RETRIES + 1
            return bool(row["state"] == "pending" and row["next_attempt_ms"] > now
                        and view == row["next_attempt_ms"])

        if not explain(ops, holds):
            report.add(f"alarm vanished or wrong: {obj}: final row "
                       f"{json.dumps(_row_brief(row))}, the object sees {view}; recent "
                       f"calls: {describe_ops(ops)}")
        elif row is not None and view != (None if row["state"] == "dead"
                                           else row["next_attempt_ms"]):
            report.stale_rows += 1
        if row is not None and row["state"] != "dead" and (
                row["next_attempt_ms"] is None or row["next_attempt_ms"] < now + SETTLE_HORIZON_MS):
            report.add(f"alarm did not settle: {obj} is {row['state']} "
                       f"(due {row['next_attempt_ms']}, now {now})")
        # Nothing fires once a later call replaced or deleted it (durably acknowledged).
        for i, later in enumerate(ops):
            if not later.acked:
                continue
            for earlier in ops[:i]:
                if earlier.what != "set":
                    continue
                late = [p for p, _ in rec.fires.get((obj, earlier.args["at"]), [])
                        if p > (later.ack_pos or 0)]
                if late:
                    report.add(f"alarm fired after it was replaced: {obj} set for "
                               f"{earlier.args['at']} ({earlier.id}) ran at record line "
                               f"{late[0]}, after {later.id} {later.what} was acknowledged "
                               f"at line {later.ack_pos}")
        for op in ops:
            if op.what == "set" and op.failed and (obj, op.args["at"]) in rec.fires:
                report.add(f"the alarm of a failed call fired: {obj} set for {op.args['at']} "
                           f"({op.id}) failed with {op.error!r}, yet its handler ran")
        if row is not None and row["state"] == "dead":
            report.dead_letters += 1
            _check_dead_letter(rec, obj, row, alarm_failures(seed, obj, row["scheduled_ms"]),
                               report)
    for (obj, at), fires in rec.fires.items():
        report.fires += len(fires)
        failures = alarm_failures(seed, obj, at)
        _check_fires(obj, at, [line for _, line in fires], failures, report)
        _check_extra_retries(rec, obj, at, fires, failures, report)
    for row in state["alarms"]:
        if row["state"] == "running":
            report.add(f"alarm left running: {row['object_class']}/{row['object_name']} "
                       f"(started {row.get('started_ms')}, retry {row['retry_count']})")




def _row_brief(row: dict[str, Any] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {k: row[k] for k in ("scheduled_ms", "state", "retry_count", "next_attempt_ms")} | {
        "attempts": len(row["attempts"])}


def _check_fires(obj: str, at: int, fires: list[dict[str, Any]], failures: int,
                 report: Report) -> None:
    retries = [f["retry"] for f in fires]
    if any(b <= a for a, b in itertools.pairwise(retries)):
        report.add(f"alarm attempt ran without a recorded start: {obj} at {at} ran with retry "
                   f"counts {retries} (each attempt must count)")
    if any(r > ALARM_RETRIES for r in retries):
        report.add(f"alarm ran past its retry budget: {obj} at {at} retry counts {retries}, "
                   f"max_retries {ALARM_RETRIES}")
    for f in fires:
        if f["ok"] != (f["retry"] >= failures):
            report.add(f"alarm attempt disagrees with the injected faults: {obj} at {at} "
                       f"retry {f['retry']} ok={f['ok']} with {failures} planned failures")


def _check_extra_retries(rec: Record, obj: str, at: int,
                         fires: list[tuple[int, dict[str, Any]]], failures: int,
                         report: Report) -> None:
    """Retries beyond the plan: each must lie across a restart or a lock.

    Between two recorded runs of one alarm, the attempts in between failed. Those the
    plan fails are expected; any other (the first run should have succeeded, or
    attempts ran without a recorded run: cut short before the handler) needs a
    crash or a lock in that stretch of the record (on a fleet: a kill, or a node whose
    lease renewal ran late)."""
    for (pos_a, a), (pos_b, b) in itertools.pairwise(fires):
        unplanned = a["retry"] >= failures or b["retry"] > a["retry"] + 1
        if not unplanned:
            continue
        if rec.restart_between(pos_a, pos_b):
            report.extra_retries["crash"] += 1
        elif rec.lock_between(obj, pos_a, pos_b):
            report.extra_retries["lock"] += 1
        elif any(pos_a < p < pos_b for p, _ in rec.kind["lease_late"]):
            # On a fleet: a node's renewal ran past its lease (a pause, a starved
            # process), so another may have taken the shard and retried the attempt.
            report.extra_retries["late lease"] += 1
        elif (how := rec.shard_moved(obj, pos_a, pos_b)) is not None:
            # The object's shard left its node (handed over, or found taken at a
            # renewal): an attempt in flight there ended fenced out, counted, and the
            # new owner retried it.
            report.extra_retries[how] += 1
        else:
            report.add(f"alarm retried beyond its plan with no fault to explain it: {obj} at "
                       f"{at} ran retry {a['retry']} (ok={a['ok']}) at record line {pos_a} and "
                       f"retry {b['retry']} at line {pos_b}, {failures} failures planned, no "
                       "restart or lock in between")


def _check_dead_letter(rec: Record, obj: str, row: dict[str, Any], failures: int,
                       report: Report) -> None:
    attempts = row["attempts"]
    if len(attempts) != ALARM_RETRIES + 1:
        report.add(f"dead letter without its attempts: {obj} has {len(attempts)} attempts, "
                   f"expected {ALARM_RETRIES + 1}")
    for i, attempt in enumerate(attempts):
        error = attempt.get("error") or ""
        open_end = attempt.get("end_ms") is None
        injected = CHAOS_FAULT in error and i < failures
        crashed = CRASH_ERROR in error and open_end
        by_lock = ("locked" in error.lower() or (open_end and error.startswith(UNRECORDED_END))
                   ) and any(lock.db in (RUNTIME_DB, obj) and
                             lock.covers_ms(attempt["start_ms"], attempt.get("end_ms"))
                             for lock in rec.locks)
        if not (injected or crashed or by_lock):
            report.add(f"dead letter inconsistent with the injected faults: {obj} attempt {i} "
                       f"failed with {error!r} but {failures} failures were planned and it was "
                       "neither a crash nor a lock's doing")


# -- storage writes --------------------------------------------------------------------------

def check_writers(rec: Record, state: dict[str, Any], report: Report) -> None:
    for obj, dump in state["writers"].items():
        kv, rows = dump["kv"], set(dump["rows"])
        writes = rec.ops_of(obj, ("write",))
        keys = {op.args["key"] for op in writes} | set(kv)
        for key in sorted(keys):
            ops = [op for op in writes if op.args["key"] == key]
            report.writes_checked += sum(1 for op in ops if op.acked)
            final = kv.get(key)

            def holds_value(c: Op | None, final: Any = final) -> bool:
                return bool(final == (None if c is None else c.args["value"]))

            if not explain(ops, holds_value):
                report.add(f"acknowledged write lost: {obj} key {key} holds {final!r}; recent "
                           f"calls: {describe_ops(ops)}")
        inserts = rec.ops_of(obj, ("insert",))
        intended = {op.args["row"] for op in inserts if not op.failed}
        for op in inserts:
            if op.acked:
                report.writes_checked += 1
                if op.args["row"] not in rows:
                    report.add(f"acknowledged insert lost: {obj} row {op.args['row']} ({op.id})")
            if op.failed and op.args["row"] in rows:
                report.add(f"a failed call kept its write: {obj} row {op.args['row']} ({op.id} "
                           f"failed with {op.error!r})")
        phantom = rows - intended
        if phantom:
            report.add(f"rows nobody inserted: {obj} {sorted(phantom)[:5]}")


def check_counters(rec: Record, state: dict[str, Any], report: Report) -> None:
    flushes: dict[str, int] = collections.Counter()
    for _, line in rec.kind["flush"]:
        flushes[line["obj"]] += line["count"]
    for obj, totals in state["counters"].items():
        hits = rec.ops_of(obj, ("hit",))
        acked = sum(op.args["n"] for op in hits if op.acked)
        unknown = sum(op.args["n"] for op in hits if not op.acked and not op.failed)
        total = totals["pending"] + totals["flushed"]
        report.writes_checked += sum(1 for op in hits if op.acked)
        if not acked <= total <= acked + unknown:
            report.add(f"debounce counter lost or invented hits: {obj} counted {total}, "
                       f"acknowledged {acked} (+{unknown} of unknown outcome; failed calls "
                       "count none)")
        if totals["pending"]:
            report.add(f"debounce counter never flushed: {obj} still has {totals['pending']} "
                       "pending")
        if flushes[obj] < totals["flushed"]:
            report.add(f"debounce flush not delivered: {obj} flushed {totals['flushed']} but the "
                       f"sink saw only {flushes[obj]}")


def check_leases(rec: Record, state: dict[str, Any], report: Report) -> None:
    now = state["now_ms"]
    expiries: dict[tuple[str, str], list[tuple[int, int]]] = collections.defaultdict(list)
    for pos, line in rec.kind["expire"]:
        expiries[(line["obj"], line["lease"])].append((pos, line["expires"]))
    keys = {tuple(obj.split("#", 1)) for obj in rec.by_obj if obj.startswith("LeaseLedger/")}
    for ledger, lease in sorted(keys):
        ops = rec.ops_of(f"{ledger}#{lease}", ("grant", "release"))
        held = state["leases"].get(ledger, {}).get(lease)
        seen = expiries.get((ledger, lease), [])
        report.writes_checked += sum(1 for op in ops if op.acked)

        def holds(c: Op | None, held: Any = held, seen: Any = seen) -> bool:
            if c is None or c.what == "release":
                return held is None
            if not c.acked:  # expiry time unknown: present, or gone with an expiry seen
                return held is not None or any(p > c.pos for p, _ in seen)
            expires = c.result
            if expires > now:
                return bool(held == expires)
            return held is None and any(e == expires for _, e in seen)

        if not explain(ops, holds):
            report.add(f"lease lost or never expired: {ledger} {lease} holds {held}; expiries "
                       f"seen {[e for _, e in seen][-3:]}; recent calls: {describe_ops(ops)}")
        for i, later in enumerate(ops):
            if not later.acked:
                continue
            after = [op for op in ops[i:] if op.what == "grant" and not op.failed]
            if any(not op.acked for op in after):
                continue  # a later grant of unknown expiry may explain any expiry
            # A later grant can land on the very same millisecond.
            explained = {op.result for op in after}
            for earlier in ops[:i]:
                if earlier.what != "grant" or not earlier.acked or earlier.result in explained:
                    continue
                late = [p for p, e in seen if e == earlier.result and p > (later.ack_pos or 0)]
                if late:
                    report.add(f"lease expired after it was replaced: {ledger} {lease} expiry "
                               f"{earlier.result} delivered at line {late[0]}, after {later.id} "
                               f"{later.what} was acknowledged")


# -- executions ------------------------------------------------------------------------------

def _payload(event: dict[str, Any]) -> Any:
    text = event["StepSucceededDetails"]["Result"]["Payload"]
    return None if text is None else json.loads(text)


def check_executions(rec: Record, state: dict[str, Any], seed: int,
                     report: Report) -> None:
    """Check every execution: finished, waiting or with a human, and as planned."""
    starts = {op.args["exec"]: op for op in rec.ops.values() if op.what == "start"}
    for eid, op in sorted(starts.items()):
        d = state["executions"].get(eid)
        if d is None:
            if op.acked:
                report.add(f"acknowledged execution start vanished: {eid}")
            continue
        report.executions_checked += 1
        _check_steps(rec, eid, d, report)
        if d["status"] not in ("succeeded", "failed", "needs_human", "suspended"):
            report.add(f"execution neither finished, waiting nor with a human: {eid} is "
                       f"{d['status']} ({d.get('blocked_on')})")
        elif d["name"] == FESTIVAL:
            _check_festival(eid, d, festival_plan(seed, eid), report)
        elif d["name"] == TRIP:
            _check_trip(eid, d, hotel_failures(seed, eid), report)
    _check_deliveries(rec, state, report)





def _check_steps(rec: Record, eid: str, d: dict[str, Any], report: Report) -> None:
    succeeded: dict[str, dict[str, Any]] = {}
    for ev in d["history"]:
        if ev["EventType"] != "StepSucceeded":
            continue
        op_id = ev["Id"]
        if op_id in succeeded:
            report.add(f"step checkpointed twice: {eid} operation {op_id} ({ev.get('Name')})")
        succeeded[op_id] = ev
        report.steps_checked += 1
        nonce = _payload(ev)
        bodies = rec.bodies.get((eid, op_id), [])
        if not bodies:
            report.add(f"step result without a body run: {eid} {op_id} {ev.get('Name')}")
            continue
        if nonce not in [b["nonce"] for _, b in bodies]:
            report.add(f"checkpointed result not produced by any body run: {eid} {op_id} "
                       f"{ev.get('Name')} {nonce!r}")
        last = bodies[-1][1]
        if last["nonce"] != nonce:
            report.add(f"checkpointed step recomputed: {eid} {op_id} {ev.get('Name')} "
                       f"checkpointed {nonce!r} but ran again afterwards ({last['nonce']!r}, "
                       f"record line {bodies[-1][0]})")


def _saga_states(d: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e["name"], e["state"]) for e in d["saga"]]


def _succeeded_names(d: dict[str, Any]) -> set[str]:
    return {ev.get("Name", "") for ev in d["history"] if ev["EventType"] == "StepSucceeded"}


def _failed_events(d: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [ev for ev in d["history"] if ev["EventType"] == "StepFailed" and ev.get("Name") == name]


def _check_festival(eid: str, d: dict[str, Any], plan: Any, report: Report) -> None:
    forward = {"reserve_streaming", "open_viewing_page", "notify_partners"}
    if plan.waits:
        if d["status"] != "suspended" or "verdict" not in (d.get("blocked_on") or ""):
            report.add(f"festival {eid} should wait for its verdict, is {d['status']} "
                       f"({d.get('blocked_on')})")
        return
    if plan.verdict == "go":
        want = ("succeeded", "streaming")
        got = (d["status"], (d["result"] or {}).get("status"))
        if got != want or not forward | {"start_streaming"} <= _succeeded_names(d):
            report.add(f"festival {eid} with verdict go ended {got}, steps "
                       f"{sorted(_succeeded_names(d))}")
        return
    comp = [("notify_partners", "compensated"), ("open_viewing_page", "compensated"),
            ("reserve_streaming", "compensated")]
    if plan.ends_with_human:
        comp = [("notify_partners", "compensated"), ("open_viewing_page", "failed"),
                ("reserve_streaming", "pending")]
        if d["status"] != "needs_human" or _saga_states(d) != comp:
            report.add(f"festival {eid} should need a human with stack {comp}, is "
                       f"{d['status']} {_saga_states(d)}")
        failed = _failed_events(d, "compensate_open_viewing_page")
        if len(failed) != COMPENSATION_ATTEMPTS:
            report.add(f"festival {eid}: {len(failed)} failed compensation attempts recorded "
                       f"before the human, the retry budget is {COMPENSATION_ATTEMPTS}")
        return
    result = d["result"] or {}
    if d["status"] != "succeeded" or result.get("status") != "cancelled" or [
            (e["name"], e["state"]) for e in result.get("saga", [])] != comp:
        report.add(f"festival {eid} should be cancelled with everything compensated, is "
                   f"{d['status']} {result}")
    if not forward | {"record_cancellation"} <= _succeeded_names(d):
        report.add(f"festival {eid} is missing steps: {sorted(_succeeded_names(d))}")


def _check_trip(eid: str, d: dict[str, Any], failures: int, report: Report) -> None:
    failed = _failed_events(d, "book_hotel")
    if any(CHAOS_FAULT not in json.dumps(ev) for ev in failed):
        report.add(f"trip {eid}: book_hotel failed with an error nobody injected")
    if len(failed) > min(failures, HOTEL_ATTEMPTS):
        report.add(f"trip {eid}: book_hotel failed {len(failed)} times, only {failures} "
                   "failures were injected")
    result = d["result"] or {}
    if failures >= HOTEL_ATTEMPTS:
        ok = (d["status"] == "succeeded" and result.get("status") == "rolled_back"
              and [(e["name"], e["state"]) for e in result.get("saga", [])]
              == [("book_flight", "compensated")] and len(failed) == HOTEL_ATTEMPTS)
        if not ok:
            report.add(f"trip {eid} should roll back after {HOTEL_ATTEMPTS} hotel failures, is "
                       f"{d['status']} {result} with {len(failed)} failures")
        return
    hotel = [ev for ev in d["history"] if ev["EventType"] == "StepSucceeded"
             and ev.get("Name") == "book_hotel"]
    attempt = hotel[0]["StepSucceededDetails"]["RetryDetails"]["CurrentAttempt"] if hotel else 0
    if d["status"] != "succeeded" or result.get("status") != "booked" or (
            attempt != len(failed) + 1):
        report.add(f"trip {eid} should be booked (attempt {len(failed) + 1}), is {d['status']} "
                   f"{result} at attempt {attempt}")


def _check_deliveries(rec: Record, state: dict[str, Any], report: Report) -> None:
    tried: dict[str, int] = collections.Counter(line["key"] for _, line in rec.kind["deliver"])
    returned: dict[str, list[bool]] = collections.defaultdict(list)
    where: dict[tuple[str, str], str] = {}  # (execution, operation) -> the key it delivered
    for _, line in rec.kind["delivered"]:
        returned[line["key"]].append(line["first"])
    for _, line in rec.kind["deliver"]:
        where[(line["exec"], line["op"])] = line["key"]
    ledger = state["ledger"]
    for key, attempts in tried.items():
        report.deliveries_checked += 1
        row = ledger.get(key)
        firsts = sum(returned[key])
        if firsts > 1:
            report.add(f"keyed side effect delivered {firsts} times: {key}")
        if returned[key] and row is None:
            report.add(f"keyed delivery acknowledged but missing from the ledger: {key}")
        if row is not None and not len(returned[key]) <= row["deliveries"] <= attempts:
            report.add(f"ledger count of {key} is {row['deliveries']}, the record saw "
                       f"{len(returned[key])} returned of {attempts} attempts")
    for eid, d in state["executions"].items():
        for ev in (d or {}).get("history", []):
            if ev["EventType"] == "StepSucceeded" and ev.get("Name") in (
                    "notify_partners", "compensate_notify_partners", "charge"):
                step_key = where.get((eid, ev["Id"]))
                if step_key is None or ledger.get(step_key) is None:
                    report.add(f"checkpointed keyed step without its delivery: {eid} "
                               f"{ev['Id']} {ev.get('Name')} (key {step_key})")


def check(lines: list[dict[str, Any]], state: dict[str, Any], seed: int,
          kills: int = 0) -> Report:
    """Every invariant of the run; the report lists the violations."""
    report = Report(kills=kills)
    if not state.get("settled"):
        report.add(f"the run did not settle: still waiting for {state.get('waiting')}")
    rec = Record(lines)
    check_alarms(rec, state, seed, report)
    check_writers(rec, state, report)
    check_counters(rec, state, report)
    check_leases(rec, state, report)
    check_executions(rec, state, seed, report)
    for _, line in rec.kind["nack"]:
        op = rec.ops[line["op"]]
        if rec.lock_explains(op):
            report.lock_failed_calls += 1
        elif rec.kind["kill"] and line["error"].startswith(FLEET_ERRORS):
            report.fleet_failed_calls += 1
        else:
            report.add(f"a call failed with an error no lock explains: {op.id} {op.obj} "
                       f"{op.what} {line['error']}")
    report.unknown_calls = len(rec.kind["unknown"])
    check_spans(rec, report)
    _count_faults(rec, report)
    return report


# What a call meets when a node of the fleet dies or loses a lease under it: the
# event did not commit (the checker still proves it kept nothing).
FLEET_ERRORS = ("LeaseLost", "NodeUnreachable", "PeerDown", "ShardMoved")


def check_spans(rec: Record, report: Report) -> None:
    """On a fleet: no two nodes ran handlers of one object at once. Each finished
    handler run wrote its node and wall-clock span; a run cut by a kill wrote none."""
    spans: dict[str, list[tuple[int, int, str]]] = collections.defaultdict(list)
    for _, line in rec.kind["span"]:
        spans[line["obj"]].append((line["t0"], line["t1"], line.get("node", "?")))
    for obj, runs in sorted(spans.items()):
        runs.sort()
        report.spans_checked += len(runs)
        end, node = runs[0][1], runs[0][2]
        for t0, t1, n in runs[1:]:
            if t0 < end and n != node:
                report.add(f"handlers ran on two nodes at once: {obj} on {node} until {end} "
                           f"and on {n} from {t0} (wall clock, us)")
            if t1 > end:
                end, node = t1, n


def _count_faults(rec: Record, report: Report) -> None:
    boundaries = {line["round"] for _, line in rec.kind["boundary"]}
    for _, line in rec.kind["boundary"]:
        report.boundary_deaths[f"{line['kind']} {line['point']}"] += 1
    report.boundaries_missed = sum(1 for kind in ("boot", "armed") for _, line in rec.kind[kind]
                                   if line.get("boundary") and line["round"] not in boundaries)
    for _, line in rec.kind["kill"]:
        if line["how"] != "settle":
            report.fleet_kills[line["node"]] += 1
    report.starts_refused = len(rec.kind["start_refused"])
    for lock in rec.locks:
        if lock.from_ms is not None:
            report.locks["runtime.sqlite" if lock.db == RUNTIME_DB else "object db"] += 1
