"""What operators read: alarms most urgent first, dead letters, objects, executions,
the counters, the fleet's nodes. Pages go by key over an index (no OFFSET scan for
a page after a cursor); counts come from the counters kept with the writes."""

from __future__ import annotations

from typing import Any

from alarmtop.core.fleet.routing import FleetBackend
from alarmtop.core.kernel.alarms.scheduler import AlarmScheduler
from alarmtop.core.kernel.objects.classes import ObjectClasses
from alarmtop.core.kernel.objects.durable_object import DurableObject
from alarmtop.core.kernel.objects.host import ObjectHost
from alarmtop.core.kernel.run_state import RunState
from alarmtop.core.model.alarm_policy import AlarmRecord, AlarmState
from alarmtop.core.model.alarm_status import AlarmStatus
from alarmtop.core.model.keys import Cursor
from alarmtop.core.model.object_names import check_object_name
from alarmtop.core.model.operations import ExecutionRecord
from alarmtop.core.model.storage_values import Counts, ObjectEntry
from alarmtop.core.ports import StorageBackend


class Queries:
    """The listings and counts of `runtime.alarms()`, `dead_letters()`, `objects()`..."""

    def __init__(self, backend: StorageBackend, classes: ObjectClasses,
                 scheduler: AlarmScheduler, host: ObjectHost, state: RunState) -> None:
        self._backend = backend
        self._rows = backend.alarm_rows
        self._log = backend.execution_log
        self._classes = classes
        self._scheduler = scheduler
        self._host = host
        self._state = state

    def _status(self, rec: AlarmRecord) -> AlarmStatus:
        return AlarmStatus.of(rec, self._classes.policy_for(rec.object_class))

    async def alarms(self, limit: int | None = None, offset: int = 0, *,
                     state: str | None = None, contains: str | None = None,
                     after: Cursor | None = None, order: str = "urgency",
                     desc: bool = False) -> list[AlarmStatus]:
        """Alarms, most urgent first: dead, retrying, running, then by due time.

        `state` keeps one state; `contains` keeps objects whose `Class/name` contains it.
        Pages by key: `after` is the cursor of the last alarm of the page before (see
        `AlarmRows.alarm_page`; `order="object"` lists by class and name, `desc`
        reverses), and `offset` skips that many more. Without `after`, `offset` counts
        from the start, which costs a walk over the rows skipped.
        """
        recs = await self.alarm_records(limit, offset, state=state, contains=contains,
                                        after=after, order=order, desc=desc)
        return [self._status(r) for r in recs]

    async def alarm_records(self, limit: int | None = None, offset: int = 0, *,
                            state: str | None = None, contains: str | None = None,
                            after: Cursor | None = None, order: str = "urgency",
                            desc: bool = False) -> list[AlarmRecord]:
        """`alarms()` as the rows' records (for a listing that builds its own rows:
        `AlarmStatus` costs a dataclass per row)."""
        self._state.check()
        return await self._rows.alarm_page(
            after, -1 if limit is None else limit, offset=offset, state=state,
            contains=contains, order=order, desc=desc)

    async def count_alarms(self, state: str | None = None, contains: str | None = None) -> int:
        """How many alarms `alarms()` lists with these filters (counters without a text)."""
        self._state.check()
        return await self._rows.count(state, contains)

    async def alarm(self, cls: type[DurableObject] | str, name: str) -> AlarmStatus | None:
        """One object's alarm (None: it has none)."""
        self._state.check()
        key = (self._classes.name_of(cls), check_object_name(name))
        rec = await self._scheduler.lookup(key)
        return None if rec is None else self._status(rec)

    async def dead_letters(self, limit: int | None = None, offset: int = 0) -> list[AlarmStatus]:
        """Dead letters by class and name (a listing: on the read connection, by the
        state index)."""
        self._state.check()
        recs = await self._rows.alarm_page(
            None, -1 if limit is None else limit, offset=offset, state=AlarmState.DEAD.value,
            order="object")
        return [self._status(r) for r in recs]

    def counters(self) -> Counts:
        """Alarms by state, retries, executions by status and objects, as of the last
        commit: kept by storage with the writes, so this costs no I/O however many
        alarms there are (the header, /metrics and the fleet view share it)."""
        return self._rows.counters()

    async def alarm_counts(self) -> dict[str, int]:
        """Alarms by state (every state, zeros included), from the counters."""
        self._state.check()
        return self.counters().by_state()

    async def near_exhaustion_count(self) -> int:
        """Alarms whose next failure makes them dead letters (each class's own policy)."""
        self._state.check()
        return self.near_exhaustion(self.counters())

    def near_exhaustion(self, counts: Counts) -> int:
        """Near exhaustion in `counts`, under each class's retry policy."""
        return counts.near_exhaustion(lambda cls: self._classes.policy_for(cls).max_retries)

    def resident_objects(self) -> list[tuple[str, str]]:
        """The objects live in memory on this node now."""
        return self._host.resident_keys()

    async def objects(self, after: Cursor | None = None, limit: int = 50, *, offset: int = 0,
                      contains: str | None = None, desc: bool = False) -> list[ObjectEntry]:
        """Every object known to storage (a database, an alarm or an execution), by
        class and name, paged by key (`after`: the (class, name) of the last one)."""
        self._state.check()
        return await self._rows.object_page(after, limit, offset=offset, contains=contains,
                                            desc=desc)

    async def count_objects(self, contains: str | None = None) -> int:
        """How many `objects()` lists (the counter without a text)."""
        self._state.check()
        return await self._rows.count_known(contains)

    async def execution_page(self, after: Cursor | None = None, limit: int = 50, *,
                             offset: int = 0, status: str | None = None,
                             contains: str | None = None,
                             desc: bool = False) -> list[ExecutionRecord]:
        """Executions most in need of a person first, paged by key (see
        `ExecutionLog.page`); `contains` keeps those whose `name/id` contains it."""
        self._state.check()
        return await self._log.page(after, limit, offset=offset, status=status,
                                    contains=contains, desc=desc)

    async def count_executions(self, status: str | None = None,
                               contains: str | None = None) -> int:
        self._state.check()
        return await self._log.count(status, contains)

    async def nodes(self) -> list[dict[str, Any]]:
        """The fleet's nodes (one, on a backend that is not shared)."""
        backend = self._backend
        if isinstance(backend, FleetBackend):
            return await backend.nodes()
        return [{"node_id": getattr(backend, "node_id", "local"), "address": None,
                 "shards": None, "up": True}]
