"""What the alarm rows answer the same way on both backends: counts from the counters
kept with the writes, and a count by text from the rows themselves.

Each backend's `AlarmRows` (`sqlite.alarm_rows`, `postgres.alarm_rows`) builds on it
with its own reads."""

from __future__ import annotations

from alarmtop.core.model.alarm_policy import AlarmRecord
from alarmtop.core.model.keys import Cursor
from alarmtop.core.model.storage_values import Counts


class AlarmRowsBase:
    """The dialect-free half of `AlarmRows`."""

    def counters(self) -> Counts:
        raise NotImplementedError

    async def count_matching(self, state: str | None, contains: str) -> int:
        """How many alarms of `state` (None: any) have `contains` in `Class/name`."""
        raise NotImplementedError

    async def known_matching(self, contains: str) -> int:
        """How many known objects have `contains` in `Class/name`."""
        raise NotImplementedError

    async def alarm_page(self, after: Cursor | None = None, limit: int = 50, *,
                         offset: int = 0, state: str | None = None,
                         contains: str | None = None, order: str = "urgency",
                         desc: bool = False) -> list[AlarmRecord]:
        raise NotImplementedError

    async def page(self, limit: int, offset: int = 0, state: str | None = None,
                   contains: str | None = None) -> list[AlarmRecord]:
        return await self.alarm_page(None, limit, offset=offset, state=state,
                                     contains=contains)

    async def count(self, state: str | None = None, contains: str | None = None) -> int:
        if contains:
            return await self.count_matching(state, contains)
        alarms = self.counters().alarms
        return alarms.get(state, 0) if state else sum(alarms.values())

    async def counts(self) -> dict[str, int]:
        return self.counters().by_state()

    async def retry_counts(self) -> list[tuple[str, int, int]]:
        return self.counters().retry_rows()

    async def count_known(self, contains: str | None = None) -> int:
        if contains:
            return await self.known_matching(contains)
        return self.counters().known

    async def count_objects(self) -> int:
        return self.counters().stored
