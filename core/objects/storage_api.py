"""`ctx.storage`: an object's SQL, key-value and alarm API.

Writes made during one event are one implicit transaction, committed (fsync'd)
at the end of the event before anything the event produced leaves it (the
output gate). A raising handler does not roll its writes back; only
`transaction()` does.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol, overload

from alarmtop.core.alarms.policy import AlarmKey
from alarmtop.core.serialization import alarm_time_ms, to_json
from alarmtop.core.storage.interface import ExecResult, ObjectStore

_UNSET: Any = object()


class AlarmAccess(Protocol):
    """What storage needs from the alarm scheduler."""

    async def current(self, key: AlarmKey) -> int | None: ...


class SqlCursor:
    """The rows of one statement (rows are dicts keyed by column name)."""

    def __init__(self, result: ExecResult) -> None:
        self._result = result
        self.column_names = list(result.columns)
        # The number of rows returned: SQLite does not report rows scanned.
        self.rows_read = len(result.rows)
        self.rows_written = result.rows_written

    def all(self) -> list[dict[str, Any]]:
        return list(self._result.rows)

    def one(self) -> dict[str, Any]:
        """The single row; raises if there are none or several."""
        rows = self._result.rows
        if len(rows) != 1:
            raise LookupError(f"expected exactly one row, got {len(rows)}")
        return rows[0]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._result.rows)


class Sql:
    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    async def exec(self, sql: str, *params: Any) -> SqlCursor:
        """Run one statement with `?` parameters. Keep to portable SQL."""
        store = await self._storage._writable()
        return SqlCursor(await store.exec(sql, params))


class Storage:
    def __init__(self, key: AlarmKey, open_store: Callable[[AlarmKey], Awaitable[ObjectStore]],
                 alarms: AlarmAccess, delete_all_preserves_alarm: bool) -> None:
        # `open_store` takes the key, so that one callable serves every object: a
        # closure per object would be garbage for the cyclic GC's older generations.
        self._key = key
        self._open_store = open_store
        self._alarms = alarms
        self._preserve_alarm = delete_all_preserves_alarm
        self._store: ObjectStore | None = None
        self._savepoints = 0
        # Alarm as the object sees it: loaded lazily, changed in memory during an
        # event and made durable by the runtime at the end of the event.
        self._alarm: int | None = None
        self._alarm_known = False
        self._alarm_dirty = False

    @property
    def sql(self) -> Sql:
        """`await storage.sql.exec(...)`. Made on each use: a `Sql` kept here would make
        a reference cycle, and every woken object would leave garbage for the cyclic GC."""
        return Sql(self)

    # -- plumbing used by the runtime --------------------------------------------------

    async def _writable(self) -> ObjectStore:
        if self._store is None:
            self._store = await self._open_store(self._key)
        await self._store.begin()
        return self._store

    def _begin_alarm_event(self, now_ms: int) -> None:
        """The alarm is firing: the handler sees no alarm unless it sets one.

        A change made while waking (the constructor re-arming) counts as set by the
        handler, unless it asks for a time that this very firing already serves:
        such a re-arm must not pull the retry of a failing handler forward."""
        if self._alarm_dirty and self._alarm is not None and self._alarm > now_ms:
            return
        self._alarm, self._alarm_known, self._alarm_dirty = None, True, False

    def _take_alarm_change(self) -> tuple[bool, int | None]:
        change = (self._alarm_dirty, self._alarm)
        self._alarm_dirty = False
        return change

    def _alarm_committed(self, at_ms: int | None) -> None:
        """The runtime committed this alarm for the object during the event (with other
        writes, in one transaction): the object sees it, the event's end has no change."""
        self._alarm, self._alarm_known, self._alarm_dirty = at_ms, True, False

    def _forget_alarm(self) -> None:
        self._alarm_known = self._alarm_dirty = False

    @property
    def _is_open(self) -> bool:
        """Whether the object's database is open (closing it needs I/O)."""
        return self._store is not None

    async def _commit(self) -> None:
        if self._store is not None:
            await self._store.commit()

    async def _close(self) -> None:
        if self._store is not None:
            store, self._store = self._store, None
            await store.close()

    # -- key-value -----------------------------------------------------------------------

    @overload
    async def get(self, key: str) -> Any: ...

    @overload
    async def get(self, key: Sequence[str]) -> dict[str, Any]: ...

    async def get(self, key: str | Sequence[str]) -> Any:
        """The value of `key` (None when absent), or a dict for a list of keys."""
        keys = [key] if isinstance(key, str) else list(key)
        found = await (await self._writable()).kv_get(keys)
        values = {k: json.loads(v) for k, v in found.items()}
        return values.get(key) if isinstance(key, str) else values

    async def put(self, key: str | dict[str, Any], value: Any = _UNSET) -> None:
        """Store one value, or every item of a dict. Values must be JSON-serialisable."""
        if isinstance(key, dict):
            if value is not _UNSET:
                raise TypeError("put(dict) takes no second argument")
            items = [(k, to_json(v, f"storage value for {k!r}")) for k, v in key.items()]
        else:
            if value is _UNSET:
                raise TypeError("put(key, value) needs a value")
            items = [(key, to_json(value, f"storage value for {key!r}"))]
        for k, _ in items:
            if not isinstance(k, str):
                raise TypeError(f"storage keys are strings, not {type(k).__name__}")
        await (await self._writable()).kv_put(items)

    async def delete(self, key: str | Sequence[str]) -> bool | int:
        """Delete one key (True if it existed) or a list of keys (how many existed)."""
        keys = [key] if isinstance(key, str) else list(key)
        n = await (await self._writable()).kv_delete(keys)
        return n > 0 if isinstance(key, str) else n

    async def list(self, prefix: str = "", limit: int | None = None) -> dict[str, Any]:
        """Keys starting with `prefix`, in key order, with their values."""
        rows = await (await self._writable()).kv_list(prefix, limit)
        return {k: json.loads(v) for k, v in rows}

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """Writes inside are all kept or, if the block raises, all undone (alarm included)."""
        store = await self._writable()
        self._savepoints += 1
        name = f"alarmtop_tx_{self._savepoints}"
        saved = (self._alarm, self._alarm_known, self._alarm_dirty)
        await store.savepoint(name)
        try:
            yield
        except BaseException:
            await store.rollback_to(name)
            self._alarm, self._alarm_known, self._alarm_dirty = saved
            raise
        await store.release(name)

    async def delete_all(self) -> None:
        """Drop every table and key; the alarm too unless the runtime preserves it."""
        await (await self._writable()).destroy()
        if not self._preserve_alarm:
            await self.delete_alarm()

    # -- alarm ---------------------------------------------------------------------------

    async def get_alarm(self) -> int | None:
        """Epoch ms of the pending alarm (or its next retry); None when there is none."""
        if not self._alarm_known:
            self._alarm = await self._alarms.current(self._key)
            self._alarm_known = True
        return self._alarm

    async def set_alarm(self, at: Any) -> None:
        """Schedule the object's one alarm (epoch ms or an aware datetime), replacing any."""
        self._alarm = alarm_time_ms(at)
        self._alarm_known = self._alarm_dirty = True

    async def delete_alarm(self) -> None:
        self._alarm = None
        self._alarm_known = self._alarm_dirty = True
