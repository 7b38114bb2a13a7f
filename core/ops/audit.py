"""The audit log of operator actions: who, when, what, why, and whether it worked."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from alarmtop.core.model.safe_text import safe_text, safe_value

if TYPE_CHECKING:
    from alarmtop.core.kernel.events import EventBus
    from alarmtop.core.ports import AuditRows, Clock


class AuditLog:
    """Every operator action: who, when, what, why, and whether it worked.

    Text is made safe to store before it is written: an odd character (a lone
    surrogate, say) must never let an action skip its row."""

    def __init__(self, store: AuditRows, events: EventBus, clock: Clock) -> None:
        self._store = store
        self._events = events
        self._clock = clock

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
