"""A bulk batch's items as data: which batches a runner works on, how an item ended (pure)."""

from __future__ import annotations

from typing import Any, NamedTuple

BATCH_OPEN = ("preparing", "running", "cancelling")  # a runner has work to do on these
PREP_CHUNK = 2_000  # selected keys recorded per transaction at most while a batch is prepared


class ItemOutcome(NamedTuple):
    """How one item of a batch ended (or that it is in flight: `running`)."""

    seq: int
    status: str  # done | failed | running
    error: str | None = None
    detail: dict[str, Any] | None = None
