"""A debounced click counter: many hits, one flush per window.

Each hit adds to a stored count; the first hit of a window arms the alarm (only
when none is set), and the alarm flushes the total once.
"""

from __future__ import annotations

from typing import Protocol

from alarmtop.core import AlarmInfo, DurableObject

DEBOUNCE_MS = 1000


class FlushSink(Protocol):
    async def flushed(self, counter: str, count: int) -> None: ...


class ClickCounter(DurableObject):
    async def hit(self, n: int = 1) -> int:
        count = int(await self.ctx.storage.get("pending") or 0) + int(n)
        await self.ctx.storage.put("pending", count)
        if await self.ctx.storage.get_alarm() is None:
            await self.ctx.storage.set_alarm(self.ctx.now_ms() + DEBOUNCE_MS)
        return count

    async def totals(self) -> dict[str, int]:
        return {"pending": int(await self.ctx.storage.get("pending") or 0),
                "flushed": int(await self.ctx.storage.get("flushed") or 0)}

    async def alarm(self, info: AlarmInfo) -> None:
        pending = int(await self.ctx.storage.get("pending") or 0)
        if pending:
            sink: FlushSink | None = getattr(self.env, "flush_sink", None)
            if sink is not None:
                await sink.flushed(self.ctx.id, pending)
            flushed = int(await self.ctx.storage.get("flushed") or 0)
            await self.ctx.storage.put({"pending": 0, "flushed": flushed + pending})


