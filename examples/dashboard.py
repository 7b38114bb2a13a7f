"""A live dashboard: viewers connect over WebSockets and see a shared counter.

The object accepts each connection with the tag "viewer" and an attachment that
remembers when the viewer was last heard from; "ping" is answered "pong" by the
server without waking the object (the auto-response). The alarm prunes viewers
silent for a minute, every 60 s, and re-arms only while anyone is connected, so
an empty dashboard costs nothing.
"""

from __future__ import annotations

from typing import Any

from alarmtop.core import AlarmInfo, DurableObject, HibernatableWebSocket

PRUNE_EVERY_MS = 60_000
STALE_AFTER_MS = 60_000


class LiveDashboard(DurableObject):
    async def web_socket_connect(self, ws: HibernatableWebSocket,
                                 request: dict[str, Any]) -> None:
        now = self.ctx.now_ms()
        self.ctx.accept_web_socket(ws, tags=["viewer"])
        ws.serialize_attachment({"joined_ms": now, "last_seen_ms": now})
        self.ctx.set_web_socket_auto_response(("ping", "pong"))
        if await self.ctx.storage.get_alarm() is None:
            await self.ctx.storage.set_alarm(now + PRUNE_EVERY_MS)
        await ws.send(f"count {await self._count()}")

    async def _count(self) -> int:
        return int(await self.ctx.storage.get("count") or 0)

    async def web_socket_message(self, ws: HibernatableWebSocket, message: str) -> None:
        seen = ws.deserialize_attachment() or {}
        seen["last_seen_ms"] = self.ctx.now_ms()
        ws.serialize_attachment(seen)
        if message == "bump":
            count = await self._count() + 1
            await self.ctx.storage.put("count", count)
            for viewer in self.ctx.get_web_sockets("viewer"):
                await viewer.send(f"count {count}")
        elif message == "whoami":
            await ws.send(f"joined {seen.get('joined_ms')}")

    async def alarm(self, info: AlarmInfo) -> None:
        now = self.ctx.now_ms()
        for ws in self.ctx.get_web_sockets():
            seen = ws.deserialize_attachment() or {}
            alive = max(seen.get("last_seen_ms") or 0,
                        self.ctx.get_web_socket_auto_response_timestamp(ws) or 0)
            if now - alive >= STALE_AFTER_MS:
                await ws.close(1001, "no sign of life for a minute")
        if self.ctx.get_web_sockets():
            await self.ctx.storage.set_alarm(now + PRUNE_EVERY_MS)

    async def viewers(self) -> int:
        return len(self.ctx.get_web_sockets("viewer"))
