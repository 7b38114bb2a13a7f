"""A batch of queued writes of the runtime database, the same on both backends: what
it leaves to write, and how each writer is told its outcome."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from alarmtop.core.model.alarm_policy import AlarmKey, AlarmRecord
from alarmtop.core.model.errors import StorageError


def coalesce(batch: Iterable[tuple[Any, ...]]) -> tuple[dict[AlarmKey, AlarmRecord | None],
                                                      list[Any]]:
    """Each alarm key's last change (its record, or None when the last was a delete),
    and the other writes in their order: one row per key is written, as if the
    writes had been made one by one."""
    final: dict[AlarmKey, AlarmRecord | None] = {}
    extras: list[Any] = []
    for entry in batch:
        puts, deletes, extra = entry[0], entry[1], entry[2]  # then what the backend keeps
        for key in deletes:
            final[key] = None
        for rec in puts:
            final[rec.key] = rec
        if extra is not None:
            extras.append(extra)
    return final, extras


def settle(futures: Sequence[asyncio.Future[None]],
           outcome: Sequence[BaseException | None] | None,
           error_of: Callable[[BaseException], BaseException]) -> None:
    """Tell each writer of a batch how its write went: `outcome` None when the batch
    committed, else each write's error (None: it landed), mapped by `error_of` unless
    it is alarmtop's own already."""
    for i, fut in enumerate(futures):
        if fut.done():
            continue
        exc = None if outcome is None else outcome[i]
        if exc is None:
            fut.set_result(None)
        else:
            fut.set_exception(exc if isinstance(exc, StorageError) else error_of(exc))
