"""An operator's decisions about alarms: re-arm, fire now, clear a dead letter, pause,
resume and snooze. Each is a record of the runtime database written without waking
the object, on the node that holds the object's shard. One another node asked for is
audited here too, naming that node: the node that changed the alarm says so itself."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from alarmtop.core.fleet.node import ASKED_BY
from alarmtop.core.fleet.routing import Routing
from alarmtop.core.kernel.alarms.scheduler import AlarmScheduler
from alarmtop.core.kernel.objects.classes import ObjectClasses
from alarmtop.core.kernel.objects.durable_object import DurableObject
from alarmtop.core.kernel.objects.host import ObjectHost
from alarmtop.core.kernel.run_state import RunState
from alarmtop.core.model import alarm_pause, alarm_policy
from alarmtop.core.model.alarm_pause import check_snooze
from alarmtop.core.model.alarm_policy import AlarmRecord, AlarmState, Attempt
from alarmtop.core.model.alarm_status import AlarmStatus
from alarmtop.core.model.errors import InvalidArgument, NoAlarm, NodeUnreachable, StorageError
from alarmtop.core.model.object_names import check_object_name
from alarmtop.core.model.operations import EXECUTION_CLASS
from alarmtop.core.model.serialization import alarm_time_ms
from alarmtop.core.ops.audit import AuditLog
from alarmtop.core.ports import Clock

ObjectKey = tuple[str, str]
ClassRef = type[DurableObject] | str
HELD_ACTIONS = frozenset({"pause", "resume", "snooze"})  # taken with the object's turn
# An action as the audit log names it (the operator's command of the same name).
AUDIT_NAMES = {"re-arm": "rearm", "fire": "fire_now", "clear": "clear_dead_letter",
               "pause": "pause_alarm", "resume": "resume_alarm", "snooze": "snooze_alarm"}
log = logging.getLogger("alarmtop.runtime")


class AlarmActions:
    """The operator's alarm actions (`runtime.rearm`, `fire_now`, `pause_alarm`...)."""

    def __init__(self, classes: ObjectClasses, scheduler: AlarmScheduler, host: ObjectHost,
                 routing: Routing, clock: Clock, state: RunState, audit: AuditLog) -> None:
        self._classes = classes
        self._audit = audit
        self._scheduler = scheduler
        self._host = host
        self._routing = routing
        self._clock = clock
        self._state = state

    def status(self, rec: AlarmRecord) -> AlarmStatus:
        """The public view of a record, under its class's retry policy."""
        return AlarmStatus.of(rec, self._classes.policy_for(rec.object_class))

    def _key(self, cls: ClassRef, name: str) -> ObjectKey:
        return self._classes.name_of(cls), check_object_name(name)

    async def rearm(self, cls: ClassRef, name: str, at_ms: Any = None) -> AlarmStatus:
        """Give an alarm (typically a dead letter) a fresh ladder at `at_ms` (None: now)."""
        at = self._clock.now_ms() if at_ms is None else alarm_time_ms(at_ms)
        return await self.routed(cls, name, "re-arm", at)

    async def fire_now(self, cls: ClassRef, name: str) -> AlarmStatus:
        """Run the alarm's next attempt now (a dead letter is re-armed for now)."""
        return await self.routed(cls, name, "fire", None)

    async def clear_dead_letter(self, cls: ClassRef, name: str) -> AlarmStatus:
        """Drop a dead letter for good (it stays in the event log)."""
        return await self.routed(cls, name, "clear", None)

    async def pause_alarm(self, cls: ClassRef, name: str,
                          reason: str | None = None) -> AlarmStatus:
        """Hold an alarm: it keeps its time, retry count and attempts and fires nothing
        until `resume_alarm` (see `model.alarm_pause`). Pausing a paused alarm changes
        nothing. An object that sets a new alarm meanwhile replaces the time and stays
        paused; one that deletes its alarm removes the pause with it."""
        return await self.routed(cls, name, "pause", None, reason=reason)

    async def resume_alarm(self, cls: ClassRef, name: str,
                           reason: str | None = None) -> AlarmStatus:
        """Release a paused alarm; one that fell due while paused fires at once, with
        the retry count it had."""
        return await self.routed(cls, name, "resume", None, reason=reason)

    async def snooze_alarm(self, cls: ClassRef, name: str, by_ms: int,
                           reason: str | None = None) -> AlarmStatus:
        """Move a pending or retrying alarm's next attempt `by_ms` later (from now, if it
        is overdue), keeping its retries and attempts."""
        return await self.routed(cls, name, "snooze", None, reason=reason,
                                 by_ms=check_snooze(by_ms))

    async def routed(self, cls: ClassRef, name: str, action: str, at_ms: int | None,
                     **more: Any) -> AlarmStatus:
        """An operator's action runs where the alarm runs: on the node holding its shard."""
        self._state.check()
        key = self._key(cls, name)
        data = await self._routing.route(
            key, lambda: self.here(key[0], key[1], action, at_ms, **more), "operate",
            cls=key[0], name=key[1], action=action, at_ms=at_ms, **more)
        if isinstance(data, AlarmStatus):
            return data
        data["attempts"] = [Attempt.from_dict(a) for a in data.get("attempts") or []]
        return AlarmStatus(**data)

    async def serve(self, request: dict[str, Any],
                    held: Callable[[ObjectKey], Awaitable[None]]) -> Any:
        """An action another node forwarded here, where the alarm's shard is held: one
        audit row here, whatever its outcome, naming the node that asked (an action
        that did not run here because the shard is elsewhere is not one)."""
        cls, name, action = str(request["cls"]), str(request["name"]), str(request["action"])
        await held(self._key(cls, name))
        by_ms = request.get("by_ms")
        asked_by = str(request.get(ASKED_BY) or "?")
        try:
            status = await self.here(cls, name, action, request.get("at_ms"),
                                     reason=request.get("reason"),
                                     by_ms=None if by_ms is None else int(by_ms))
        except NodeUnreachable:
            raise  # not run here: the node that asked tries the shard's next owner
        except Exception as exc:
            await self._audit_forwarded(asked_by, cls, name, action, request, exc)
            raise
        await self._audit_forwarded(asked_by, cls, name, action, request, None)
        return status.to_dict()

    async def _audit_forwarded(self, asked_by: str, cls: str, name: str, action: str,
                               request: dict[str, Any], error: Exception | None) -> None:
        detail: dict[str, Any] = {"outcome": "ok" if error is None else "failed",
                                  "asked_by": asked_by}
        if error is not None:
            detail["error"] = f"{type(error).__name__}: {error}"
        for field in ("at_ms", "by_ms"):
            if request.get(field) is not None:
                detail[field] = request[field]
        reason = request.get("reason")
        await self._audit.record(f"node {asked_by}", AUDIT_NAMES.get(action, action),
                                 f"{cls}/{name}", None if reason is None else str(reason),
                                 ok=error is None, role="node", detail=detail)

    async def here(self, cls: str, name: str, action: str, at_ms: int | None,
                   reason: str | None = None, by_ms: int | None = None) -> AlarmStatus:
        """Apply the action on this node (it holds the alarm's shard)."""
        if action in HELD_ACTIONS:
            return await self._held(cls, name, action, reason, by_ms)
        sched, clock = self._scheduler, self._clock
        if action == "re-arm":
            at = clock.now_ms() if at_ms is None else at_ms
            return await self._apply(cls, name, action, lambda rec: sched.commit(
                rec.key, alarm_policy.rearm(rec, at)))
        if action == "fire":
            async def fire(rec: AlarmRecord) -> AlarmRecord | None:
                alarm_pause.refuse_fire_now(rec)
                return await sched.commit(rec.key, alarm_policy.fire_now(rec, clock.now_ms()))
            return await self._apply(cls, name, action, fire)
        if action == "clear":
            return await self._clear(cls, name)
        raise InvalidArgument(f"unknown alarm action {action!r}")

    async def _clear(self, cls: str, name: str) -> AlarmStatus:
        """Drop a dead letter. For an object whose intent lives in its own database the
        intent is deleted there too, first (holding the object's turn, not waking it),
        as the object's own `delete_alarm` would: a file still asking for the alarm
        would bring it back if the index were ever made again from the files. A
        database that cannot take the write (damaged, say) leaves the row to go alone."""
        self._state.check()
        key = self._key(cls, name)
        sched = self._scheduler
        async with self._host.exclusive(key, "with an operator's clear") as r:
            rec = await sched.lookup(key)
            if rec is None:
                raise NoAlarm(*key, "clear")
            if rec.state is not AlarmState.DEAD:
                raise InvalidArgument(f"{key[0]}/{key[1]}'s alarm is {rec.state.value}, not a "
                                      "dead letter; nothing cleared")
            if rec.in_file:
                storage = self._host.storage_of(r)
                try:
                    await storage.delete_alarm()
                    await storage.commit_event()
                except StorageError as exc:
                    log.warning("clearing %s/%s's dead letter: its database could not take "
                                "the deleted alarm (%s); the row goes alone", *key, exc)
                    await sched.commit(key, alarm_policy.delete_alarm(rec))
                finally:
                    await self._host.close_if_idle(r)
            else:
                await sched.commit(key, alarm_policy.delete_alarm(rec))
        return self.status(rec)

    async def _apply(self, cls: ClassRef, name: str, action: str,
                     apply: Callable[[AlarmRecord], Any]) -> AlarmStatus:
        """Apply an operator's decision to the alarm record, without waking the object:
        the record is the runtime's own. An attempt in flight ends first (its end would
        overwrite the decision)."""
        self._state.check()
        key = self._key(cls, name)
        rec = await self._scheduler.lookup(key)
        if rec is not None and rec.state is AlarmState.RUNNING:
            # Under an operator's patience (supervisor.patience) this wait gives up with
            # ObjectBusy, naming what holds the object; nothing is applied then.
            async with self._host.exclusive(key, f"with an operator's {action}"):
                rec = await self._scheduler.lookup(key)
                if rec is None:
                    raise NoAlarm(*key, action)
                new = await apply(rec)
            return self.status(new if new is not None else rec)
        if rec is None:
            raise NoAlarm(*key, action)
        new = await apply(rec)
        return self.status(new if new is not None else rec)

    async def _held(self, cls: str, name: str, action: str, reason: str | None,
                    by_ms: int | None) -> AlarmStatus:
        """Pause, resume or snooze, holding the object's turn (it is not woken): no event
        of the object commits an alarm change in between the read and the write."""
        self._state.check()
        key = self._key(cls, name)
        if key[0] == EXECUTION_CLASS:
            raise InvalidArgument(f"{key[0]}/{key[1]} is an execution: pause it with "
                                  "rt.executions.pause(id), move its timers with "
                                  "rt.executions.move_timer(...)")
        sched = self._scheduler
        async with self._host.exclusive(key, f"with an operator's {action}"):
            rec = await sched.lookup(key)
            if rec is None:
                raise NoAlarm(*key, action)
            now = self._clock.now_ms()
            if action == "pause":
                new = await sched.commit(key, alarm_pause.pause(rec, now, reason))
            elif action == "resume":
                tr = alarm_pause.resume(rec, now, reason)
                new = await (sched.lookup(key) if tr is None else
                             sched.commit(key, tr, resume=True))
            else:
                assert by_ms is not None
                new = await sched.commit(key, alarm_pause.snooze(rec, now, by_ms, reason))
        return self.status(new if new is not None else rec)
