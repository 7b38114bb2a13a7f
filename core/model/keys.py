"""Sort keys of the large listings, as plain integers an index can serve. Pure.

The console pages alarms most urgent first and executions most in need of a
person first. A page by OFFSET walks every row before it, and an ORDER BY over a
CASE expression sorts the whole table; so each order is folded into one integer
(`alarm_urgency`, `execution_urgency`) that the backend stores or indexes, and a
page starts after the key of the last row of the one before (`Cursor`). Every
backend orders by these same integers (SQLite stores the alarm's and computes the
execution's in a generated column; PostgreSQL can keep BIGINT columns), so a
cursor means the same row order everywhere.

Layout (non-negative, below 2**63, so a signed 64-bit column holds it):

    alarm:     rank(state) << 60 | (RETRY_MAX - retries) << 46 | time(next attempt)
    execution: rank(status) << 60 | (TIME_MAX - time(updated))

where `time(ms)` moves ms by 2**45 (about 1,100 years either side of 1970) into
46 bits and clamps; an alarm without a next attempt (a dead letter) sorts as time
0, before every real time, as SQL's NULLS FIRST did. Retry counts above
`RETRY_MAX` (16,383) tie; times outside the 1,100 years clamp. Ties are broken by
the row's own key (object class and name; execution id), which every cursor
carries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

RANK_SHIFT = 60
RETRY_SHIFT = 46
RETRY_MAX = (1 << (RANK_SHIFT - RETRY_SHIFT)) - 1  # 16,383
TIME_OFFSET = 1 << 45
TIME_MAX = (1 << RETRY_SHIFT) - 1

ALARM_RANK = {"dead": 0, "retrying": 1, "running": 2, "pending": 3}
PENDING_RANK = 3  # any other state sorts with the pending ones
EXECUTION_RANK = {"needs_human": 0, "failed": 1, "running": 2, "suspended": 3}
OTHER_EXECUTION_RANK = 4  # succeeded, timed out, aborted: done, the least urgent

Cursor = tuple[Any, ...]  # a row's sort key: its place in a listing's order


def _time(ms: int | None) -> int:
    if ms is None:
        return 0
    return min(max(ms + TIME_OFFSET, 1), TIME_MAX)


_RANKED = {state: rank << RANK_SHIFT for state, rank in ALARM_RANK.items()}
_PENDING = PENDING_RANK << RANK_SHIFT


def alarm_urgency(state: str, retry_count: int, next_attempt_ms: int | None) -> int:
    """An alarm's place in the urgency order: dead, retrying, running, pending; more
    retries first; then the soonest next attempt (none first).

    Computed for every alarm row written (twice per firing): spelled out, it costs a
    fifth of what the composed version did."""
    retries = retry_count if 0 <= retry_count <= RETRY_MAX else (
        RETRY_MAX if retry_count > 0 else 0)
    if next_attempt_ms is None:
        t = 0
    else:
        t = next_attempt_ms + TIME_OFFSET
        t = 1 if t < 1 else TIME_MAX if t > TIME_MAX else t
    return _RANKED.get(state, _PENDING) | (RETRY_MAX - retries) << RETRY_SHIFT | t


def alarm_rank_range(state: str) -> tuple[int, int]:
    """The urgencies [low, high) of every alarm in `state` (a state is one rank)."""
    rank = ALARM_RANK.get(state, PENDING_RANK)
    return rank << RANK_SHIFT, (rank + 1) << RANK_SHIFT


def execution_urgency(status: str, updated_ms: int) -> int:
    """An execution's place: needs a human, failed, running, suspended, then the rest;
    the most recently updated first within each."""
    rank = EXECUTION_RANK.get(status, OTHER_EXECUTION_RANK)
    return rank << RANK_SHIFT | (TIME_MAX - _time(updated_ms))


def execution_rank_range(status: str) -> tuple[int, int]:
    """The urgencies [low, high) of the executions of `status`' rank (the done ones
    share a rank: a backend filters those by status too)."""
    rank = EXECUTION_RANK.get(status, OTHER_EXECUTION_RANK)
    return rank << RANK_SHIFT, (rank + 1) << RANK_SHIFT


# -- cursors as the wire carries them --------------------------------------------------------

# The shape of each listing's cursor, by order: an int is a sort key, a str a name.
SHAPES: dict[str, tuple[type, ...]] = {
    "alarms.urgency": (int, str, str),  # (urgency, object class, object name)
    "alarms.object": (str, str),  # (object class, object name)
    "executions.urgency": (int, str),  # (urgency, execution id)
    "objects.object": (str, str),
    "audit.seq": (int,),
}


def check_cursor(order: str, value: Any) -> Cursor:
    """`value` (as decoded from JSON: a list) as a cursor of `order`, or ValueError."""
    shape = SHAPES[order]
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != len(shape):
        raise ValueError(f"a cursor of this listing is a list of {len(shape)} values")
    for item, kind in zip(value, shape, strict=True):
        if isinstance(item, bool) or not isinstance(item, kind):
            raise ValueError(f"a cursor of this listing holds {_names(shape)}")
    return tuple(value)


def _names(shape: tuple[type, ...]) -> str:
    return ", ".join("an integer" if k is int else "a string" for k in shape)
