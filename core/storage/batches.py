"""What a batch of queued index writes leaves, for either backend's committer."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from alarmtop.core.model.alarm_policy import AlarmKey, AlarmRecord

W = TypeVar("W")


def coalesce(batch: Iterable[tuple[Sequence[AlarmRecord], Sequence[AlarmKey], W | None, Any]]
             ) -> tuple[dict[AlarmKey, AlarmRecord | None], list[W]]:
    """Each alarm key's last change (its record, or None when the last was a delete),
    and the other writes in their order: one row per key is written, as if the
    writes had been made one by one."""
    final: dict[AlarmKey, AlarmRecord | None] = {}
    extras: list[W] = []
    for puts, deletes, extra, _ in batch:
        for key in deletes:
            final[key] = None
        for rec in puts:
            final[rec.key] = rec
        if extra is not None:
            extras.append(extra)
    return final, extras
