"""`BulkService` (`runtime.bulk`): preview, start, list, cancel and resume batches."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Any

from alarmtop.core.model.bulk_actions import MAX_ITEMS, plan_start
from alarmtop.core.model.bulk_items import BATCH_OPEN
from alarmtop.core.model.errors import AlarmtopError, InvalidArgument
from alarmtop.core.model.selection import parse_selection
from alarmtop.core.ops.bulk.common import (
    CANCEL_ANSWER_S,
    FAILURES_SHOWN,
    PREVIEW_SAMPLE,
    BatchNotFound,
    BulkParts,
    action_name,
    text_or_none,
)
from alarmtop.core.ops.bulk.items import BatchItems
from alarmtop.core.ops.bulk.runner import BatchRuns

log = logging.getLogger("alarmtop.bulk")


TOKENS_KEPT = 1000  # client tokens remembered in memory (older ones are looked up)
MAX_TOKEN = 200


def check_token(token: Any) -> None:
    if not isinstance(token, str) or not 0 < len(token) <= MAX_TOKEN or \
            not token.isprintable():
        raise InvalidArgument(f"a bulk start's token is printable text of 1-{MAX_TOKEN} "
                              f"characters, not {token!r}")


class BulkService:
    """`runtime.bulk` (see `alarmtop.core.ops.bulk`)."""

    def __init__(self, parts: BulkParts) -> None:
        self.parts = parts
        self.store = parts.store
        self.runs = BatchRuns(parts, BatchItems(parts))
        self._ids = itertools.count(1)
        self._resuming = asyncio.Lock()
        self._up_seen: set[str] = set()  # the fleet's nodes up when last looked at
        self._watcher: asyncio.Task[None] | None = None
        self._starting: set[str] = set()  # batches whose `start` has no runner yet
        # Client tokens of the latest starts: their batch id, or the start in progress.
        self._tokens: dict[str, asyncio.Future[str]] = {}

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
        runner = self.runs.runners.get(row["id"])
        prog = None if runner is None else runner.progress
        out["in_flight"] = 0 if prog is None else prog.in_flight
        out["max_in_flight"] = None if prog is None else prog.max_in_flight
        if failures:
            out["failures"] = await self.store.failures(row["id"], 0, FAILURES_SHOWN)
        return out

    async def start(self, action: Any, selection: Any = None, keys: Any = None, *,
                    kind: Any = None, max_in_flight: Any = None, reason: Any = None,
                    note: Any = None, at_ms: Any = None, actor: str = "api",
                    role: str | None = None, token: Any = None) -> str:
        """Start a batch of `action` on `keys` (a list) or on what `selection` matches
        now; at most `max_in_flight` items at once. Returns the batch id at once: the
        batch runs on, durably (a selection's keys are recorded by its runner, in the
        background, status `preparing`). Bad input is refused (and audited) with
        nothing changed.

        `token` (any text a client picks, once per batch it means to start) makes the
        start idempotent: a start with the token of a batch started before returns
        that batch's id and starts nothing (a retry after an answer was lost)."""
        self.parts.state.check()
        if token is None:
            return await self._start(action, selection, keys, kind, max_in_flight, reason,
                                     note, at_ms, actor, role, None)
        check_token(token)
        started = self._tokens.get(token)
        if started is not None:  # started before, or starting now
            return await asyncio.shield(started)
        started = self._tokens[token] = asyncio.get_running_loop().create_future()
        while len(self._tokens) > TOKENS_KEPT:
            self._tokens.pop(next(iter(self._tokens)))
        try:
            batch_id = await self._batch_of_token(token) or await self._start(
                action, selection, keys, kind, max_in_flight, reason, note, at_ms, actor,
                role, token)
        except BaseException as exc:
            self._tokens.pop(token, None)  # refused: a retry may start it
            if isinstance(exc, asyncio.CancelledError):
                started.cancel()
            else:
                started.set_exception(exc)
                started.exception()  # retrieved: one waiting on it raises it too
            raise
        started.set_result(batch_id)
        return batch_id

    async def _batch_of_token(self, token: str) -> str | None:
        """The batch a start with `token` made (on this node before a restart, or on
        another node of the fleet), among the open and the latest ones."""
        for row in [*await self.store.open_batches(), *await self.store.list_batches(100, None)]:
            if (row.get("params") or {}).get("token") == token:
                return str(row["id"])
        return None

    async def _start(self, action: Any, selection: Any, keys: Any, kind: Any,
                     max_in_flight: Any, reason: Any, note: Any, at_ms: Any, actor: str,
                     role: str | None, token: str | None) -> str:
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
            await self.parts.audit.record(actor, f"bulk_{action_name(action)}", None,
                                          text_or_none(reason), ok=False, role=role,
                                          detail={"error": str(exc), "outcome": "refused"})
            raise
        now = self.parts.clock.now_ms()
        batch_id = f"b{now:013d}-{next(self._ids):04d}"
        while await self.store.get_batch(batch_id) is not None:  # a restart reuses counters
            batch_id = f"b{now:013d}-{next(self._ids):04d}"
        row = {"id": batch_id, "action": plan.action, "kind": plan.kind,
               "status": "running" if plan.keys is not None else "preparing",
               "actor": actor, "role": role, "reason": plan.reason, "note": plan.note,
               "throttle": plan.throttle,
               "params": {**plan.params(), **({"token": token} if token is not None else {})},
               "total": 0 if plan.keys is None else len(plan.keys), "done": 0, "failed": 0,
               "cancelled": 0, "created_ms": now, "updated_ms": now, "ended_ms": None,
               "node": None, "prep_after": None}
        # Until its runner exists the batch is this call's: resume_open leaves it alone.
        self._starting.add(batch_id)
        try:
            await self.store.create_batch(row, plan.keys)
            # A selection's keys are recorded by the runner (status `preparing`, resumed
            # from where it got to after a stop or a crash): a large one would pass the
            # command's deadline, and its answer, the batch id, would be lost.
            self.parts.events.emit("bulk.started", {
                "batch_id": batch_id, "action": plan.action, "kind": plan.kind,
                "total": row["total"], "status": row["status"], "throttle": plan.throttle,
                "actor": actor,
                "selection": None if plan.selection is None else plan.selection.to_dict()})
            self.runs.spawn(row)
        finally:
            self._starting.discard(batch_id)
        return batch_id

    async def cancel(self, batch_id: str, *, reason: str | None = None,
                     actor: str = "api", role: str | None = None) -> dict[str, Any]:
        """Stop a batch: items in flight end as they will, the rest are cancelled."""
        row = await self.store.get_batch(batch_id) if isinstance(batch_id, str) else None
        if row is None:
            raise BatchNotFound(str(batch_id))
        if row["status"] not in BATCH_OPEN:
            raise InvalidArgument(f"batch {batch_id} has ended ({row['status']}); nothing "
                                  "to cancel")
        runner = self.runs.runners.get(batch_id)
        if runner is not None:
            runner.cancelled = True
            runner.cancel_reason = text_or_none(reason)
            await self.store.submit(self.store.finish_write(
                batch_id, "cancelling", self.parts.clock.now_ms(),
                cancel_reason=runner.cancel_reason))
            prog = runner.progress
            self.parts.events.emit("bulk.progress", {
                "batch_id": batch_id, "action": row["action"], "kind": row["kind"],
                **(prog.counts() if prog is not None else {"total": row["total"]}),
                "status": "cancelling"})
            if runner.task is not None:
                # Items in flight end as they will, and one may wait on a busy object:
                # the answer (an operator's, under the server's command deadline) says
                # "cancelling" then, and the batch ends cancelled when they have.
                await self.parts.tasks.idle_wait(asyncio.wait({runner.task},
                                                           timeout=CANCEL_ANSWER_S))
        else:
            await self._cancel_elsewhere(row, text_or_none(reason))
        return await self.get(batch_id)

    async def _cancel_elsewhere(self, row: dict[str, Any], reason: str | None) -> None:
        """Cancel a batch no runner of this node runs. One that runs on another node
        that is up is asked to end there: the row says `cancelling`, which its runner
        reads (`_check_row`), and the answer waits for it as a cancel here does. One
        that runs nowhere (left by a node that is gone) is taken and ended now."""
        batch_id, me, owner = row["id"], self.parts.node_id, row.get("node")
        up = {str(n["node_id"]) for n in await self.parts.nodes() if n.get("up")}
        if not (self.parts.watch_period_s is not None and owner in up - {me}) and \
                await self.store.claim_batch(batch_id, me, owner):
            await self.runs.finish(row, None, cancelled=True, cancel_reason=reason)
            return
        # The reason rides in the row: the runner on the other node ends the batch.
        await self.store.submit(self.store.finish_write(batch_id, "cancelling",
                                                        self.parts.clock.now_ms(),
                                                        cancel_reason=reason))
        self.parts.events.emit("bulk.progress", {
            "batch_id": batch_id, "action": row["action"], "kind": row["kind"],
            "total": row["total"], "status": "cancelling"})
        deadline = time.monotonic() + CANCEL_ANSWER_S
        while time.monotonic() < deadline:
            now = await self.store.get_batch(batch_id)
            if now is None or now["status"] not in BATCH_OPEN:
                return
            await self.parts.tasks.idle_wait(asyncio.sleep(0.02))

    async def wait(self, batch_id: str) -> dict[str, Any]:
        """Until the batch's runner on this node ends; the batch as it ended."""
        runner = self.runs.runners.get(batch_id)
        if runner is not None and runner.task is not None:
            await asyncio.shield(runner.task)
        return await self.get(batch_id)

    async def resume_open(self) -> None:
        """Run on every batch left open (by a stop, a crash or another node): at start,
        and in a fleet whenever another node is seen to go (`_watch_fleet`)."""
        async with self._resuming:  # the start's call and the watcher's: one at a time
            node = self.parts.node_id
            # A batch belongs to the node that runs it while that node is up; one left by
            # a node that is gone (a restart of this one included) is taken over.
            up = {str(n["node_id"]) for n in await self.parts.nodes() if n.get("up")}
            for row in await self.store.open_batches():
                if row["id"] in self.runs.runners or row["id"] in self._starting or \
                        row.get("node") in up - {node}:
                    continue
                if await self.store.claim_batch(row["id"], node, row.get("node")):
                    self.runs.spawn(row)
            # Only once all is looked at: cut short, the watcher sees the node gone again.
            self._up_seen = up
        self._watch()

    def _watch(self) -> None:
        """In a fleet, start looking out for nodes that go (once per start)."""
        period = self.parts.watch_period_s
        if period is None or (self._watcher is not None and not self._watcher.done()):
            return
        self._watcher = self.parts.tasks.spawn(self._watch_fleet(period), name="bulk fleet watch")

    async def _watch_fleet(self, period_s: float) -> None:
        """A node that stops, or stops renewing its leases, leaves its open batches to
        the nodes still running: each looks at the fleet's nodes every `period_s` (wall
        time, as leases go) and, when one it saw up is not any more, takes over what
        that node left (`claim_batch`: one taker wins). One of the runtime's tasks:
        it ends with the runtime."""
        while True:
            # Asleep, it is idle: a virtual clock moves on without it.
            await self.parts.tasks.idle_wait(asyncio.sleep(period_s))
            try:
                up = {str(n["node_id"]) for n in await self.parts.nodes() if n.get("up")}
                if self._up_seen - up:
                    await self.resume_open()
                else:
                    self._up_seen = up
            except Exception as exc:  # PostgreSQL away, say: looked at again next time
                log.warning("bulk batches: could not look for nodes that went: %s", exc)
