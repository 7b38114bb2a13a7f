"""How a batch's items are done: alarm items decided from their records in one write
per group where they can be, one by one through the runtime's action where not;
execution items through `runtime.executions`, marked first so a restart can judge."""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Sequence
from typing import Any

from alarmtop.core.model import alarm_policy
from alarmtop.core.model.alarm_policy import AlarmKey, AlarmState
from alarmtop.core.model.bulk_actions import ExecutionState, already_applied
from alarmtop.core.model.bulk_items import ItemOutcome
from alarmtop.core.model.bulk_progress import Progress
from alarmtop.core.model.errors import (
    AlarmtopError,
    InvalidArgument,
    NodeUnreachable,
    RuntimeNotRunning,
    StorageError,
)
from alarmtop.core.model.replay import HUMAN
from alarmtop.core.model.safe_text import safe_text
from alarmtop.core.ops.bulk.common import (
    CUT_SHORT,
    RUNTIME_ACTION,
    BulkParts,
    CutShort,
    Stopping,
    decide,
    raise_left_open,
    split_key,
)


class BatchItems:
    """The items of a batch, done group by group."""

    def __init__(self, parts: BulkParts) -> None:
        self.parts = parts
        self.store = parts.store

    async def group(self, row: dict[str, Any], prog: Progress,
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

    def _audit(self, row: dict[str, Any], key: str, now: int, error: str | None
               ) -> dict[str, Any]:
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
        parts, action = self.parts, row["action"]
        now = parts.clock.now_ms()
        at_ms = row["params"].get("at_ms")
        keyed = [(seq, key, split_key(key)) for seq, key, _, _ in group]
        fast = action in ("rearm", "fire_now", "clear_dead_letter")
        local: builtins.list[tuple[int, str, AlarmKey]] = []
        slow: builtins.list[tuple[int, str, AlarmKey]] = []
        for item in keyed:
            if fast and await parts.routing.peer(item[2]) is None:
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
            if rec is not None and (rec.state is AlarmState.RUNNING or (
                    action == "clear_dead_letter" and rec.in_file)):
                # Its attempt must end first, or its intent goes from its database too:
                # both with the object's turn (the runtime's own action).
                slow.append((seq, key, akey))
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
            await parts.scheduler.commit_many(changes,
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
        parts, action = self.parts, row["action"]
        at_ms = row["params"].get("at_ms")

        async def one(key: str, akey: AlarmKey) -> str | Stopping | CutShort | None:
            try:
                if action == "clear_faults":
                    self._clear_faults(key)
                    return None
                at = parts.clock.now_ms() if action == "rearm" and at_ms is None else at_ms
                await parts.alarms.routed(akey[0], akey[1], RUNTIME_ACTION[action], at,
                                          **({"reason": row.get("reason")}
                                             if action in ("pause_alarm", "resume_alarm")
                                             else {}))
            except RuntimeNotRunning:
                return Stopping()  # refused, not run: the item stays open
            except CUT_SHORT as exc:
                return exc  # nothing ran (the owner not reached, a write refused): open
            except AlarmtopError as exc:
                return str(exc)
            return None

        results = await asyncio.gather(*(one(key, akey) for _, key, akey in items))
        now = parts.clock.now_ms()
        outcomes: builtins.list[ItemOutcome] = []
        audit: builtins.list[dict[str, Any]] = []
        failures: builtins.list[tuple[str, str]] = []
        for (seq, key, _), err in zip(items, results, strict=True):
            if isinstance(err, (Stopping, StorageError, NodeUnreachable)):
                continue
            outcomes.append(ItemOutcome(seq, "done" if err is None else "failed", err))
            audit.append(self._audit(row, key, now, err))
            if err is not None:
                failures.append((key, err))
        if outcomes:
            await self.store.submit(self.store.items_write(row["id"], outcomes, now, audit))
        raise_left_open(results)
        return len(outcomes) - len(failures), failures

    def _clear_faults(self, target: str) -> int:
        faults = self.parts.faults
        ids = [f["id"] for f in faults.list() if f["target"] == target]
        for fid in ids:
            faults.clear(fid)
        return len(ids)

    async def _state(self, execution_id: str) -> ExecutionState | None:
        store = self.parts.execution_log
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
        parts, action = self.parts, row["action"]
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
        now = parts.clock.now_ms()
        if marks:  # what each saw before acting, for a restart to judge by
            await self.store.submit(self.store.items_write(row["id"], marks, now))
        ex, reason = parts.executions, row.get("reason")
        kw: dict[str, Any] = {"actor": row["actor"], "role": row.get("role")}

        async def one(key: str) -> str | Stopping | CutShort | None:
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
                return Stopping()  # refused, not run: the item stays open (or running)
            except CUT_SHORT as exc:
                return exc  # not reached or not written: open, judged again on the retry
            except AlarmtopError as exc:
                return str(exc)
            return None

        results = await asyncio.gather(*(one(key) for _, key in todo))
        audit = []
        failures: builtins.list[tuple[str, str]] = []
        stopped = False
        now = parts.clock.now_ms()
        for (seq, key), err in zip(todo, results, strict=True):
            if isinstance(err, (Stopping, StorageError, NodeUnreachable)):
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
            raise_left_open(results)
        return sum(1 for o in outcomes if o.status == "done"), failures
