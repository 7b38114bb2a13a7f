"""Shared pieces for the ops server tests: a real server on 127.0.0.1, real clients.

`serve(rt)` starts an `OpsServer` on an ephemeral port with a fast delta tick;
`Client` wraps a `websockets` connection with the protocol's small habits
(hello, numbered requests, waiting for a frame that matches) and a bounded
wall-clock timeout on every read, so a missing frame fails the test instead of
hanging it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from alarmtop.core import AlarmInfo, DurableObject, Runtime
from alarmtop.server.app import OpsServer
from alarmtop.server.auth import Tokens
from tests.conftest import RuntimeFactory

OPERATOR = "operator-token-for-tests"
VIEWER = "viewer-token-for-tests"
TICK_S = 0.02
# How long a frame, a close or a condition is waited for: a generous bound for a loaded
# machine (a wait ends as soon as what it waits for comes), never a speed target.
WAIT_S = 30.0

Frame = dict[str, Any]


class Always(DurableObject):
    """An object whose alarm handler always raises: a dead letter in the making."""

    async def arm(self, delay_ms: int = 0) -> int:
        at = self.ctx.now_ms() + int(delay_ms)
        await self.ctx.storage.set_alarm(at)
        return at

    async def alarm(self, info: AlarmInfo) -> None:
        raise RuntimeError("downstream unavailable")


class Quiet(DurableObject):
    """An object whose alarm succeeds; it counts its fires."""

    async def arm(self, delay_ms: int = 0) -> int:
        at = self.ctx.now_ms() + int(delay_ms)
        await self.ctx.storage.set_alarm(at)
        return at

    async def touch(self) -> None:
        """Write storage (an object with only an alarm has no storage of its own)."""
        await self.ctx.storage.put("touched", True)

    async def fired(self) -> int:
        return int(await self.ctx.storage.get("fired") or 0)

    async def alarm(self, info: AlarmInfo) -> None:
        await self.ctx.storage.put("fired", int(await self.ctx.storage.get("fired") or 0) + 1)


class Client:
    """One ops-channel client over a real WebSocket."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self._ids = itertools.count(1)
        self.seen: list[Frame] = []  # every frame read, in order

    async def recv(self, within: float = WAIT_S) -> Frame:
        raw = await asyncio.wait_for(self.ws.recv(), within)
        frame: Frame = json.loads(raw)
        self.seen.append(frame)
        return frame

    async def send(self, message: Frame | str | bytes) -> None:
        await self.ws.send(message if isinstance(message, str | bytes) else json.dumps(message))

    async def hello(self, token: str) -> tuple[Frame, Frame]:
        """Say hello; returns (welcome, snapshot)."""
        await self.send({"op": "hello", "token": token})
        welcome = await self.recv()
        snapshot = await self.recv()
        return welcome, snapshot

    async def wait_for(self, pred: Callable[[Frame], bool], within: float = WAIT_S) -> Frame:
        """Read frames until one satisfies `pred` (bounded wall time)."""
        async with asyncio.timeout(within):
            while True:
                frame = await self.recv(within)
                if pred(frame):
                    return frame

    def mark(self) -> int:
        """A position in the frames read so far, for `find(..., since=mark)`."""
        return len(self.seen)

    async def find(self, pred: Callable[[Frame], bool], since: int = 0,
                   within: float = WAIT_S) -> Frame:
        """The first frame satisfying `pred` among those read since `since` (a request
        may have read past it while waiting for its result), else the next one to come."""
        for frame in self.seen[since:]:
            if pred(frame):
                return frame
        return await self.wait_for(pred, within)

    async def request(self, op: str, **fields: Any) -> Frame:
        """Send a command with a fresh id; return its result frame."""
        cid = next(self._ids) + 1000
        await self.send({"op": op, "id": cid, **fields})
        return await self.wait_for(lambda f: f.get("type") == "result" and f.get("id") == cid)

    async def ok(self, op: str, **fields: Any) -> Any:
        """A command that must succeed; returns its data."""
        res = await self.request(op, **fields)
        assert res["ok"] is True, res
        return res["data"]

    async def closed(self, within: float = WAIT_S) -> ConnectionClosed:
        """Read until the server closes; returns the exception (with `.rcvd`)."""
        try:
            async with asyncio.timeout(within):
                while True:
                    raw = await self.ws.recv()
                    self.seen.append(json.loads(raw))
        except ConnectionClosed as exc:
            return exc
        raise AssertionError("unreachable")


async def until(cond: Callable[[], bool], within: float = WAIT_S) -> None:
    """Wait (bounded, wall clock) until the server's own tasks have reached a state the
    test can only observe, such as a registry entry gone after a close."""
    step = 0.005
    for _ in range(int(within / step)):
        if cond():
            return
        await asyncio.sleep(step)
    raise AssertionError(f"not reached within {within} s")


def close_code(exc: ConnectionClosed) -> int | None:
    return exc.rcvd.code if exc.rcvd is not None else None


ServerFactory = Callable[..., Awaitable[OpsServer]]
ClientFactory = Callable[..., Awaitable[Client]]


@pytest.fixture
def tokens() -> Tokens:
    return Tokens(operator=OPERATOR, viewer=VIEWER)


@pytest.fixture
async def serve(tokens: Tokens, make_runtime: RuntimeFactory) -> AsyncIterator[ServerFactory]:
    """Start `OpsServer`s on 127.0.0.1:0 (tick 0.02 s); all are stopped afterwards,
    before the runtimes (which is why this fixture depends on `make_runtime`)."""
    servers: list[OpsServer] = []

    async def start(rt: Runtime, **options: Any) -> OpsServer:
        options.setdefault("tick_s", TICK_S)
        server = OpsServer(rt, tokens, "127.0.0.1", 0, **options)
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in reversed(servers):
        await server.stop()


@pytest.fixture
async def client(serve: ServerFactory) -> AsyncIterator[ClientFactory]:
    """Open real WebSocket clients on a URL; all are closed afterwards, before the
    servers stop."""
    opened: list[ClientConnection] = []

    async def open_client(url: str, token: str | None = None, **kw: Any) -> Client:
        ws = await connect(url, open_timeout=WAIT_S, **kw)
        opened.append(ws)
        c = Client(ws)
        if token is not None:
            welcome, snapshot = await c.hello(token)
            assert welcome["type"] == "welcome", welcome
            assert snapshot["type"] == "snapshot", snapshot
        return c

    yield open_client
    await asyncio.gather(*(ws.close() for ws in opened), return_exceptions=True)
