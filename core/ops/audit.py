"""The audit log of operator actions: who, when, what, why, and whether it worked;
and its retention (`model.audit_retention`): pruned at start and every hour."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from alarmtop.core.kernel.supervisor import Supervisor, Wakeup
from alarmtop.core.model.audit_retention import PRUNE_CHUNK, PRUNE_EVERY_S, AuditRetention
from alarmtop.core.model.safe_text import safe_text, safe_value

if TYPE_CHECKING:
    from alarmtop.core.kernel.events import EventBus
    from alarmtop.core.ports import AuditRows, Clock

log = logging.getLogger("alarmtop.runtime")


class AuditLog:
    """Every operator action: who, when, what, why, and whether it worked.

    Text is made safe to store before it is written: an odd character (a lone
    surrogate, say) must never let an action skip its row."""

    def __init__(self, store: AuditRows, events: EventBus, clock: Clock,
                 tasks: Supervisor | None = None,
                 retention: AuditRetention | None = None) -> None:
        self._store = store
        self._events = events
        self._clock = clock
        self._tasks = tasks
        self.retention = retention or AuditRetention()
        self._pruner: asyncio.Task[None] | None = None

    def retain(self, days: float | None, rows: int | None) -> AuditRetention:
        """Set the retention (`alarmtop serve --audit-retention-days/--audit-max-rows`);
        bad values are refused and change nothing. In force from the next prune."""
        self.retention = AuditRetention(days, rows)
        return self.retention

    def start(self) -> None:
        """Prune now, then every `PRUNE_EVERY_S` on the runtime's clock, until stopped."""
        if self._tasks is not None and (self._pruner is None or self._pruner.done()):
            self._pruner = self._tasks.spawn(self._prune_loop(), name="audit retention")

    async def _prune_loop(self) -> None:
        wake = Wakeup(self._clock)
        while True:
            try:
                await self.prune()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # storage away: the next round tries again
                log.warning("the audit log could not be pruned (%s); tried again in %g s",
                            exc, PRUNE_EVERY_S)
            await wake.wait(self._clock.now_ms() + round(PRUNE_EVERY_S * 1000))

    async def prune(self) -> int:
        """Delete the rows the retention lets go, a chunk per write; how many went."""
        keep, store, gone = self.retention, self._store, 0
        over = keep.over(await store.audit_count())
        while over > 0:
            n = await store.audit_prune(min(over, PRUNE_CHUNK))
            if n == 0:
                break
            gone, over = gone + n, over - n
        cutoff = keep.cutoff_ms(self._clock.now_ms())
        while cutoff is not None:
            oldest = await store.audit_page(None, 1, desc=False)
            if not oldest or oldest[0]["at_ms"] >= cutoff:
                break  # nothing old enough: no write at all
            n = await store.audit_prune(PRUNE_CHUNK, cutoff)
            gone += n
            if n == 0:
                break
        if gone:
            log.info("audit log: %d rows pruned (retention: %s days, %s rows)", gone,
                     keep.days, keep.rows)
        return gone

    async def count(self) -> int:
        """How many rows the log holds now."""
        return await self._store.audit_count()

    async def record(self, actor: str, action: str, target: str | None = None,
                     reason: str | None = None, ok: bool = True, role: str | None = None,
                     detail: Any = None) -> None:
        entry = {"at_ms": self._clock.now_ms(), "actor": safe_text(actor),
                 "role": safe_text(role), "action": safe_text(action),
                 "target": safe_text(target), "reason": safe_text(reason), "ok": ok,
                 "detail": safe_value(detail)}
        await self._store.audit_append(entry)
        self._events.emit(f"operator.{entry['action']}",
                          {k: v for k, v in entry.items() if k != "detail"})

    async def list(self, limit: int = 100, offset: int = 0) -> list[dict[str, Any]]:
        return await self._store.audit_list(limit, offset)
