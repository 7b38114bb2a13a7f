"""What the operator tools need from storage: paused alarms, the timers board, bulk
batches. Both backends implement it (`sqlite_operator`, `postgres/operator`).

Writes ride the alarm index's group commit like every other write of the runtime
database: `*_write` methods build a write to hand to `submit` or to an alarm
commit (`AlarmScheduler.commit_many(..., extra=...)`), so that an item's outcome,
its audit row and the alarm change it made land in one transaction or not at all.
Reads page by key over an index (no OFFSET).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

from alarmtop.core.model.alarm_policy import AlarmKey, AlarmRecord
from alarmtop.core.model.selection import Selection

# A write of the runtime database given its connection (SQLite: a plain function;
# PostgreSQL: a coroutine function), run inside the alarm index's group commit.
OpWrite = Callable[[Any], Any]
BATCH_OPEN = ("preparing", "running", "cancelling")  # a runner has work to do on these
PREP_CHUNK = 2_000  # selected keys recorded per transaction at most while a batch is prepared


class ItemOutcome(NamedTuple):
    """How one item of a batch ended (or that it is in flight: `running`)."""

    seq: int
    status: str  # done | failed | running
    error: str | None = None
    detail: dict[str, Any] | None = None


class OperatorStore(Protocol):
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


def operator_store_of(backend: Any) -> OperatorStore:
    """The operator store over `backend`'s runtime database (its alarm index's
    connection and group commit), by the backend's kind."""
    from alarmtop.core.storage.sqlite.database import SqliteAlarmIndex
    index = backend.alarm_index
    if isinstance(index, SqliteAlarmIndex):
        from alarmtop.core.storage.sqlite.operator_rows import SqliteOperatorStore
        return SqliteOperatorStore(index, getattr(backend.execution_store, "node_id", None))
    from alarmtop.core.storage.postgres.operator_rows import PgOperatorStore
    return PgOperatorStore(backend)
