"""`ctx.storage`: an object's SQL, key-value and alarm API, and the event's commit.

Writes made during one event are one implicit transaction, committed (fsync'd)
at the end of the event before anything the event produced leaves it (the
output gate). A raising handler does not roll its writes back; only
`transaction()` does.

The object's alarm is its *intent* (see `alarms.intent`): what its code set or
deleted, with a generation number, committed together with the event's writes: in
the object's own database when it has one, else in its alarm index row (an object
that never touched its storage has no file). `commit_event` is the one place that
makes an event durable: the index write that must come first (a wake hint), the
commit, the index write that follows it. The committed intent is cached only once
its commit has landed, so the cache never disagrees with disk.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol, overload

from alarmtop.core.model import alarm_intent
from alarmtop.core.model.alarm_policy import AlarmKey, AlarmRecord, Transition
from alarmtop.core.model.errors import CommitOutcomeUnknown, InvalidArgument, StorageError
from alarmtop.core.model.serialization import alarm_time_ms, to_json
from alarmtop.core.model.storage_values import ExecResult
from alarmtop.core.ports import ExtraWrite, ObjectStore

log = logging.getLogger("alarmtop.runtime")


class IndexRestoreFailed(StorageError):
    """The runtime database refused the write that makes an object's lost alarm row
    again. The object's own database is sound: its intent is known, only not yet in
    the index."""
_UNSET: Any = object()


class AlarmAccess(Protocol):
    """What storage needs from the alarm scheduler: the index row and writes to it."""

    async def lookup(self, key: AlarmKey) -> AlarmRecord | None: ...

    def peek(self, key: AlarmKey) -> AlarmRecord | None:
        """The row if it is at hand without a read (None: not known without one)."""
        ...

    def may_have_file(self, key: AlarmKey) -> bool:
        """False when the object certainly has no database (no object of its class
        has one): its intent is its row, and no file needs looking for."""
        ...

    async def commit(self, key: AlarmKey, tr: Transition | None,
                     extra: ExtraWrite | None = None, final: bool = False
                     ) -> AlarmRecord | None: ...

    async def note_file(self, key: AlarmKey) -> None:
        """Before an object's database is created: mark its row, list the object."""
        ...

    async def undo(self, key: AlarmKey, written: AlarmRecord | None,
                   previous: AlarmRecord | None) -> None:
        """Best effort: put `previous` back if the row is still the `written` one."""
        ...


# Opens the object's database: (key, create, intent to write into a new file).
StoreOpener = Callable[[AlarmKey, bool, alarm_intent.Intent], Awaitable["ObjectStore | None"]]


Plan = tuple[Transition | None, Transition | None]  # (before the commit, after it)


class EventEnd(Protocol):
    """How the end of an event reaches the alarm index."""

    # The object's index row as the event already holds it (an attempt's own record),
    # or None: then it is looked up.
    row: AlarmRecord | None

    def plan(self, key: AlarmKey, current: AlarmRecord | None, change: alarm_intent.Intent | None,
             in_file: bool) -> Plan:
        """The index writes around the object's commit of `change` (None: the event did
        not touch its alarm): `before` is made durable first (a wake hint), `after` once
        the commit landed. For an object without a database there is one commit: the
        index write, `after` (or `before` when there is no `after`)."""
        ...


class CallEnd:
    """The end of a call, a socket event or a wake: the index follows the intent."""

    row: AlarmRecord | None = None

    def plan(self, key: AlarmKey, current: AlarmRecord | None, change: alarm_intent.Intent | None,
             in_file: bool) -> Plan:
        if change is None:
            return (None, None)
        return alarm_intent.plan_change(key, current, change, in_file)


CALL_END = CallEnd()


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
    """An object's storage. The event path calls `begin_event`, `defer_write`,
    `commit_event` and `close`; user code calls the rest."""

    # Slots: one is made at every wake of an object.
    __slots__ = ("_alarms", "_changed", "_deferred", "_in_alarm", "_intent", "_key",
                 "_open_store", "_preserve_alarm", "_savepoints", "_store", "_wanted")

    def __init__(self, key: AlarmKey, open_store: StoreOpener, alarms: AlarmAccess,
                 delete_all_preserves_alarm: bool) -> None:
        # `open_store` takes the key, so that one callable serves every object: a
        # closure per object would be garbage for the cyclic GC's older generations.
        self._key = key
        self._open_store = open_store
        self._alarms = alarms
        self._preserve_alarm = delete_all_preserves_alarm
        self._store: ObjectStore | None = None
        self._savepoints = 0
        # Committed, loaded lazily, cached once durable.
        self._intent: alarm_intent.Intent | None = None
        # This event's change of the alarm, if any (`_changed`), and what it asks for.
        self._changed = False
        self._wanted: int | None = None
        self._in_alarm = False  # an alarm attempt runs: the handler sees no alarm
        self._deferred: list[ExtraWrite] | None = None

    @property
    def sql(self) -> Sql:
        """`await storage.sql.exec(...)`. Made on each use: a `Sql` kept here would make
        a reference cycle, and every woken object would leave garbage for the cyclic GC."""
        return Sql(self)

    # -- the event path -----------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        """Whether the object's database is open (closing it needs I/O)."""
        return self._store is not None

    @property
    def has_work(self) -> bool:
        """Whether `commit_event` has anything to do for the event so far."""
        return self._changed or self._store is not None or bool(self._deferred)

    def begin_event(self, now_ms: int, alarm: bool) -> None:
        """An event starts. For an alarm attempt the handler sees no alarm unless it
        sets one; a change made while waking (the constructor re-arming) counts as
        set by the handler, unless it asks for a time this very firing serves: such
        a re-arm must not pull the retry of a failing handler forward."""
        self._in_alarm = alarm
        if alarm and self._changed and (self._wanted is None or self._wanted <= now_ms):
            self._changed, self._wanted = False, None

    def defer_write(self, write: ExtraWrite) -> None:
        """Attach a write of the runtime database to this event's commit (the runtime's
        own objects use it: an execution's log lands with its alarm, or not at all)."""
        if self._deferred is None:
            self._deferred = []
        self._deferred.append(write)

    async def load_intent(self) -> alarm_intent.Intent:
        """The committed intent: from the object's database if it has one (cached while
        it is open), else its index row (read each time: the row is the intent)."""
        if self._store is not None:
            return await self._file_intent(self._store)
        rec = await self._alarms.lookup(self._key)
        if (rec is not None and not rec.in_file) or (
                rec is None and not self._alarms.may_have_file(self._key)):
            return alarm_intent.intent_of_row(rec)
        # No row says it has none: the object may have a database (open it if so).
        store = await self._open_store(self._key, False, alarm_intent.intent_of_row(rec))
        if store is None:
            return alarm_intent.intent_of_row(rec)
        intent = await self._file_intent(store)
        try:
            await self._check_index(intent, rec)
        except BaseException:
            # Not kept open unchecked: the next event opens it again and checks again.
            self._intent = None
            await store.close()
            raise
        self._store = store
        return intent

    async def _check_index(self, intent: alarm_intent.Intent, rec: AlarmRecord | None) -> None:
        """When the object's database opens: an index row later than its intent (or
        missing) is damage, never absorbed: the row is made again from the intent, and
        said so (`alarm.restored`, and the log)."""
        if not alarm_intent.index_behind(intent, rec):
            return
        key = self._key
        log.error("the alarm index had %s %s/%s's alarm (its own database asks for one at "
                  "%s ms, generation %s): restored from the object's intent. The runtime "
                  "database lost writes (its -wal file lost or damaged, or restored from a "
                  "backup without it)", "lost" if rec is None else "an out-of-date row for",
                  key[0], key[1], intent.at_ms, intent.gen)
        try:
            await self._alarms.commit(key, alarm_intent.restore(key, intent, rec))
        except StorageError as exc:
            raise IndexRestoreFailed(f"the alarm index row of {key[0]}/{key[1]} could not be "
                                     f"restored from its intent: {exc}", exc.path) from exc

    async def _file_intent(self, store: ObjectStore) -> alarm_intent.Intent:
        if self._intent is None:
            self._intent = alarm_intent.Intent(*await store.read_intent())
        return self._intent

    async def commit_event(self, end: EventEnd = CALL_END) -> BaseException | None:
        """Make the event durable: its storage writes and its alarm intent in one commit,
        the alarm index never later than that truth.

        Raises when nothing of the event was kept (a failed write before or during the
        object's commit). A failed index write after the commit does not undo the
        event: it is returned (the row left is earlier than the truth, and is
        reconciled when it falls due); None when everything landed.
        """
        store, key = self._store, self._key
        deferred, self._deferred = self._deferred, None
        changed, wanted = self._changed, self._wanted
        # The event is over, whatever happens below.
        self._changed, self._wanted, self._in_alarm = False, None, False
        change: alarm_intent.Intent | None = None
        current: AlarmRecord | None = None
        if changed:
            if store is None:
                alarms = self._alarms
                current = end.row or alarms.peek(key)
                filed = alarms.may_have_file(key)
                if current is None and (filed or wanted is None):
                    # (A set of an object that has no database needs no row to replace:
                    # its fresh row is its intent whatever was there. A delete does.)
                    current = await alarms.lookup(key)
                if (current is not None and current.in_file) or (current is None and filed):
                    base_gen = (await self.load_intent()).gen  # may open its database
                    store = self._store
                else:
                    # The row is the intent (see intent_of_row).
                    base_gen = current.gen if current is not None else 0
            else:
                base_gen = (await self._file_intent(store)).gen
            change = alarm_intent.Intent(base_gen + 1, wanted)
        if store is not None:
            if deferred:
                raise InvalidArgument("runtime-database writes ride only the commit of an "
                                      "object without a database")
            return await self._commit_in_file(store, end, change)
        # No database: the index row is the object's one durable state, and this write
        # its one commit (with the runtime-database writes deferred to it).
        before, after = end.plan(key, current, change, False)
        tr = after if after is not None else before
        extra = _combined(deferred) if deferred else None
        if tr is not None or extra is not None:
            await self._alarms.commit(key, tr, extra, True)
        return None

    async def _commit_in_file(self, store: ObjectStore, end: EventEnd,
                              change: alarm_intent.Intent | None) -> BaseException | None:
        key = self._key
        current = await self._alarms.lookup(key) if change is not None else None
        if change is not None and current is not None:
            # Never a generation the row has seen: a row written ahead of a commit that
            # never landed holds the next one, and must not pass for this intent's.
            gen = max(change.gen, current.gen + 1, current.hint_gen + 1)
            change = alarm_intent.Intent(gen, change.at_ms)
        before, tr = end.plan(key, current, change, True)
        if change is None and end.row is not None and tr is not None and tr.record is None:
            # An alarm attempt that succeeded and left no alarm: its file says so too, so
            # an index ever made again from the files does not bring the alarm back.
            change = alarm_intent.consumed(await self._file_intent(store), end.row)
        written: AlarmRecord | None = None
        try:
            if before is not None:
                written = await self._alarms.commit(key, before)
            if change is not None:
                await store.write_intent(*change)
            await store.commit()
        except BaseException as exc:
            await store.rollback()
            # An event cut off (cancelled: its caller's node went away, say) during its
            # commit, or whose connection went during it, may have landed it: the row
            # written first then stays (early at worst, reconciled when it falls due),
            # as taking it back would leave a committed alarm with no row, never to fire.
            if before is not None and not isinstance(exc, (asyncio.CancelledError,
                                                           CommitOutcomeUnknown)):
                await self._alarms.undo(key, written, current)
            raise
        if change is not None:
            self._intent = change
        if tr is None:
            return None
        try:
            await self._alarms.commit(key, tr, None, True)
        except Exception as exc:  # the event stands: the row is early, reconciled when due
            log.warning("the alarm index missed %s/%s's committed alarm change (%s); it is "
                        "reconciled when the alarm falls due", key[0], key[1], exc)
            return exc
        return None

    async def abandon(self) -> None:
        """The event is cut off (cancelled): keep nothing of it, as after a crash."""
        self._changed, self._wanted, self._in_alarm, self._deferred = False, None, False, None
        if self._store is not None:
            await self._store.rollback()

    async def close(self) -> None:
        if self._store is not None:
            store, self._store = self._store, None
            self._intent = None  # cached only while the database is open
            await store.close()

    async def _writable(self) -> ObjectStore:
        store = self._store
        if store is None:
            # The intent of the row goes into a database that has none (a new one, or
            # one written before intents lived there).
            rec = await self._alarms.lookup(self._key)
            row_intent = alarm_intent.intent_of_row(rec)
            store = await self._open_store(self._key, False, row_intent)
            if store is None:
                # A new database: the index learns first that the intent may live in it.
                await self._alarms.note_file(self._key)
                store = await self._open_store(self._key, True, row_intent)
                assert store is not None
                self._store = store
            else:
                self._store = store
                await self._check_index(await self._file_intent(store), rec)
        await store.begin()
        return store

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
        saved = (self._changed, self._wanted)
        await store.savepoint(name)
        try:
            yield
        except BaseException:
            await store.rollback_to(name)
            self._changed, self._wanted = saved
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
        if self._changed:
            return self._wanted
        if self._in_alarm:
            return None
        intent = await self.load_intent()
        return alarm_intent.user_view(intent, await self._alarms.lookup(self._key))

    async def set_alarm(self, at: Any) -> None:
        """Schedule the object's one alarm (epoch ms or an aware datetime), replacing any."""
        self._wanted = alarm_time_ms(at)
        self._changed = True

    async def delete_alarm(self) -> None:
        self._wanted = None
        self._changed = True


def _combined(writes: list[ExtraWrite] | None) -> ExtraWrite | None:
    if not writes:
        return None
    if len(writes) == 1:
        return writes[0]
    return _AllOf(writes)


class _AllOf:
    """Several writes as one; told as one when it was refused."""

    __slots__ = ("writes",)

    def __init__(self, writes: list[ExtraWrite]) -> None:
        self.writes = writes

    def __call__(self, conn: Any) -> None:
        for write in self.writes:
            write(conn)

    def refused(self) -> None:
        for write in self.writes:
            refused = getattr(write, "refused", None)
            if refused is not None:
                refused()
