"""An object whose alarm always fails: it walks the retry ladder to a dead letter."""

from __future__ import annotations

from alarmtop.core import AlarmInfo, DurableObject


class Flaky(DurableObject):
    async def arm(self, delay_ms: int = 0) -> int:
        at = self.ctx.now_ms() + int(delay_ms)
        await self.ctx.storage.set_alarm(at)
        return at

    async def alarm(self, info: AlarmInfo) -> None:
        attempts = int(await self.ctx.storage.get("attempts") or 0) + 1
        await self.ctx.storage.put("attempts", attempts)
        raise RuntimeError(f"downstream unavailable (attempt {attempts})")
