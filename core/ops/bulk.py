"""`runtime.bulk`: start, run, resume and cancel bulk actions.

A batch is rows of the runtime database (`bulk_batches`, `bulk_items`), so it
outlives the client that started it and the runtime itself: `start` records every
key it will act on before it returns (a selection's matches are fixed when the
operator confirms), and a runtime that starts resumes every open batch. In a
fleet a batch is run by one node at a time (the batch's `node`); the nodes still
running look out for one that goes (a clean stop, or its leases left to run out)
and one of them takes over the batches it left. A runner reads its batch's row
before each group: a cancel made on another node, or a takeover by another node,
stops it there.

A runner works through the items in seq order, at most `throttle` at a time:

- Alarm items on this node whose record is not in an attempt (the common case:
  dead letters) are decided from their records, with no object woken, and written
  in one transaction per group: the alarm rows, each item's outcome and each
  item's audit row land together or not at all.
- Alarm items that need the object's turn (pause, resume, a running attempt) or
  live on another node go through the runtime's own action, one by one; their
  outcomes are written after. Each of these is safe to do again after a crash. One
  the runtime refuses because it is stopping did not run: it stays open, and the
  runner stops, as the stop would have stopped it.
- Execution items call `runtime.executions`, which audits each one; an item is
  marked `running` first with what it saw, so a restart can tell whether the
  action landed (`actions.already_applied`).

A run cut short by storage or the fleet (a shard moved under a group, an owner not
reached, PostgreSQL away) goes on from the items still open, as a resume would.

The batch itself is one more audit row, written with its end (action
`bulk_<action>`, target the batch id, the counts in the detail). Events:
`bulk.started`, `bulk.progress` (coalesced, see `progress`), `bulk.finished`.
"""

from __future__ import annotations

import asyncio
import builtins
import itertools
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from alarmtop.core.model import alarm_pause, alarm_policy
from alarmtop.core.model.alarm_policy import AlarmKey, AlarmRecord, AlarmState
from alarmtop.core.model.bulk_actions import (
    MAX_ITEMS,
    ExecutionState,
    StartPlan,
    already_applied,
    plan_start,
)
from alarmtop.core.model.bulk_items import BATCH_OPEN, PREP_CHUNK, ItemOutcome
from alarmtop.core.model.bulk_pacing import GapPacer
from alarmtop.core.model.bulk_progress import Progress, finished_status
from alarmtop.core.model.errors import (
    AlarmtopError,
    InvalidArgument,
    NoAlarm,
    NodeUnreachable,
    NotFound,
    RuntimeNotRunning,
    StorageError,
)
from alarmtop.core.model.selection import Selection, parse_selection

if TYPE_CHECKING:
    from alarmtop.core.runtime import Runtime

log = logging.getLogger("alarmtop.bulk")
CHUNK = 2_000  # open items read at a time
# Items per transaction at most, whatever the throttle: the runtime's own alarm
# commits queue behind a group's on the one writer, and a group of a thousand
# (three thousand rows with its outcomes and audit) holds them for tens of ms.
WRITE_GROUP = 200
# A batch gives way to the alarms it shares the runtime database with: each group
# is sized to fit before the next due alarm (`pacing`), looked at this often.
YIELD_STEP_S = 0.001
PREVIEW_SAMPLE = 20
CANCEL_ANSWER_S = 2.0  # a cancel answers by then, ended or still "cancelling"
# A runner cut short by storage or the fleet (see `_run`) goes on after this, doubling
# up to RETRY_MAX_S while it gets nowhere (wall time).
RETRY_FIRST_S = 0.1
RETRY_MAX_S = 5.0
FAILURES_SHOWN = 100
# The runtime's own action for an alarm item sent one by one (`Runtime._operate_here`).
_RUNTIME_ACTION = {"rearm": "re-arm", "fire_now": "fire", "clear_dead_letter": "clear",
                   "pause_alarm": "pause", "resume_alarm": "resume"}


class BatchNotFound(NotFound):
    def __init__(self, batch_id: str) -> None:
        super().__init__(f"no bulk batch {batch_id!r}; rt.bulk.list() (ops: bulks) lists them")


def _split(key: str) -> AlarmKey:
    cls, _, name = key.partition("/")
    return cls, name


def decide(action: str, rec: AlarmRecord | None, key: AlarmKey, now_ms: int,
           at_ms: int | None) -> alarm_policy.Transition:
    """An alarm item's change, from its record alone (pure); raises with the reason the
    item fails."""
    if rec is None:
        raise NoAlarm(key[0], key[1], action.replace("_", " "))
    if action == "rearm":
        return alarm_policy.rearm(rec, now_ms if at_ms is None else at_ms)
    if action == "fire_now":
        alarm_pause.refuse_fire_now(rec)
        return alarm_policy.fire_now(rec, now_ms)
    if action == "clear_dead_letter":
        if rec.state is not AlarmState.DEAD:
            raise InvalidArgument(f"{key[0]}/{key[1]}'s alarm is {rec.state.value}, not a dead "
                                  "letter; nothing cleared")
        return alarm_policy.delete_alarm(rec)
    raise InvalidArgument(f"{action} is not decided from the record")


class _Stopping(Exception):
    """The runtime stops under a runner: what it did not run stays open, for the next
    start or another node, as when the stop cancels the runner."""


# What cuts an item short without it having run: its owner not reached, or a write
# refused (a lease lost, PostgreSQL away). The item stays open and the runner goes on
# after a pause (`_run`), rather than failing it for good.
_CutShort = StorageError | NodeUnreachable
_CUT_SHORT = (StorageError, NodeUnreachable)


def _raise_left_open(results: Sequence[object]) -> None:
    """After a group's outcomes are written: stop the run if some items were left open,
    on the stop (`_Stopping`) first, else on the first error that cut one short."""
    if any(isinstance(r, _Stopping) for r in results):
        raise _Stopping
    for r in results:
        if isinstance(r, _CUT_SHORT):
            raise r


class _Runner:
    """One batch being worked through on this node."""

    def __init__(self, batch: dict[str, Any]) -> None:
        self.batch = batch
        self.cancelled = False
        self.task: asyncio.Task[None] | None = None
        self.progress: Progress | None = None
        self.cancel_reason: str | None = None
        self.lost = False  # another node took the batch over: this runner stops


class BulkService:
    """`runtime.bulk` (see the module docstring)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.store = rt.operator_rows
        self._runners: dict[str, _Runner] = {}
        self._ids = itertools.count(1)
        self._resuming = asyncio.Lock()
        self._up_seen: set[str] = set()  # the fleet's nodes up when last looked at
        self._watcher: asyncio.Task[None] | None = None
        self._starting: set[str] = set()  # batches whose `start` is still recording keys

    # -- asking -------------------------------------------------------------------------

    async def preview(self, selection: Any) -> dict[str, Any]:
        """How many alarms or executions `selection` matches now, and the first few keys;
        changes nothing."""
        sel = parse_selection(selection)
        count = await self.store.count_selected(sel)
        sample = await self.store.sample_selected(sel, PREVIEW_SAMPLE)
        return {"kind": sel.kind, "selection": sel.to_dict(), "count": count,
                "sample": sample, "max_items": MAX_ITEMS}

    async def get(self, batch_id: str) -> dict[str, Any]:
        """The batch: its counts (done / failed / left), status, and its failures with
        their reasons (the first 100)."""
        if not isinstance(batch_id, str):
            raise InvalidArgument(f"a batch id is text, not {batch_id!r}")
        row = await self.store.get_batch(batch_id)
        if row is None:
            raise BatchNotFound(batch_id)
        return await self._view(row, failures=True)

    async def list(self, limit: int = 50, after: str | None = None) -> list[dict[str, Any]]:
        """Batches, newest first; page with `after=` the last one's id."""
        if not isinstance(limit, int) or isinstance(limit, bool) or not 0 < limit <= 500:
            raise InvalidArgument(f"limit is 1-500, not {limit!r}")
        if after is not None and not isinstance(after, str):
            raise InvalidArgument(f"after is a batch id, not {after!r}")
        return [await self._view(r) for r in await self.store.list_batches(limit, after)]

    async def _view(self, row: dict[str, Any], failures: bool = False) -> dict[str, Any]:
        out = dict(row)
        out.pop("prep_after", None)
        out["left"] = max(0, row["total"] - row["done"] - row["failed"] - row["cancelled"])
        runner = self._runners.get(row["id"])
        prog = None if runner is None else runner.progress
        out["in_flight"] = 0 if prog is None else prog.in_flight
        out["max_in_flight"] = None if prog is None else prog.max_in_flight
        if failures:
            out["failures"] = await self.store.failures(row["id"], 0, FAILURES_SHOWN)
        return out

    # -- starting and cancelling --------------------------------------------------------

    async def start(self, action: Any, selection: Any = None, keys: Any = None, *,
                    kind: Any = None, max_in_flight: Any = None, reason: Any = None,
                    note: Any = None, at_ms: Any = None, actor: str = "api",
                    role: str | None = None) -> str:
        """Start a batch of `action` on `keys` (a list) or on what `selection` matches
        now (its keys are recorded before this returns); at most `max_in_flight` items
        at once. Returns the batch id at once: the batch runs on, durably. Bad input
        is refused (and audited) with nothing changed."""
        self.rt._check_running()
        try:
            plan = plan_start(action, keys, selection, kind=kind, throttle=max_in_flight,
                              note=note, reason=reason, at_ms=at_ms)
            if plan.selection is not None:
                count = await self.store.count_selected(plan.selection)
                if count == 0:
                    raise InvalidArgument("the selection matches nothing; nothing started "
                                          "(bulk_preview shows what a selection matches)")
                if count > MAX_ITEMS:
                    raise InvalidArgument(f"the selection matches {count:,}; a batch takes at "
                                          f"most {MAX_ITEMS:,}: narrow it")
        except AlarmtopError as exc:
            await self.rt.audit.record(actor, f"bulk_{_name(action)}", None, _text(reason),
                                       ok=False, role=role,
                                       detail={"error": str(exc), "outcome": "refused"})
            raise
        now = self.rt.clock.now_ms()
        batch_id = f"b{now:013d}-{next(self._ids):04d}"
        while await self.store.get_batch(batch_id) is not None:  # a restart reuses counters
            batch_id = f"b{now:013d}-{next(self._ids):04d}"
        row = {"id": batch_id, "action": plan.action, "kind": plan.kind,
               "status": "running" if plan.keys is not None else "preparing",
               "actor": actor, "role": role, "reason": plan.reason, "note": plan.note,
               "throttle": plan.throttle, "params": plan.params(),
               "total": 0 if plan.keys is None else len(plan.keys), "done": 0, "failed": 0,
               "cancelled": 0, "created_ms": now, "updated_ms": now, "ended_ms": None,
               "node": None, "prep_after": None}
        # Until its runner exists the batch is this call's: resume_open leaves it alone.
        self._starting.add(batch_id)
        try:
            await self.store.create_batch(row, plan.keys)
            if plan.selection is not None:
                row["total"] = await self._prepare(batch_id, plan.selection, None)
                row["status"] = "running"
        finally:
            self._starting.discard(batch_id)
        fresh = await self.store.get_batch(batch_id)
        if fresh is None or fresh["status"] not in BATCH_OPEN:
            return batch_id  # cancelled while its keys were recorded: nothing to run
        self.rt.events.emit("bulk.started", {
            "batch_id": batch_id, "action": plan.action, "kind": plan.kind,
            "total": row["total"], "throttle": plan.throttle, "actor": actor,
            "selection": None if plan.selection is None else plan.selection.to_dict()})
        self._spawn(row)
        return batch_id

    async def _prepare(self, batch_id: str, sel: Selection, after: str | None) -> int:
        """Record the selection's keys (from `after` on), chunk by chunk, each chunk
        fitted between the alarms due as a group of items is; the total."""
        pacer = GapPacer(PREP_CHUNK)
        while True:
            size = await self._give_way(pacer, PREP_CHUNK)
            began = time.perf_counter()
            _, after = await self.store.prepare_step(batch_id, sel, after, size)
            pacer.observe(size, (time.perf_counter() - began) * 1000)
            if after is None:
                break
        row = await self.store.get_batch(batch_id)
        assert row is not None
        return int(row["total"])

    async def cancel(self, batch_id: str, *, reason: str | None = None,
                     actor: str = "api", role: str | None = None) -> dict[str, Any]:
        """Stop a batch: items in flight end as they will, the rest are cancelled."""
        row = await self.store.get_batch(batch_id) if isinstance(batch_id, str) else None
        if row is None:
            raise BatchNotFound(str(batch_id))
        if row["status"] not in BATCH_OPEN:
            raise InvalidArgument(f"batch {batch_id} has ended ({row['status']}); nothing "
                                  "to cancel")
        runner = self._runners.get(batch_id)
        if runner is not None:
            runner.cancelled = True
            runner.cancel_reason = _text(reason)
            await self.store.submit(self.store.finish_write(
                batch_id, "cancelling", self.rt.clock.now_ms(),
                cancel_reason=runner.cancel_reason))
            prog = runner.progress
            self.rt.events.emit("bulk.progress", {
                "batch_id": batch_id, "action": row["action"], "kind": row["kind"],
                **(prog.counts() if prog is not None else {"total": row["total"]}),
                "status": "cancelling"})
            if runner.task is not None:
                # Items in flight end as they will, and one may wait on a busy object:
                # the answer (an operator's, under the server's command deadline) says
                # "cancelling" then, and the batch ends cancelled when they have.
                await self.rt.tasks.idle_wait(asyncio.wait({runner.task},
                                                           timeout=CANCEL_ANSWER_S))
        else:
            await self._cancel_elsewhere(row, _text(reason))
        return await self.get(batch_id)

    async def _cancel_elsewhere(self, row: dict[str, Any], reason: str | None) -> None:
        """Cancel a batch no runner of this node runs. One that runs on another node
        that is up is asked to end there: the row says `cancelling`, which its runner
        reads (`_check_row`), and the answer waits for it as a cancel here does. One
        that runs nowhere (left by a node that is gone) is taken and ended now."""
        batch_id, me, owner = row["id"], _node_id(self.rt), row.get("node")
        up = {str(n["node_id"]) for n in await self.rt.nodes() if n.get("up")}
        if not (_watch_period(self.rt) is not None and owner in up - {me}) and \
                await self.store.claim_batch(batch_id, me, owner):
            await self._finish(row, None, cancelled=True, cancel_reason=reason)
            return
        # The reason rides in the row: the runner on the other node ends the batch.
        await self.store.submit(self.store.finish_write(batch_id, "cancelling",
                                                        self.rt.clock.now_ms(),
                                                        cancel_reason=reason))
        self.rt.events.emit("bulk.progress", {
            "batch_id": batch_id, "action": row["action"], "kind": row["kind"],
            "total": row["total"], "status": "cancelling"})
        deadline = time.monotonic() + CANCEL_ANSWER_S
        while time.monotonic() < deadline:
            now = await self.store.get_batch(batch_id)
            if now is None or now["status"] not in BATCH_OPEN:
                return
            await self.rt.tasks.idle_wait(asyncio.sleep(0.02))

    async def wait(self, batch_id: str) -> dict[str, Any]:
        """Until the batch's runner on this node ends; the batch as it ended."""
        runner = self._runners.get(batch_id)
        if runner is not None and runner.task is not None:
            await asyncio.shield(runner.task)
        return await self.get(batch_id)

    # -- running ------------------------------------------------------------------------

    async def resume_open(self) -> None:
        """Run on every batch left open (by a stop, a crash or another node): at start,
        and in a fleet whenever another node is seen to go (`_watch_fleet`)."""
        async with self._resuming:  # the start's call and the watcher's: one at a time
            node = _node_id(self.rt)
            # A batch belongs to the node that runs it while that node is up; one left by
            # a node that is gone (a restart of this one included) is taken over.
            up = {str(n["node_id"]) for n in await self.rt.nodes() if n.get("up")}
            for row in await self.store.open_batches():
                if row["id"] in self._runners or row["id"] in self._starting or \
                        row.get("node") in up - {node}:
                    continue
                if await self.store.claim_batch(row["id"], node, row.get("node")):
                    self._spawn(row)
            # Only once all is looked at: cut short, the watcher sees the node gone again.
            self._up_seen = up
        self._watch()

    def _watch(self) -> None:
        """In a fleet, start looking out for nodes that go (once per start)."""
        period = _watch_period(self.rt)
        if period is None or (self._watcher is not None and not self._watcher.done()):
            return
        self._watcher = self.rt.tasks.spawn(self._watch_fleet(period), name="bulk fleet watch")

    async def _watch_fleet(self, period_s: float) -> None:
        """A node that stops, or stops renewing its leases, leaves its open batches to
        the nodes still running: each looks at the fleet's nodes every `period_s` (wall
        time, as leases go) and, when one it saw up is not any more, takes over what
        that node left (`claim_batch`: one taker wins). One of the runtime's tasks:
        it ends with the runtime."""
        while True:
            # Asleep, it is idle: a virtual clock moves on without it.
            await self.rt.tasks.idle_wait(asyncio.sleep(period_s))
            try:
                up = {str(n["node_id"]) for n in await self.rt.nodes() if n.get("up")}
                if self._up_seen - up:
                    await self.resume_open()
                else:
                    self._up_seen = up
            except Exception as exc:  # PostgreSQL away, say: looked at again next time
                log.warning("bulk batches: could not look for nodes that went: %s", exc)

    def _spawn(self, row: dict[str, Any]) -> None:
        runner = _Runner(row)
        self._runners[row["id"]] = runner
        runner.task = self.rt.tasks.spawn(self._run(runner), name=f"bulk {row['id']}")

    async def _run(self, runner: _Runner) -> None:
        """Work the batch through. Storage or the fleet may cut a run short: a shard
        moved under a group (its write fenced out, nothing of it kept), an item's owner
        could not be reached, PostgreSQL went away. The runner then goes on from the
        items still open, as a resume would, after a pause that grows while it gets
        nowhere. So does an error of alarmtop's own, said in full in the log: a batch
        left open with no runner would look running to an operator and move no more
        until a restart."""
        batch_id = runner.batch["id"]
        delay = RETRY_FIRST_S
        try:
            reload = False
            while True:
                before = runner.batch["done"] + runner.batch["failed"]
                try:
                    # Reading the row again is retried too: storage may still be away.
                    if reload and not await self._reload(runner):
                        return
                    await self._work(runner)
                    return
                except _Stopping:
                    raise
                except Exception as exc:
                    prog = runner.progress
                    if prog is not None and prog.done + prog.failed > before:
                        delay = RETRY_FIRST_S  # it got somewhere before this
                    if isinstance(exc, _CUT_SHORT):
                        log.warning("bulk batch %s was cut short (%s); it goes on in %g s",
                                    batch_id, exc, delay)
                    else:
                        log.exception("bulk batch %s stopped on an error; it goes on in "
                                      "%g s", batch_id, delay)
                await self.rt.tasks.idle_wait(asyncio.sleep(delay))
                delay = min(RETRY_MAX_S, delay * 2)
                reload = True
        except asyncio.CancelledError:
            raise  # the runtime stops: the batch stays open and resumes at the next start
        except _Stopping:
            log.info("bulk batch %s: the runtime stops under it; it resumes at the next "
                     "start (in a fleet, on a node still running)", batch_id)
        finally:
            self._runners.pop(batch_id, None)

    async def _reload(self, runner: _Runner) -> bool:
        """The batch's row again, before a runner goes on after being cut short: False
        when there is nothing more for it to do here (ended, or another node's now)."""
        row = await self.store.get_batch(runner.batch["id"])
        if row is None or row["status"] not in BATCH_OPEN:
            return False
        if _watch_period(self.rt) is not None and row.get("node") != _node_id(self.rt):
            return False
        runner.batch.update(row)
        return True

    async def _work(self, runner: _Runner) -> None:
        """One run through the batch's open items, to its end (or its cancel)."""
        row = runner.batch
        batch_id = row["id"]
        if row["status"] == "preparing":
            sel = parse_selection(row["params"]["selection"])
            row["total"] = await self._prepare(batch_id, sel, row.get("prep_after"))
        if row["status"] == "cancelling":
            runner.cancelled = True
        clock = self.rt.clock
        prog = runner.progress = Progress(row["total"], row["throttle"], done=row["done"],
                                          failed=row["failed"],
                                          cancelled=row["cancelled"],
                                          now_ms=clock.now_ms())
        seq = 0
        largest = min(row["throttle"], WRITE_GROUP)
        pacer = GapPacer(largest)
        while not (runner.cancelled or runner.lost):
            items = await self.store.open_items(batch_id, seq, CHUNK)
            if not items:
                break
            i = 0
            while i < len(items) and not runner.cancelled:
                size = await self._give_way(pacer, largest)
                if not self.rt.running:  # it stops: items would be refused
                    raise _Stopping
                await self._check_row(runner)
                if runner.cancelled or runner.lost:  # while it waited, or elsewhere
                    break
                group = items[i:i + size]
                began = time.perf_counter()
                await self._group(row, prog, group)
                pacer.observe(len(group), (time.perf_counter() - began) * 1000)
                i += len(group)
                seq = group[-1][0]
                if prog.due(clock.now_ms()):
                    self._progress(row, prog)
        if runner.lost:
            log.warning("bulk batch %s was taken over by another node (this one was "
                        "taken for gone); it runs on there", batch_id)
            return
        await self._finish(row, prog, cancelled=runner.cancelled,
                           cancel_reason=runner.cancel_reason)

    async def _check_row(self, runner: _Runner) -> None:
        """In a fleet, look at the batch's row before each group (one read by key): a
        cancel made on another node says `cancelling` there; a node that took the batch
        over (this one was taken for gone: it stopped renewing for a lease) is named in
        it."""
        if _watch_period(self.rt) is None or runner.cancelled:
            return
        row = await self.store.get_batch(runner.batch["id"])
        if row is None or row.get("node") != _node_id(self.rt) or \
                row["status"] not in BATCH_OPEN:
            runner.lost = True  # another node's now, or ended there (a cancel took it)
        elif row["status"] == "cancelling":
            runner.cancelled = True
            runner.cancel_reason = row.get("cancel_reason")

    async def _give_way(self, pacer: GapPacer, largest: int) -> int:
        """How many items the next group takes, once there is room for it between the
        alarms due (see `pacing`). Only on the system clock: a virtual clock's alarms
        wait for the test to move it."""
        from alarmtop.core.kernel.clock import SystemClock
        clock = self.rt.clock
        if not isinstance(clock, SystemClock):
            return largest
        sched = self.rt.scheduler
        began = time.perf_counter()
        while True:
            waited_ms = (time.perf_counter() - began) * 1000
            size = pacer.size(clock.now_ms(), sched.window.next_due_ms(), len(sched.running),
                              waited_ms)
            if size is not None:
                return size
            await asyncio.sleep(YIELD_STEP_S)

    def _progress(self, row: dict[str, Any], prog: Progress) -> None:
        prog.announced(self.rt.clock.now_ms())
        self.rt.events.emit("bulk.progress", prog.event(row["id"], row["action"], row["kind"]))

    async def _finish(self, row: dict[str, Any], prog: Progress | None, *,
                      cancelled: bool, cancel_reason: str | None = None) -> None:
        batch = await self.store.get_batch(row["id"])
        assert batch is not None
        now = self.rt.clock.now_ms()
        left = max(0, batch["total"] - batch["done"] - batch["failed"] - batch["cancelled"])
        status = finished_status(batch["failed"], cancelled)
        counts = {"total": batch["total"], "done": batch["done"], "failed": batch["failed"],
                  "cancelled": batch["cancelled"] + (left if cancelled else 0)}
        entry = {"at_ms": now, "actor": row["actor"], "role": row.get("role"),
                 "action": f"bulk_{row['action']}", "target": row["id"],
                 "reason": row.get("reason"), "ok": status == "done",
                 "detail": {"kind": row["kind"], "status": status, **counts,
                            "selection": row["params"].get("selection"),
                            "throttle": row["throttle"],
                            "max_in_flight": None if prog is None else prog.max_in_flight,
                            **({"cancel_reason": cancel_reason} if cancelled and cancel_reason
                               else {})}}
        await self.store.submit(self.store.finish_write(row["id"], status, now,
                                                        cancel_left=True, audit=[entry]))
        if prog is not None:
            prog.cancelled = counts["cancelled"]
            self._progress(row, prog)
        self.rt.events.emit("bulk.finished", {
            "batch_id": row["id"], "action": row["action"], "kind": row["kind"],
            "status": status, **counts,
            "max_in_flight": None if prog is None else prog.max_in_flight})

    async def _group(self, row: dict[str, Any], prog: Progress,
                     group: Sequence[tuple[int, str, str, dict[str, Any] | None]]) -> None:
        prog.began(len(group))
        try:
            if row["kind"] == "alarms":
                ok, failures = await self._alarm_group(row, group)
            else:
                ok, failures = await self._execution_group(row, group)
        except BaseException:
            prog.in_flight = max(0, prog.in_flight - len(group))
            raise
        prog.ended(ok, failures)

    # -- alarm items --------------------------------------------------------------------

    def _audit(self, row: dict[str, Any], key: str, now: int, error: str | None
               ) -> dict[str, Any]:
        from alarmtop.core.kernel.executions.service import safe_text
        detail: dict[str, Any] = {"batch_id": row["id"], "outcome": "ok" if error is None
                                  else "failed"}
        if error is not None:
            detail["error"] = safe_text(error)
        return {"at_ms": now, "actor": row["actor"], "role": row.get("role"),
                "action": row["action"], "target": safe_text(key),
                "reason": safe_text(row.get("reason")), "ok": error is None,
                "detail": detail}

    async def _alarm_group(self, row: dict[str, Any],
                           group: Sequence[tuple[int, str, str, dict[str, Any] | None]]
                           ) -> tuple[int, builtins.list[tuple[str, str]]]:
        rt, action = self.rt, row["action"]
        now = rt.clock.now_ms()
        at_ms = row["params"].get("at_ms")
        keyed = [(seq, key, _split(key)) for seq, key, _, _ in group]
        fast = action in ("rearm", "fire_now", "clear_dead_letter")
        local: builtins.list[tuple[int, str, AlarmKey]] = []
        slow: builtins.list[tuple[int, str, AlarmKey]] = []
        for item in keyed:
            if fast and await rt._router.peer(item[2]) is None:
                local.append(item)
            else:
                slow.append(item)
        recs = await self.store.get_many([k for _, _, k in local]) if local else {}
        changes: builtins.list[tuple[AlarmKey, alarm_policy.Transition]] = []
        outcomes: builtins.list[ItemOutcome] = []
        audit: builtins.list[dict[str, Any]] = []
        failures: builtins.list[tuple[str, str]] = []
        seen: set[AlarmKey] = set()
        for seq, key, akey in local:
            rec = recs.get(akey)
            if rec is not None and rec.state is AlarmState.RUNNING:
                slow.append((seq, key, akey))  # its attempt must end first: the object's turn
                continue
            try:
                if akey in seen:
                    raise InvalidArgument(f"{key} is in the batch twice; done once")
                seen.add(akey)
                changes.append((akey, decide(action, rec, akey, now, at_ms)))
            except AlarmtopError as exc:
                outcomes.append(ItemOutcome(seq, "failed", str(exc)))
                audit.append(self._audit(row, key, now, str(exc)))
                failures.append((key, str(exc)))
                continue
            outcomes.append(ItemOutcome(seq, "done"))
            audit.append(self._audit(row, key, now, None))
        if outcomes:
            await rt.scheduler.commit_many(changes,
                                           self.store.items_write(row["id"], outcomes, now,
                                                                  audit))
        ok = sum(1 for o in outcomes if o.status == "done")
        if slow:
            one_ok, one_failed = await self._alarm_items(row, slow)
            ok += one_ok
            failures += one_failed
        return ok, failures

    async def _alarm_items(self, row: dict[str, Any], items: Sequence[tuple[int, str, AlarmKey]]
                           ) -> tuple[int, builtins.list[tuple[str, str]]]:
        """Items that go through the runtime's own action, concurrently (the group is
        within the throttle); their outcomes and audit rows in one write after."""
        rt, action = self.rt, row["action"]
        at_ms = row["params"].get("at_ms")

        async def one(key: str, akey: AlarmKey) -> str | _Stopping | _CutShort | None:
            try:
                if action == "clear_faults":
                    self._clear_faults(key)
                    return None
                at = rt.clock.now_ms() if action == "rearm" and at_ms is None else at_ms
                await rt._operate_routed(akey[0], akey[1], _RUNTIME_ACTION[action], at,
                                         **({"reason": row.get("reason")}
                                            if action in ("pause_alarm", "resume_alarm")
                                            else {}))
            except RuntimeNotRunning:
                return _Stopping()  # refused, not run: the item stays open
            except _CUT_SHORT as exc:
                return exc  # nothing ran (the owner not reached, a write refused): open
            except AlarmtopError as exc:
                return str(exc)
            return None

        results = await asyncio.gather(*(one(key, akey) for _, key, akey in items))
        now = rt.clock.now_ms()
        outcomes: builtins.list[ItemOutcome] = []
        audit: builtins.list[dict[str, Any]] = []
        failures: builtins.list[tuple[str, str]] = []
        for (seq, key, _), err in zip(items, results, strict=True):
            if isinstance(err, (_Stopping, StorageError, NodeUnreachable)):
                continue
            outcomes.append(ItemOutcome(seq, "done" if err is None else "failed", err))
            audit.append(self._audit(row, key, now, err))
            if err is not None:
                failures.append((key, err))
        if outcomes:
            await self.store.submit(self.store.items_write(row["id"], outcomes, now, audit))
        _raise_left_open(results)
        return len(outcomes) - len(failures), failures

    def _clear_faults(self, target: str) -> int:
        faults = self.rt.faults
        ids = [f["id"] for f in faults.list() if f["target"] == target]
        for fid in ids:
            faults.clear(fid)
        return len(ids)

    # -- execution items ----------------------------------------------------------------

    async def _state(self, execution_id: str) -> ExecutionState | None:
        from alarmtop.core.model.replay import HUMAN
        store = self.rt.executions.engine.store
        rec = await store.get(execution_id)
        if rec is None:
            return None
        human = None
        if rec.status.value == "needs_human":
            for op in await store.operations(execution_id):
                if op.sub_type == HUMAN and op.status.value == "STARTED":
                    human = op.id
        return ExecutionState(rec.status.value, bool(rec.paused), rec.finished, rec.redrives,
                              human, rec.human_hold)

    async def _execution_group(self, row: dict[str, Any],
                               group: Sequence[tuple[int, str, str, dict[str, Any] | None]]
                               ) -> tuple[int, builtins.list[tuple[str, str]]]:
        rt, action = self.rt, row["action"]
        states = await asyncio.gather(*(self._state(key) for _, key, _, _ in group))
        todo: builtins.list[tuple[int, str]] = []
        outcomes: builtins.list[ItemOutcome] = []
        marks: builtins.list[ItemOutcome] = []
        for (seq, key, status, detail), st in zip(group, states, strict=True):
            if status == "running" and st is not None and already_applied(action, detail or {},
                                                                          st):
                outcomes.append(ItemOutcome(seq, "done", None, detail))  # it landed before
                continue
            todo.append((seq, key))
            if action != "clear_faults" and st is not None:
                marks.append(ItemOutcome(seq, "running", None, st.fingerprint()))
        now = rt.clock.now_ms()
        if marks:  # what each saw before acting, for a restart to judge by
            await self.store.submit(self.store.items_write(row["id"], marks, now))
        ex, reason = rt.executions, row.get("reason")
        kw: dict[str, Any] = {"actor": row["actor"], "role": row.get("role")}

        async def one(key: str) -> str | _Stopping | _CutShort | None:
            try:
                if action == "pause":
                    await ex.pause(key, reason, **kw)
                elif action == "resume":
                    await ex.resume(key, reason=reason, **kw)
                elif action == "redrive":
                    await ex.redrive(key, reason=reason, **kw)
                elif action == "retry_compensation":
                    await ex.retry_compensation(key, reason=reason, **kw)
                elif action == "resolve":
                    await ex.resolve(key, row.get("note") or "", reason=reason, **kw)
                elif action == "abort":
                    await ex.abort(key, reason or f"aborted by bulk batch {row['id']}", **kw)
                else:
                    self._clear_faults(key)
            except RuntimeNotRunning:
                return _Stopping()  # refused, not run: the item stays open (or running)
            except _CUT_SHORT as exc:
                return exc  # not reached or not written: open, judged again on the retry
            except AlarmtopError as exc:
                return str(exc)
            return None

        results = await asyncio.gather(*(one(key) for _, key in todo))
        audit = []
        failures: builtins.list[tuple[str, str]] = []
        stopped = False
        now = rt.clock.now_ms()
        for (seq, key), err in zip(todo, results, strict=True):
            if isinstance(err, (_Stopping, StorageError, NodeUnreachable)):
                stopped = True
                continue
            outcomes.append(ItemOutcome(seq, "done" if err is None else "failed", err))
            if action == "clear_faults":  # the others audit themselves (runtime.executions)
                audit.append(self._audit(row, key, now, err))
            if err is not None:
                failures.append((key, err))
        if outcomes:
            await self.store.submit(self.store.items_write(row["id"], outcomes, now, audit))
        if stopped:
            _raise_left_open(results)
        return sum(1 for o in outcomes if o.status == "done"), failures


def _name(action: Any) -> str:
    return action if isinstance(action, str) and action.isidentifier() and len(action) < 40 \
        else "unknown"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _watch_period(rt: Runtime) -> float | None:
    """How often a fleet's node looks for nodes that went (a third of a lease, as its
    lease keeper renews); None on a backend that is no fleet's."""
    from alarmtop.core.fleet.routing import FleetBackend
    backend = rt.backend
    if not isinstance(backend, FleetBackend):
        return None
    return max(0.05, float(backend.lease_s) / 3)


def _node_id(rt: Runtime) -> str:
    node = getattr(rt.backend, "node_id", None)
    return "local" if node is None else str(node)


__all__ = ["BatchNotFound", "BulkService", "StartPlan", "decide"]
