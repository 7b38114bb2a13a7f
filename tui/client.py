"""How the console talks to a server: an `OpsClient` protocol and its WebSocket form.

The console depends only on the protocol (tests may hand it another one); the
WebSocket client speaks `/ops`: hello, then frames (welcome, snapshot, delta)
delivered in order, and requests matched to their results by id.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator
from typing import Any, Protocol

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed


class CommandError(Exception):
    """The server refused a command; the message is the server's."""


class Disconnected(Exception):
    """The connection to the server went away."""


class OpsClient(Protocol):
    role: str | None

    async def connect(self) -> None: ...

    async def close(self) -> None: ...

    def frames(self) -> AsyncIterator[dict[str, Any]]: ...

    async def request(self, op: str, **args: Any) -> Any: ...


class WebSocketOpsClient:
    def __init__(self, url: str, token: str, timeout_s: float = 15.0) -> None:
        self.url = url
        self.token = token
        self.timeout_s = timeout_s
        self.role: str | None = None
        self._ws: ClientConnection | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._frames: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        """Connect and say hello; raises `Disconnected` or `CommandError` (bad token)."""
        await self.close()
        try:
            self._ws = await connect(self.url, open_timeout=self.timeout_s, max_size=None)
            await self._ws.send(json.dumps({"op": "hello", "token": self.token}))
            first = json.loads(await asyncio.wait_for(self._ws.recv(), self.timeout_s))
        except (OSError, ConnectionClosed, TimeoutError) as exc:
            raise Disconnected(f"cannot reach {self.url}: {exc}") from None
        if first.get("type") != "welcome":
            await self.close()
            raise CommandError(first.get("error") or f"unexpected first frame {first}")
        self.role = first["role"]
        self._frames = asyncio.Queue()
        self._frames.put_nowait(first)
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        assert self._ws is not None
        try:
            async for raw in self._ws:
                msg = json.loads(raw)
                if msg.get("type") == "result":
                    fut = self._pending.pop(msg.get("id"), None)
                    if fut is not None and not fut.done():
                        fut.set_result(msg)
                else:
                    self._frames.put_nowait(msg)
        except ConnectionClosed:
            pass
        finally:
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(Disconnected("connection lost before the result"))
            self._pending.clear()
            self._frames.put_nowait(None)

    async def frames(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            frame = await self._frames.get()
            if frame is None:
                raise Disconnected("the server closed the connection")
            yield frame

    async def request(self, op: str, **args: Any) -> Any:
        if self._ws is None:
            raise Disconnected("not connected")
        cid = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[cid] = fut
        try:
            await self._ws.send(json.dumps({"op": op, "id": cid, **args}))
        except ConnectionClosed:
            self._pending.pop(cid, None)
            raise Disconnected("connection lost") from None
        msg = await asyncio.wait_for(fut, self.timeout_s)
        if not msg.get("ok"):
            raise CommandError(msg.get("error") or "refused")
        return msg.get("data")

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None
        if self._ws is not None:
            await self._ws.close()
            self._ws = None
