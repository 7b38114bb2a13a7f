"""What the execution log does the same way on both backends: a checkpoint queued on
the runtime database's commit, the listing by offset, the counts from the counters.

Each backend's `ExecutionLog` (`sqlite.execution_log`, `postgres.execution_log`)
builds on it with its own rows (`checkpoint_write`) and reads."""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from alarmtop.core.model.errors import ChainBroken
from alarmtop.core.model.keys import Cursor
from alarmtop.core.model.operations import ExecutionRecord, OperationRecord
from alarmtop.core.model.storage_values import Counts, LogChain
from alarmtop.core.ports import ExtraWrite, RuntimeDatabase


class ChainLink:
    """A write of the runtime database that belongs to a `LogChain`: once a write of
    the chain was refused, every later one refuses too (the log never has a hole)."""

    __slots__ = ("chain", "fn")

    def __init__(self, fn: Any, chain: LogChain) -> None:
        self.fn, self.chain = fn, chain

    def check(self) -> None:
        if self.chain.broken:
            raise ChainBroken("an earlier checkpoint of this invocation was not written; "
                              "the invocation runs again from what was")

    def refused(self) -> None:
        self.chain.broken = True


class ExecutionLogBase:
    """The dialect-free half of `ExecutionLog`."""

    def __init__(self, db: RuntimeDatabase, counters: Callable[[], Counts]) -> None:
        self._db = db
        self._counters = counters  # the runtime database's counters, kept with its writes

    def checkpoint_write(self, execution_id: str, record: ExecutionRecord | None = None,
                         ops: Sequence[OperationRecord] = (),
                         events: Sequence[dict[str, Any]] = (),
                         chain: LogChain | None = None, *,
                         marks: Mapping[str, str] | None = None,
                         drop_ops: Sequence[str] = (),
                         drop_marks: Sequence[str] = ()) -> Any:
        raise NotImplementedError

    def checkpoint(self, execution_id: str, record: ExecutionRecord | None = None,
                   ops: Sequence[OperationRecord] = (),
                   events: Sequence[dict[str, Any]] = (),
                   chain: LogChain | None = None, *,
                   marks: Mapping[str, str] | None = None,
                   drop_ops: Sequence[str] = (),
                   drop_marks: Sequence[str] = ()) -> asyncio.Future[None]:
        """Queue a checkpoint now (its place among writes is fixed); await it for durability."""
        return self._db.submit(extra=self.checkpoint_write(
            execution_id, record, ops, events, chain, marks=marks, drop_ops=drop_ops,
            drop_marks=drop_marks))

    def submit(self, write: ExtraWrite) -> asyncio.Future[None]:
        return self._db.submit(extra=write)

    async def flush(self) -> None:
        """Until every write queued before this call is durable."""
        await self._db.submit()

    async def page(self, after: Cursor | None = None, limit: int = 50, *, offset: int = 0,
                   status: str | None = None, contains: str | None = None,
                   desc: bool = False) -> builtins.list[ExecutionRecord]:
        raise NotImplementedError

    async def count_matching(self, status: str | None, contains: str) -> int:
        """How many executions of `status` (None: any) have `contains` in `name/id`."""
        raise NotImplementedError

    async def list(self, status: str | None = None, limit: int = 100,
                   offset: int = 0) -> builtins.list[ExecutionRecord]:
        """Executions most in need of a person first (see `page`), by offset."""
        return await self.page(None, limit, offset=offset, status=status)

    async def count(self, status: str | None = None, contains: str | None = None) -> int:
        if contains:
            return await self.count_matching(status, contains)
        counts = await self.counts()
        return counts.get(status, 0) if status else sum(counts.values())

    async def counts(self) -> dict[str, int]:
        """From the counters the runtime database keeps with its writes: no scan."""
        return dict(self._counters().executions)
