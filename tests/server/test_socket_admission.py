"""Which object sockets the server lets in, over a real server with real clients: only
classes that define `web_socket_connect` (never the execution class), browsers only
from allowed origins, a token when the class needs one, caps per address and in total,
a message rate per socket. Every refusal is a close code, a reason and one log line, and
happens before any object wakes: no constructor runs and no database file appears, even
for a class whose constructor writes storage."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from alarmtop.core import DurableObject, Runtime
from alarmtop.core.durable import DurableContext, durable_execution
from alarmtop.core.kernel.objects.durable_object import ObjectContext
from alarmtop.core.kernel.objects.sockets import HibernatableWebSocket
from alarmtop.examples.dashboard import LiveDashboard
from alarmtop.server.app import OpsServer
from alarmtop.server.objects import ObjectSocketLimits
from tests.conftest import RuntimeFactory
from tests.server.conftest import WAIT_S, ServerFactory, until

Opener = Callable[..., Awaitable[ClientConnection]]
WOKEN: list[str] = []  # constructors run, by object name


class Plain(DurableObject):
    """Takes no sockets; its constructor writes storage (so a wake makes a database)."""

    def __init__(self, ctx: ObjectContext, env: Any) -> None:
        super().__init__(ctx, env)
        WOKEN.append(ctx.id)
        ctx.block_concurrency_while(lambda: ctx.storage.put("woke", True))


class Eager(DurableObject):
    """Takes sockets; its constructor writes storage too. It tells the client what it
    saw of the request (the token must not be in it)."""

    def __init__(self, ctx: ObjectContext, env: Any) -> None:
        super().__init__(ctx, env)
        WOKEN.append(ctx.id)
        ctx.block_concurrency_while(lambda: ctx.storage.put("woke", True))

    async def web_socket_connect(self, ws: HibernatableWebSocket,
                                 request: dict[str, Any]) -> None:
        self.ctx.accept_web_socket(ws)
        auth = [k for k in request["headers"] if k.lower() == "authorization"]
        await ws.send(f"path={request['path']} auth={auth}")

    async def web_socket_message(self, ws: HibernatableWebSocket, message: str) -> None:
        if message.startswith("close "):
            await ws.close(4000, message[len("close "):])
        else:
            await ws.send(message)


class Guarded(Eager):
    """Takes sockets with the token in $ALARMTOP_TEST_GUARDED_TOKEN."""

    web_socket_token_env = "ALARMTOP_TEST_GUARDED_TOKEN"


class LongWinded(DurableObject):
    """Refuses with an exception whose message is far over a close frame."""

    async def web_socket_connect(self, ws: HibernatableWebSocket,
                                 request: dict[str, Any]) -> None:
        raise RuntimeError("é" * 300)


@durable_execution(name="noop")
async def noop(event: dict[str, Any], ctx: DurableContext) -> dict[str, Any]:
    return {}


@pytest.fixture(autouse=True)
def fresh() -> None:
    WOKEN.clear()


@pytest.fixture
async def opener() -> AsyncIterator[Opener]:
    opened: list[ClientConnection] = []

    async def open_(server: OpsServer, path: str, **kw: Any) -> ClientConnection:
        ws = await connect(f"ws://127.0.0.1:{server.port}{path}", open_timeout=WAIT_S, **kw)
        opened.append(ws)
        return ws

    yield open_
    await asyncio.gather(*(ws.close() for ws in opened), return_exceptions=True)


async def start(make_runtime: RuntimeFactory, serve: ServerFactory,
                **options: Any) -> tuple[Runtime, OpsServer]:
    rt = await make_runtime(Plain, Eager, Guarded, LongWinded, LiveDashboard)
    rt.register_execution(noop)
    return rt, await serve(rt, **options)


async def closed_with(ws: ClientConnection) -> tuple[int | None, str]:
    """Read until the server closes: its (code, reason)."""
    with pytest.raises(ConnectionClosed) as info:
        async with asyncio.timeout(WAIT_S):
            while True:
                await ws.recv()
    rcvd = info.value.rcvd
    return (rcvd.code, rcvd.reason) if rcvd else (None, "")


async def recv(ws: ClientConnection) -> str:
    msg = await asyncio.wait_for(ws.recv(), WAIT_S)
    assert isinstance(msg, str)
    return msg


def object_files(data_dir: Path) -> set[Path]:
    root = data_dir / "objects"
    return {p for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "alarmtop.server" and "refused" in r.getMessage()]


async def test_a_class_without_web_socket_connect_is_refused_before_it_wakes(
        make_runtime: RuntimeFactory, serve: ServerFactory, opener: Opener, data_dir: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """Plain defines no web_socket_connect: 1008 saying so, one log line, and its
    constructor (which writes storage) never ran: no database file for it."""
    caplog.set_level(logging.WARNING, "alarmtop.server")
    rt, server = await start(make_runtime, serve)
    before = object_files(data_dir)
    ws = await opener(server, "/objects/Plain/p1")
    code, reason = await closed_with(ws)
    assert code == 1008 and "Plain takes no WebSockets" in reason
    assert WOKEN == [] and object_files(data_dir) == before
    assert not (data_dir / "objects" / "Plain").exists()
    assert rt.sockets.total() == 0 and ("Plain", "p1") not in rt.resident_objects()
    assert len(refusals(caplog)) == 1 and "Plain/p1" in refusals(caplog)[0]


async def test_the_execution_class_is_never_reachable(
        make_runtime: RuntimeFactory, serve: ServerFactory, opener: Opener, data_dir: Path) -> None:
    """Executions are objects of the class "Execution": its route is refused, and no
    execution is created or woken."""
    rt, server = await start(make_runtime, serve)
    before = object_files(data_dir)
    ws = await opener(server, "/objects/Execution/e1")
    code, reason = await closed_with(ws)
    assert code == 1008 and "Execution" in reason
    assert object_files(data_dir) == before
    assert await rt.executions.list() == []


async def test_unknown_class_does_not_list_the_registered_ones(
        make_runtime: RuntimeFactory, serve: ServerFactory, opener: Opener) -> None:
    """An unauthenticated client learns nothing of the runtime's classes."""
    _rt, server = await start(make_runtime, serve)
    code, reason = await closed_with(await opener(server, "/objects/Nope/x"))
    assert code == 1008 and "Nope" in reason and "Eager" not in reason


async def test_an_opted_in_class_is_served(make_runtime: RuntimeFactory, serve: ServerFactory,
                                           opener: Opener, data_dir: Path) -> None:
    """The same checks let an opted-in class through: it wakes and accepts."""
    rt, server = await start(make_runtime, serve)
    ws = await opener(server, "/objects/Eager/e1?x=1")
    assert await recv(ws) == "path=/objects/Eager/e1?x=1 auth=[]"
    assert WOKEN == ["e1"] and rt.sockets.count(("Eager", "e1")) == 1


async def test_origin_allow_list(make_runtime: RuntimeFactory, serve: ServerFactory,
                                 opener: Opener, data_dir: Path,
                                 caplog: pytest.LogCaptureFixture) -> None:
    """With one allowed origin: a browser from elsewhere is refused (1008, one log line,
    nothing woken, no file), on object routes and on /ops; the allowed origin and clients
    that send no Origin get in."""
    caplog.set_level(logging.WARNING, "alarmtop.server")
    _rt, server = await start(make_runtime, serve, allow_origins=["https://ops.example.com"])
    before = object_files(data_dir)
    for path in ("/objects/Eager/e1", "/ops"):
        ws = await opener(server, path, origin="https://evil.example")
        code, reason = await closed_with(ws)
        assert code == 1008 and "origin https://evil.example is not allowed" in reason
    assert WOKEN == [] and object_files(data_dir) == before
    assert len(refusals(caplog)) == 2
    ok = await opener(server, "/objects/Eager/e1", origin="https://ops.example.com")
    assert (await recv(ok)).startswith("path=")
    plain = await opener(server, "/objects/Eager/e2")  # no Origin: not a browser
    assert (await recv(plain)).startswith("path=")


async def test_no_origin_is_allowed_by_default(make_runtime: RuntimeFactory,
                                               serve: ServerFactory, opener: Opener) -> None:
    """By default every browser is refused."""
    _rt, server = await start(make_runtime, serve)
    ws = await opener(server, "/objects/Eager/e1", origin="http://127.0.0.1:8000")
    code, _ = await closed_with(ws)
    assert code == 1008 and WOKEN == []


async def test_a_class_token_from_the_environment(
        make_runtime: RuntimeFactory, serve: ServerFactory, opener: Opener, data_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Guarded names ALARMTOP_TEST_GUARDED_TOKEN: no token or a wrong one is refused
    (1008) before it wakes; the token as a bearer header or as ?token= gets in, and the
    object sees neither the header nor the token in its request."""
    monkeypatch.setenv("ALARMTOP_TEST_GUARDED_TOKEN", "s3cret")
    _rt, server = await start(make_runtime, serve)
    before = object_files(data_dir)
    for path, headers in (("/objects/Guarded/g1", {}),
                          ("/objects/Guarded/g1?token=nope", {}),
                          ("/objects/Guarded/g1", {"Authorization": "Bearer nope"})):
        ws = await opener(server, path, additional_headers=headers)
        code, reason = await closed_with(ws)
        assert code == 1008 and "token" in reason, (path, headers, reason)
    assert WOKEN == [] and object_files(data_dir) == before
    ws = await opener(server, "/objects/Guarded/g1",
                      additional_headers={"Authorization": "Bearer s3cret"})
    assert await recv(ws) == "path=/objects/Guarded/g1 auth=[]"
    ws = await opener(server, "/objects/Guarded/g1?a=1&token=s3cret&b=2")
    assert await recv(ws) == "path=/objects/Guarded/g1?a=1&b=2 auth=[]"


async def test_a_class_naming_an_unset_variable_is_closed_to_all(
        make_runtime: RuntimeFactory, serve: ServerFactory, opener: Opener,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A forgotten variable fails closed: 1011, naming the variable to set."""
    monkeypatch.delenv("ALARMTOP_TEST_GUARDED_TOKEN", raising=False)
    _rt, server = await start(make_runtime, serve)
    ws = await opener(server, "/objects/Guarded/g1?token=anything")
    code, reason = await closed_with(ws)
    assert code == 1011 and "ALARMTOP_TEST_GUARDED_TOKEN" in reason and WOKEN == []


async def test_a_token_from_the_server_options(make_runtime: RuntimeFactory,
                                               serve: ServerFactory, opener: Opener) -> None:
    """`ObjectSocketLimits(tokens={class: token})` guards a class that names no variable."""
    limits = ObjectSocketLimits(tokens={"Eager": "t0k"})
    _rt, server = await start(make_runtime, serve, object_sockets=limits)
    code, _ = await closed_with(await opener(server, "/objects/Eager/e1"))
    assert code == 1008 and WOKEN == []
    ws = await opener(server, "/objects/Eager/e1?token=t0k")
    assert await recv(ws) == "path=/objects/Eager/e1 auth=[]"


async def test_caps_per_address_and_in_total(
        make_runtime: RuntimeFactory, serve: ServerFactory, opener: Opener, data_dir: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """At most 2 sockets from one address and 3 in all: the next is closed 1013 with the
    cap it hit and one log line, wakes nothing, and a socket that leaves makes room."""
    caplog.set_level(logging.WARNING, "alarmtop.server")
    limits = ObjectSocketLimits(max_total=3, max_per_address=2)
    rt, server = await start(make_runtime, serve, object_sockets=limits)
    a1 = await opener(server, "/objects/Eager/a1")
    a2 = await opener(server, "/objects/Eager/a2")
    for ws in (a1, a2):
        assert (await recv(ws)).startswith("path=")
    code, reason = await closed_with(await opener(server, "/objects/Eager/a3"))
    assert code == 1013 and "too many sockets from 127.0.0.1" in reason
    other = {"local_addr": ("127.0.0.2", 0)}  # another client address, same machine
    b1 = await opener(server, "/objects/Eager/b1", **other)
    assert (await recv(b1)).startswith("path=")
    code, reason = await closed_with(await opener(server, "/objects/Eager/b2", **other))
    assert code == 1013 and "server full" in reason
    assert sorted(WOKEN) == ["a1", "a2", "b1"]
    assert not [p for p in object_files(data_dir) if p.stem in ("a3", "b2")]
    assert len(refusals(caplog)) == 2

    await a1.close()
    await until(lambda: server.objects.caps.total == 2)
    b2 = await opener(server, "/objects/Eager/b2", **other)
    assert (await recv(b2)).startswith("path=")
    assert rt.sockets.total() == 3


async def test_message_rate_per_socket(make_runtime: RuntimeFactory, serve: ServerFactory,
                                       opener: Opener,
                                       caplog: pytest.LogCaptureFixture) -> None:
    """Past its burst a socket is closed 1008, saying the rate, with one log line; the
    registry forgets it, and another socket on the same object carries on."""
    caplog.set_level(logging.WARNING, "alarmtop.server")
    limits = ObjectSocketLimits(rate_per_s=1.0, burst=5.0)
    rt, server = await start(make_runtime, serve, object_sockets=limits)
    calm = await opener(server, "/objects/Eager/e1")
    loud = await opener(server, "/objects/Eager/e1")
    for ws in (calm, loud):
        assert (await recv(ws)).startswith("path=")
    for i in range(20):
        try:
            await loud.send(f"m{i}")
        except ConnectionClosed:
            break
    code, reason = await closed_with(loud)
    assert code == 1008 and "more than 1 messages a second" in reason
    await until(lambda: rt.sockets.count(("Eager", "e1")) == 1)
    await calm.send("still here")
    assert await recv(calm) == "still here"
    assert len(refusals(caplog)) == 1


async def test_long_close_reasons_are_cut_to_123_bytes(
        make_runtime: RuntimeFactory, serve: ServerFactory, opener: Opener,
        caplog: pytest.LogCaptureFixture) -> None:
    """An object closing with a 400-byte reason, and one raising a 600-byte message while
    connecting: the client gets a valid close frame (at most 123 bytes, whole characters)
    and the server logs no traceback."""
    caplog.set_level(logging.INFO)
    _rt, server = await start(make_runtime, serve)
    ws = await opener(server, "/objects/Eager/e1")
    assert (await recv(ws)).startswith("path=")
    await ws.send("close " + "€" * 133)
    code, reason = await closed_with(ws)
    assert code == 4000 and reason == "€" * 41  # 123 bytes
    ws = await opener(server, "/objects/LongWinded/l1")
    code, reason = await closed_with(ws)
    assert code == 1011 and reason.startswith("object refused the connection: é")
    assert len(reason.encode()) <= 123
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
