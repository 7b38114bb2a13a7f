"""Which resident objects to hibernate: a pure decision over their activity."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple


class ResidentView(NamedTuple):
    """What the decisions see of a resident object (a tuple: the reaper makes one per
    object it looks at, and a frozen dataclass costs twice as much to build)."""

    key: tuple[str, str]
    last_active_ms: int
    busy: bool  # an event is running or waiting


def choose_evictions(residents: Iterable[ResidentView], now_ms: int, hibernate_after_ms: int,
                     max_resident: int, live: int) -> list[tuple[str, str]]:
    """Objects to hibernate now: idle too long, then least recently used over the cap.

    `residents` come least recently used first; `live` counts instances in memory.
    """
    out: list[tuple[str, str]] = []
    over = live - max_resident
    for r in residents:
        if r.busy:
            continue
        if now_ms - r.last_active_ms >= hibernate_after_ms or over > 0:
            out.append(r.key)
            over -= 1
        else:
            break  # later ones were active even more recently
    return out


def next_deadline(residents: Iterable[ResidentView], hibernate_after_ms: int) -> int | None:
    """When the least recently used idle object becomes due for hibernation."""
    for r in residents:
        if not r.busy:
            return r.last_active_ms + hibernate_after_ms
    return None
