"""What the runtime needs from storage, independent of the database behind it.

The SQLite implementation is the embedded default; a PostgreSQL one (several
runtime nodes, due alarms claimed with FOR UPDATE SKIP LOCKED, objects owned
through lease rows) implements the same protocols. Nothing above this layer may
assume SQLite or a single process.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from alarmtop.core.model.alarm_policy import AlarmKey, AlarmRecord
from alarmtop.core.model.keys import Cursor

if TYPE_CHECKING:
    from alarmtop.core.model.operations import ExecutionRecord, OperationRecord

# A write of the backend's own tables, given the backend's connection.
ExtraWrite = Callable[[Any], None]


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one SQL statement run for an object."""

    columns: tuple[str, ...]
    rows: list[dict[str, Any]]
    rows_written: int


@dataclass(frozen=True)
class Counts:
    """The counts an operator watches, kept by the backend with the writes that change
    them (in the same transaction), so reading them costs nothing however many rows
    there are, and they are exact after any crash.

    `retries` counts alarms retrying or running a retry, by (class, retry count):
    whether such an alarm is near exhaustion depends on its class's policy, which
    the runtime knows and the backend does not (`near_exhaustion`).
    """

    alarms: Mapping[str, int] = field(default_factory=dict)  # by state
    retries: Mapping[tuple[str, int], int] = field(default_factory=dict)
    executions: Mapping[str, int] = field(default_factory=dict)  # by status
    stored: int = 0  # objects that have a database of their own
    known: int = 0  # objects known at all: a database, an alarm row or an execution

    def near_exhaustion(self, max_retries: Callable[[str], int]) -> int:
        """Alarms whose next failure makes them dead letters, given each class's limit."""
        return sum(n for (cls, retries), n in self.retries.items()
                   if retries >= max_retries(cls))

    def by_state(self) -> dict[str, int]:
        """Alarms by state, every state named (0 where there is none)."""
        from alarmtop.core.model.alarm_policy import AlarmState
        counts = {s.value: 0 for s in AlarmState}
        counts.update(self.alarms)
        return counts

    def retry_rows(self) -> list[tuple[str, int, int]]:
        """(class, retry count, how many) over alarms retrying or running a retry."""
        return [(cls, retries, n) for (cls, retries), n in self.retries.items()]


class ObjectEntry(NamedTuple):
    """An object the runtime knows of, as the objects listing shows it."""

    object_class: str
    object_name: str
    stored: bool  # it has a database of its own
    execution: bool  # it is an execution (its log lives in the runtime's database)
    alarm_state: str | None
    next_attempt_ms: int | None
    alarm_paused: bool = False  # an operator paused its alarm


class ObjectStore(Protocol):
    """One object's private database. Calls for one object never overlap."""

    path: str

    async def exec(self, sql: str, params: Sequence[Any]) -> ExecResult: ...

    async def kv_get(self, keys: Sequence[str]) -> dict[str, str]: ...

    async def kv_put(self, items: Sequence[tuple[str, str]]) -> None: ...

    async def kv_delete(self, keys: Sequence[str]) -> int: ...

    async def kv_list(self, prefix: str, limit: int | None) -> list[tuple[str, str]]: ...

    async def begin(self) -> None:
        """Open the event's implicit transaction if none is open."""
        ...

    async def savepoint(self, name: str) -> None: ...

    async def release(self, name: str) -> None: ...

    async def rollback_to(self, name: str) -> None: ...

    async def commit(self) -> None:
        """Make everything written so far durable (fsync'd); a failure rolls back."""
        ...

    async def rollback(self) -> None:
        """Undo everything written since the last commit."""
        ...

    async def read_intent(self) -> tuple[int, int | None]:
        """The object's alarm intent `(gen, at_ms)` as committed in this database."""
        ...

    async def write_intent(self, gen: int, at_ms: int | None) -> None:
        """Write the intent into the open transaction (durable with the next commit)."""
        ...

    async def destroy(self) -> None:
        """Drop every table and row; the store stays usable afterwards."""
        ...

    async def close(self) -> None: ...


class AlarmIndex(Protocol):
    """Every object's alarm, with writes that are durable when they return."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    def submit(self, puts: Sequence[AlarmRecord] = (), deletes: Sequence[AlarmKey] = (),
               extra: ExtraWrite | None = None) -> asyncio.Future[None]:
        """Queue a write now (its order among writes is fixed when this is called) and
        return the future that says when it is durable (or why it failed)."""
        ...

    async def write(self, puts: Sequence[AlarmRecord], deletes: Sequence[AlarmKey] = (),
                    extra: ExtraWrite | None = None) -> None:
        """Store records and remove keys, durably; concurrent calls share commits.

        `extra` writes the backend's other tables (execution logs) in the same
        transaction: a log and the alarm that acts on it land together or not at all.
        """
        ...

    async def get(self, key: AlarmKey) -> AlarmRecord | None: ...

    async def due_after(self, after_ms: float, limit: int) -> tuple[list[AlarmRecord], bool]:
        """Live alarms due after `after_ms`, soonest first: at least `limit` of them
        when there are that many (ties with the last one included), and whether the
        page reached the end. Only the alarms this node runs (in a fleet: of the
        shards it holds)."""
        ...

    async def in_state(self, state: str, limit: int, offset: int = 0, *,
                       mine: bool = False) -> list[AlarmRecord]:
        """Alarms in `state` (`mine`: only those this node runs)."""
        ...

    async def overdue(self, before_ms: int, limit: int) -> list[AlarmRecord]:
        """Alarms due before `before_ms` that this node runs."""
        ...

    async def page(self, limit: int, offset: int = 0, state: str | None = None,
                   contains: str | None = None) -> list[AlarmRecord]:
        """Alarms most urgent first: dead, retrying (near exhaustion first), then by due time;
        optionally only one state, or objects whose `Class/name` contains a text."""
        ...

    async def count(self, state: str | None = None, contains: str | None = None) -> int:
        """How many alarms `page` lists with these filters: from the counters without a
        text, else by going through the rows (each row's `Class/name` is looked at)."""
        ...

    async def counts(self) -> dict[str, int]:
        """Alarms by state (`counters().alarms`)."""
        ...

    async def retry_counts(self) -> list[tuple[str, int, int]]:
        """(class, retry count, how many) over alarms retrying or running a retry."""
        ...

    def counters(self) -> Counts:
        """The counts as of the last commit, without any I/O: loaded at open and kept
        by every commit (in its own transaction). Safe to call on the event loop as
        often as wanted."""
        ...

    async def recount(self) -> Counts:
        """The same counts, counted from the rows (a full scan: for tests and checks,
        never for a display)."""
        ...

    async def alarm_page(self, after: Cursor | None = None, limit: int = 50, *,
                         offset: int = 0, state: str | None = None,
                         contains: str | None = None, order: str = "urgency",
                         desc: bool = False) -> list[AlarmRecord]:
        """A page of alarms by key: the `limit` rows after the row whose cursor is
        `after` (None: from the start), `offset` more skipped, in `order`:

        - ``"urgency"``: `page`'s order, cursor ``(keys.alarm_urgency(...), class, name)``;
        - ``"object"``: by class and name, cursor ``(class, name)``;

        reversed with `desc` (then `after` is the row before, in that reversed order).
        Served by an index: the cost does not grow with the depth of the page. Reads
        on a connection of their own, so they never wait for a commit nor delay one;
        they see every write whose `submit` future has completed.
        """
        ...

    async def object_page(self, after: Cursor | None = None, limit: int = 50, *,
                          offset: int = 0, contains: str | None = None,
                          desc: bool = False) -> list[ObjectEntry]:
        """Every object known to the runtime (a database, an alarm or an execution), by
        class and name (cursor ``(class, name)``), from an index kept with the writes."""
        ...

    async def count_known(self, contains: str | None = None) -> int:
        """How many objects `object_page` lists (the counter without a text)."""
        ...

    async def known_among(self, keys: Sequence[AlarmKey]) -> set[AlarmKey]:
        """Which of `keys` `object_page` lists (point lookups)."""
        ...

    def object_write(self, key: AlarmKey, file: str, at_ms: int) -> ExtraWrite:
        """A write that lists an object about to get a database."""
        ...

    async def object_classes(self) -> list[str]:
        """The classes with at least one object that has a database."""
        ...


class LogChain:
    """The writes of one invocation's log, which land in order or not at all.

    An invocation queues some checkpoints without waiting for them (its start, a
    step's start): a later one implies the earlier ones. That holds for a death (the
    queue goes in order), not for a refused write (a lock fails one batch, the next
    lands). Once a write of the chain is refused, every later one refuses too, so the
    log never has a hole: the invocation is abandoned and retried from what landed."""

    __slots__ = ("broken",)

    def __init__(self) -> None:
        self.broken = False


class ExecutionStore(Protocol):
    """Execution logs, history, the idempotency ledger and the audit log.

    Writes ride the backend's commits: `checkpoint` queues one now (its place among
    writes is fixed when it is called) and returns a future to await for durability;
    `checkpoint_write` makes a write for an object event's own commit.

    In the same transaction a checkpoint also writes the recorded `marks` (values
    `ctx.now()`/`ctx.random()` gave, by key), deletes `drop_ops` and `drop_marks`
    first (a redrive's reset), and replaces the execution's timer rows for every op
    and record it carries, as `core.durable.timers.op_timers`/`execution_timers`
    derive them (a finished execution keeps none): `timers()` lists them."""

    def checkpoint(self, execution_id: str, record: ExecutionRecord | None = None,
                   ops: Sequence[OperationRecord] = (),
                   events: Sequence[dict[str, Any]] = (),
                   chain: LogChain | None = None, *,
                   marks: Mapping[str, str] | None = None,
                   drop_ops: Sequence[str] = (),
                   drop_marks: Sequence[str] = ()) -> asyncio.Future[None]: ...

    def checkpoint_write(self, execution_id: str, record: ExecutionRecord | None = None,
                         ops: Sequence[OperationRecord] = (),
                         events: Sequence[dict[str, Any]] = (),
                         chain: LogChain | None = None, *,
                         marks: Mapping[str, str] | None = None,
                         drop_ops: Sequence[str] = (),
                         drop_marks: Sequence[str] = ()) -> ExtraWrite: ...

    async def marks(self, execution_id: str) -> dict[str, str]: ...

    async def timers(self, limit: int = 100, after: Sequence[Any] | None = None,
                     execution_id: str | None = None) -> builtins.list[dict[str, Any]]:
        """Pending execution timers soonest first (`execution_id`, `op_id`, `kind`,
        `due_ms`, `name`, `handler`, `status`, `paused`, `key`); `after` is the
        previous page's last `key`."""
        ...

    def submit(self, write: ExtraWrite) -> asyncio.Future[None]: ...

    async def flush(self) -> None: ...

    async def get(self, execution_id: str) -> ExecutionRecord | None: ...

    async def operations(self, execution_id: str) -> list[OperationRecord]: ...

    async def max_event_id(self, execution_id: str) -> int: ...

    async def history(self, execution_id: str, after: int = 0,
                      limit: int = -1) -> list[dict[str, Any]]: ...

    async def list(self, status: str | None = None, limit: int = 100,
                   offset: int = 0) -> list[ExecutionRecord]: ...

    async def page(self, after: Cursor | None = None, limit: int = 50, *, offset: int = 0,
                   status: str | None = None, contains: str | None = None,
                   desc: bool = False) -> builtins.list[ExecutionRecord]:
        """Executions by key, `list`'s order (needs a human, failed, running, suspended,
        the rest; the latest updated first; then by id): cursor
        ``(keys.execution_urgency(status, updated_ms), id)``. `contains` keeps those
        whose `name/id` contains a text. Served by an index, on the read connection."""
        ...

    async def count(self, status: str | None = None, contains: str | None = None) -> int:
        """How many executions `page` lists (the counters without a text)."""
        ...

    async def counts(self) -> dict[str, int]:
        """Executions by status, from the counters kept with the writes."""
        ...

    async def ledger_deliver(self, key: str, value: Any, at_ms: int,
                             honour_key: bool = True) -> bool: ...

    async def ledger_get(self, key: str) -> dict[str, Any] | None: ...

    async def audit_append(self, entry: dict[str, Any]) -> None: ...

    async def audit_list(self, limit: int = 100,
                         offset: int = 0) -> builtins.list[dict[str, Any]]: ...

    async def audit_page(self, after: Cursor | None = None, limit: int = 100, *,
                         offset: int = 0, desc: bool = True) -> builtins.list[dict[str, Any]]:
        """Audit rows by key (cursor ``(seq,)``), the newest first unless not `desc`."""
        ...


class StorageBackend(Protocol):
    """Opens per-object stores and the shared alarm index."""

    @property
    def alarm_index(self) -> AlarmIndex: ...

    @property
    def execution_store(self) -> ExecutionStore: ...

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def open_object(self, object_class: str, object_name: str, create: bool = True,
                          intent: tuple[int, int | None] = (0, None)) -> ObjectStore | None:
        """The object's database (made with `intent` when new); None when it has none
        and `create` is false."""
        ...

    async def count_objects(self) -> int: ...

    async def list_objects(self, limit: int, offset: int = 0,
                           contains: str | None = None) -> list[tuple[str, str]]:
        """Objects that have storage, in (class, name) order."""
        ...
