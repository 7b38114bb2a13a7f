"""A batch worked through on this node, group by group, fitted between the alarms."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from alarmtop.core.kernel.clock import SystemClock
from alarmtop.core.model.bulk_items import BATCH_OPEN, PREP_CHUNK
from alarmtop.core.model.bulk_pacing import GapPacer
from alarmtop.core.model.bulk_progress import Progress, finished_status
from alarmtop.core.model.selection import Selection, parse_selection
from alarmtop.core.ops.bulk.common import (
    CHUNK,
    CUT_SHORT,
    RETRY_FIRST_S,
    RETRY_MAX_S,
    WRITE_GROUP,
    YIELD_STEP_S,
    BulkParts,
    Runner,
    Stopping,
)
from alarmtop.core.ops.bulk.items import BatchItems

log = logging.getLogger("alarmtop.bulk")


class BatchRuns:
    """The batches this node runs now, each with its runner task."""

    def __init__(self, parts: BulkParts, items: BatchItems) -> None:
        self.parts = parts
        self.store = parts.store
        self.items = items
        self.runners: dict[str, Runner] = {}

    def spawn(self, row: dict[str, Any]) -> None:
        runner = Runner(row)
        self.runners[row["id"]] = runner
        runner.task = self.parts.tasks.spawn(self._run(runner), name=f"bulk {row['id']}")

    async def _run(self, runner: Runner) -> None:
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
                except Stopping:
                    raise
                except Exception as exc:
                    prog = runner.progress
                    if prog is not None and prog.done + prog.failed > before:
                        delay = RETRY_FIRST_S  # it got somewhere before this
                    if isinstance(exc, CUT_SHORT):
                        log.warning("bulk batch %s was cut short (%s); it goes on in %g s",
                                    batch_id, exc, delay)
                    else:
                        log.exception("bulk batch %s stopped on an error; it goes on in "
                                      "%g s", batch_id, delay)
                await self.parts.tasks.idle_wait(asyncio.sleep(delay))
                delay = min(RETRY_MAX_S, delay * 2)
                reload = True
        except asyncio.CancelledError:
            raise  # the runtime stops: the batch stays open and resumes at the next start
        except Stopping:
            log.info("bulk batch %s: the runtime stops under it; it resumes at the next "
                     "start (in a fleet, on a node still running)", batch_id)
        finally:
            self.runners.pop(batch_id, None)

    async def _reload(self, runner: Runner) -> bool:
        """The batch's row again, before a runner goes on after being cut short: False
        when there is nothing more for it to do here (ended, or another node's now)."""
        row = await self.store.get_batch(runner.batch["id"])
        if row is None or row["status"] not in BATCH_OPEN:
            return False
        if self.parts.watch_period_s is not None and row.get("node") != self.parts.node_id:
            return False
        runner.batch.update(row)
        return True

    async def _work(self, runner: Runner) -> None:
        """One run through the batch's open items, to its end (or its cancel)."""
        row = runner.batch
        batch_id = row["id"]
        if row["status"] == "preparing":
            sel = parse_selection(row["params"]["selection"])
            row["total"] = await self.prepare(batch_id, sel, row.get("prep_after"))
            fresh = await self.store.get_batch(batch_id)
            if fresh is not None:  # running now, or cancelling (a cancel came meanwhile)
                row["status"] = fresh["status"]
        if row["status"] == "cancelling":
            runner.cancelled = True
        clock = self.parts.clock
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
                if not self.parts.state.running:  # it stops: items would be refused
                    raise Stopping
                await self._check_row(runner)
                if runner.cancelled or runner.lost:  # while it waited, or elsewhere
                    break
                group = items[i:i + size]
                began = time.perf_counter()
                await self.items.group(row, prog, group)
                pacer.observe(len(group), (time.perf_counter() - began) * 1000)
                i += len(group)
                seq = group[-1][0]
                if prog.due(clock.now_ms()):
                    self._progress(row, prog)
        if runner.lost:
            log.warning("bulk batch %s was taken over by another node (this one was "
                        "taken for gone); it runs on there", batch_id)
            return
        await self.finish(row, prog, cancelled=runner.cancelled,
                           cancel_reason=runner.cancel_reason)

    async def _check_row(self, runner: Runner) -> None:
        """In a fleet, look at the batch's row before each group (one read by key): a
        cancel made on another node says `cancelling` there; a node that took the batch
        over (this one was taken for gone: it stopped renewing for a lease) is named in
        it."""
        if self.parts.watch_period_s is None or runner.cancelled:
            return
        row = await self.store.get_batch(runner.batch["id"])
        if row is None or row.get("node") != self.parts.node_id or \
                row["status"] not in BATCH_OPEN:
            runner.lost = True  # another node's now, or ended there (a cancel took it)
        elif row["status"] == "cancelling":
            runner.cancelled = True
            runner.cancel_reason = row.get("cancel_reason")

    async def _give_way(self, pacer: GapPacer, largest: int) -> int:
        """How many items the next group takes, once there is room for it between the
        alarms due (see `pacing`). Only on the system clock: a virtual clock's alarms
        wait for the test to move it."""
        clock = self.parts.clock
        if not isinstance(clock, SystemClock):
            return largest
        sched = self.parts.scheduler
        began = time.perf_counter()
        while True:
            waited_ms = (time.perf_counter() - began) * 1000
            size = pacer.size(clock.now_ms(), sched.window.next_due_ms(), len(sched.running),
                              waited_ms)
            if size is not None:
                return size
            await asyncio.sleep(YIELD_STEP_S)

    def _progress(self, row: dict[str, Any], prog: Progress) -> None:
        prog.announced(self.parts.clock.now_ms())
        self.parts.events.emit("bulk.progress", prog.event(row["id"], row["action"], row["kind"]))

    async def finish(self, row: dict[str, Any], prog: Progress | None, *,
                      cancelled: bool, cancel_reason: str | None = None) -> None:
        batch = await self.store.get_batch(row["id"])
        assert batch is not None
        now = self.parts.clock.now_ms()
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
        self.parts.events.emit("bulk.finished", {
            "batch_id": row["id"], "action": row["action"], "kind": row["kind"],
            "status": status, **counts,
            "max_in_flight": None if prog is None else prog.max_in_flight})

    async def prepare(self, batch_id: str, sel: Selection, after: str | None) -> int:
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
