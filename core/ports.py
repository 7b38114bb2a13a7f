"""The protocols the kernel needs, and what storage implements (SQLite, PostgreSQL).

`RuntimeDatabase` is the runtime's own database: one writer, group commit, and on
PostgreSQL the fenced commit; it knows no table. The stores ride its commits:
`AlarmRows` (every object's alarm), `ExecutionLog` (checkpoints, history, ledger),
`AuditRows`, `OperatorRows` (pauses, the timers board, bulk batches). Each object
has an `ObjectStore` of its own. `StorageBackend` builds and opens them all.

`Clock` is time and nothing else. Nothing here imports asyncio's loop, a driver
or a socket; the values exchanged are `alarmtop.core.model`'s.
"""

from __future__ import annotations

import asyncio
import builtins
import contextvars
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from alarmtop.core.model.alarm_policy import AlarmKey, AlarmRecord
from alarmtop.core.model.aws_listing import StatusFilter
from alarmtop.core.model.bulk_items import PREP_CHUNK, ItemOutcome
from alarmtop.core.model.faults import Fault
from alarmtop.core.model.keys import Cursor
from alarmtop.core.model.operations import ExecutionRecord, OperationRecord
from alarmtop.core.model.selection import Selection
from alarmtop.core.model.storage_values import Counts, ExecResult, LogChain, ObjectEntry

# A write of the runtime database's own tables, given the backend's connection (SQLite:
# a plain function; PostgreSQL: a coroutine function), run inside one of its commits.
ExtraWrite = Callable[[Any], Any]
OpWrite = ExtraWrite

# On a fleet: the object whose event is running and the epoch of the lease its shard
# was held by when the object woke (None: no event, or one node alone). Set by the
# kernel around each event; a fenced database reads it as a write is submitted, and
# refuses the write unless that very lease still holds. A node that lost the shard
# and claimed it back meanwhile holds a newer epoch: the event read before the loss.
EVENT_LEASE: contextvars.ContextVar[tuple[AlarmKey, int] | None] = contextvars.ContextVar(
    "alarmtop_event_lease", default=None)


class Timer(Protocol):
    """A timer set on a `Clock`: cancellable until it fires."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """What the runtime needs from time, and nothing else: tasks and idleness belong
    to the supervisor (`kernel.supervisor`); a clock whose `advance` must wait for the
    runtime to be idle (the virtual one) carries a `BusyTracker` as `tracker`."""

    def now_ms(self) -> int: ...

    def call_at_ms(self, when_ms: int, callback: Callable[[], None]) -> Timer: ...

    async def sleep_until_ms(self, when_ms: int) -> None: ...

    async def sleep(self, seconds: float) -> None: ...


class RuntimeDatabase(Protocol):
    """The runtime's own database: every durable write of the runtime goes through
    `submit`, in one queue, committed in groups by one writer (one transaction, one
    fsync, for every write queued meanwhile; on PostgreSQL fenced by this node's shard
    leases in the same transaction). It knows no table: the stores hand it keyed rows
    (the alarm rows, coalesced per object within a batch) and writes of their own.

    A failed batch is retried write by write, so one bad write fails alone; a write
    that depends on an earlier refused one (`LogChain`) refuses too."""

    path: str

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    def submit(self, puts: Sequence[AlarmRecord] = (), deletes: Sequence[AlarmKey] = (),
               extra: ExtraWrite | None = None) -> asyncio.Future[None]:
        """Queue a write now (its order among writes is fixed when this is called) and
        return the future that says when it is durable (or why it failed)."""
        ...

    async def write(self, puts: Sequence[AlarmRecord], deletes: Sequence[AlarmKey] = (),
                    extra: ExtraWrite | None = None) -> None:
        """`submit`, awaited: store rows and remove keys durably, with `extra` (other
        tables) in the same transaction: a log and the alarm that acts on it land
        together or not at all."""
        ...


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


class AlarmRows(Protocol):
    """Every object's alarm row (written through `RuntimeDatabase.submit`, read here),
    and the index of the objects the runtime knows."""

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


class ExecutionLog(Protocol):
    """Execution logs, history and the idempotency ledger.

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

    async def by_function(self, function: str, *, statuses: StatusFilter | None = None,
                          started_from_ms: int | None = None, started_to_ms: int | None = None,
                          version: str | None = None, execution_id: str | None = None,
                          after: tuple[int, str] | None = None, limit: int = 50,
                          desc: bool = True) -> builtins.list[ExecutionRecord]:
        """The executions of the Lambda-style function `function` by (created_ms, id),
        the newest first unless not `desc`, from after the key `after`; filtered by
        status (AWS's, `aws_listing.StatusFilter`), start time (inclusive), version
        and id. Served by an index, on the read connection."""
        ...

    def delete_write(self, execution_id: str) -> ExtraWrite:
        """A write deleting the execution and all of it (operations, history, timers,
        recorded values), for the execution object's own commit."""
        ...

    async def ledger_deliver(self, key: str, value: Any, at_ms: int,
                             honour_key: bool = True) -> bool: ...

    async def ledger_get(self, key: str) -> dict[str, Any] | None: ...


class AuditRows(Protocol):
    """The audit log: one row per operator command, whatever its outcome."""

    async def audit_append(self, entry: dict[str, Any]) -> None: ...

    async def audit_list(self, limit: int = 100,
                         offset: int = 0) -> builtins.list[dict[str, Any]]: ...

    async def audit_page(self, after: Cursor | None = None, limit: int = 100, *,
                         offset: int = 0, desc: bool = True) -> builtins.list[dict[str, Any]]:
        """Audit rows by key (cursor ``(seq,)``), the newest first unless not `desc`."""
        ...

    async def audit_count(self) -> int:
        """How many rows the log holds now (old ones are pruned: see `audit_prune`)."""
        ...

    async def audit_prune(self, oldest: int, before_ms: int | None = None) -> int:
        """Delete, of the `oldest` rows (by `seq`), those written before `before_ms`
        (all of them when None); how many went. One write of the runtime database."""
        ...


class OperatorRows(Protocol):
    """What the operator tools need from storage: paused alarms, the timers board, bulk
    batches. Writes (`*_write`) ride the runtime database's commit like every other,
    so that an item's outcome, its audit row and the alarm change it made land in one
    transaction or not at all; reads page by key over an index (no OFFSET)."""

    # -- alarms: pause and the timers board ------------------------------------------------

    async def paused(self, mine: bool = True) -> list[tuple[AlarmKey, int]]:
        """Every paused alarm (of this node's shards with `mine`), with since when."""
        ...

    async def get_many(self, keys: Sequence[AlarmKey]) -> dict[AlarmKey, AlarmRecord]:
        """The rows of `keys` that exist, in one read."""
        ...

    async def board_alarms(self, limit: int, after: tuple[int, str, str] | None, *,
                           paused: bool, until_ms: int | None,
                           skip_class: str) -> list[AlarmRecord]:
        """Pending and retrying alarms by (due, class, name) after `after`, up to
        `until_ms`: the ones not paused by their `due_ms` (the due index), or the paused
        ones by their next attempt (an index of their own). `skip_class`'s rows (the
        executions', which the board shows by their timers) are left out."""
        ...

    # -- selections ---------------------------------------------------------------------

    async def count_selected(self, sel: Selection) -> int: ...

    async def sample_selected(self, sel: Selection, limit: int) -> list[str]:
        """The first keys (in key order) a selection matches."""
        ...

    # -- batches ------------------------------------------------------------------------

    async def create_batch(self, row: dict[str, Any], keys: Sequence[str] | None) -> None:
        """The batch row and, when it was given keys, its items (seq 1..n), in one write."""
        ...

    async def prepare_step(self, batch_id: str, sel: Selection, after: str | None,
                           limit: int = PREP_CHUNK) -> tuple[int, str | None]:
        """Record up to `limit` more of the keys `sel` matches after the key `after`, in
        one write that also moves the batch's total and where preparing goes on; the
        last one sets it running. Returns (items recorded, the last key or None when
        the selection is through)."""
        ...

    async def open_items(self, batch_id: str, after_seq: int,
                         limit: int) -> list[tuple[int, str, str, dict[str, Any] | None]]:
        """Items still to do (pending, or running when the runtime stopped), by seq:
        (seq, key, status, detail)."""
        ...

    def items_write(self, batch_id: str, outcomes: Sequence[ItemOutcome], now_ms: int,
                    audit: Sequence[dict[str, Any]] = ()) -> OpWrite:
        """Items' outcomes, the batch's counts and the items' audit rows, as one write."""
        ...

    def finish_write(self, batch_id: str, status: str, now_ms: int,
                     cancel_left: bool = False, audit: Sequence[dict[str, Any]] = (),
                     cancel_reason: str | None = None) -> OpWrite:
        """The batch's end (or `cancelling`): items never started are cancelled with it
        when `cancel_left`; `audit` rows (the batch's own entry) land with it; a
        `cancel_reason` is kept in the row (an earlier one stays when None)."""
        ...

    def submit(self, write: OpWrite) -> asyncio.Future[None]: ...

    async def get_batch(self, batch_id: str) -> dict[str, Any] | None: ...

    async def failures(self, batch_id: str, after_seq: int,
                       limit: int) -> list[dict[str, Any]]:
        """The items that failed, by seq: `seq`, `key`, `error`."""
        ...

    async def list_batches(self, limit: int, after: str | None) -> list[dict[str, Any]]:
        """Batches, newest first (ids sort by time), after the id `after`."""
        ...

    async def open_batches(self) -> list[dict[str, Any]]:
        """Batches a runner has work on (preparing, running, cancelling)."""
        ...

    async def claim_batch(self, batch_id: str, node: str, was: str | None) -> bool:
        """Take over a batch that node `was` ran; False if another node took it first."""
        ...


class StorageBackend(Protocol):
    """Builds the runtime database and its stores, and opens per-object stores."""

    @property
    def database(self) -> RuntimeDatabase: ...

    @property
    def alarm_rows(self) -> AlarmRows: ...

    @property
    def execution_log(self) -> ExecutionLog: ...

    @property
    def audit_rows(self) -> AuditRows: ...

    @property
    def operator_rows(self) -> OperatorRows: ...

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def open_object(self, object_class: str, object_name: str, create: bool = True,
                          intent: tuple[int, int | None] = (0, None),
                          epoch: int | None = None) -> ObjectStore | None:
        """The object's database (made with `intent` when new); None when it has none
        and `create` is false. On a fleet, `epoch` is the lease epoch of the object's
        shard it was woken under: its commits land only while that lease still holds."""
        ...

    async def count_objects(self) -> int: ...

    async def list_objects(self, limit: int, offset: int = 0,
                           contains: str | None = None) -> list[tuple[str, str]]:
        """Objects that have storage, in (class, name) order."""
        ...


class FaultSink(Protocol):
    """Where a fleet's faults are kept; writes are queued, `flush` waits for them."""

    def saved(self, fault: Fault) -> None: ...

    def cleared(self, fault_id: str) -> None: ...

    async def flush(self) -> None: ...


class FaultMirror(Protocol):
    """A node's fault registry, as the fleet's shared store keeps it up to date."""

    sink: FaultSink | None
    id_suffix: str

    def list(self) -> builtins.list[dict[str, Any]]: ...

    def mirror(self, faults: builtins.list[Fault], keep: set[str]) -> None: ...
