"""Object WebSockets over a real server: the live dashboard accepts viewers, broadcasts,
hibernates while its sockets stay open, wakes on a message with its attachments
intact, answers the auto-response without waking, and prunes silent viewers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from alarmtop.core import DurableObject, Runtime, VirtualClock
from alarmtop.core.kernel.events import Subscription
from alarmtop.core.kernel.objects.sockets import HibernatableWebSocket
from alarmtop.examples.dashboard import LiveDashboard
from alarmtop.server.app import OpsServer
from alarmtop.server.wire import MAX_FRAME_BYTES
from tests.conftest import START_MS, RuntimeFactory
from tests.server.conftest import WAIT_S, ServerFactory, until

KEY = ("LiveDashboard", "main")
Opener = Callable[..., Awaitable[ClientConnection]]


class Picky(DurableObject):
    """Accepts only connections whose path carries ?ok; refuses the rest by not accepting."""

    async def web_socket_connect(self, ws: HibernatableWebSocket,
                                 request: dict[str, Any]) -> None:
        if request["path"].endswith("?ok"):
            self.ctx.accept_web_socket(ws, tags=["ok"])
            await ws.send("welcome")


class Exploding(DurableObject):
    """Raises while connecting."""

    async def web_socket_connect(self, ws: HibernatableWebSocket,
                                 request: dict[str, Any]) -> None:
        raise RuntimeError("no sockets today")


@pytest.fixture
async def opener() -> AsyncIterator[Opener]:
    """Open raw WebSocket clients to object routes; all closed afterwards."""
    opened: list[ClientConnection] = []

    async def open_(server: OpsServer, path: str) -> ClientConnection:
        ws = await connect(f"ws://127.0.0.1:{server.port}{path}", open_timeout=WAIT_S)
        opened.append(ws)
        return ws

    yield open_
    await asyncio.gather(*(ws.close() for ws in opened), return_exceptions=True)


async def recv(ws: ClientConnection) -> str:
    msg = await asyncio.wait_for(ws.recv(), WAIT_S)
    assert isinstance(msg, str)
    return msg


async def close_code_of(ws: ClientConnection) -> int | None:
    with pytest.raises(ConnectionClosed) as info:
        async with asyncio.timeout(WAIT_S):
            while True:
                await ws.recv()
    return info.value.rcvd.code if info.value.rcvd else None


async def dashboard(make_runtime: RuntimeFactory, serve: ServerFactory,
                    **options: Any) -> tuple[Runtime, OpsServer]:
    rt = await make_runtime(LiveDashboard, Picky, Exploding, **options)
    return rt, await serve(rt)


async def barrier(rt: Runtime, name: str = "main") -> int:
    """Wait until the object's socket events have finished; returns its viewer count.

    Socket events run on the server's tasks, which the virtual clock does not track;
    an RPC queues behind them (one event at a time per object), so once it returns
    they are done and the clock can be moved without racing them.
    """
    return int(await rt.get(LiveDashboard, name).viewers())


def types_of(sub: Subscription) -> list[str]:
    return [e.type for e in sub.drain()]


async def test_connect_is_accepted_with_the_count(make_runtime: RuntimeFactory,
                                                  serve: ServerFactory, opener: Opener) -> None:
    """A viewer connecting to /objects/LiveDashboard/main is accepted by the object (tag
    "viewer"), receives "count 0", and the prune alarm is armed 60 s ahead."""
    rt, server = await dashboard(make_runtime, serve)
    ws = await opener(server, "/objects/LiveDashboard/main")
    assert await recv(ws) == "count 0"
    assert await rt.get(LiveDashboard, "main").viewers() == 1
    assert rt.sockets.count(KEY) == 1 and rt.sockets.total() == 1
    status = await rt.alarm(LiveDashboard, "main")
    assert status is not None and status.next_attempt_ms == START_MS + 60_000


async def test_bump_is_broadcast_to_every_viewer(make_runtime: RuntimeFactory,
                                                 serve: ServerFactory, opener: Opener) -> None:
    """"bump" from one viewer updates the stored count and is broadcast to both."""
    _rt, server = await dashboard(make_runtime, serve)
    a = await opener(server, "/objects/LiveDashboard/main")
    b = await opener(server, "/objects/LiveDashboard/main")
    assert await recv(a) == "count 0" and await recv(b) == "count 0"
    await a.send("bump")
    assert await recv(a) == "count 1" and await recv(b) == "count 1"
    await b.send("bump")
    assert await recv(a) == "count 2" and await recv(b) == "count 2"
    other = await opener(server, "/objects/LiveDashboard/other")
    assert await recv(other) == "count 0"  # objects are separate


async def test_hibernates_with_sockets_open_and_a_message_wakes_it(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        opener: Opener) -> None:
    """The object hibernates (hibernate_after=1) while two sockets stay open; a "whoami"
    wakes it (object.woke) and the attachment written at connect survived: it answers
    the joined time given at connect. The other viewer's attachment is its own."""
    rt, server = await dashboard(make_runtime, serve, hibernate_after=1)
    a = await opener(server, "/objects/LiveDashboard/main")
    assert await recv(a) == "count 0"
    await barrier(rt)
    await clock.advance(5)
    b = await opener(server, "/objects/LiveDashboard/main")
    assert await recv(b) == "count 0"
    assert await barrier(rt) == 2
    sub = rt.events.subscribe()
    await clock.advance(2)
    assert KEY not in rt.resident_objects()
    assert "object.hibernated" in types_of(sub)
    assert rt.sockets.count(KEY) == 2 and a.close_code is None and b.close_code is None

    await a.send("whoami")
    assert await recv(a) == f"joined {START_MS}"
    assert "object.woke" in types_of(sub)
    assert KEY in rt.resident_objects()
    await b.send("whoami")
    assert await recv(b) == f"joined {START_MS + 5000}"


async def test_state_written_before_hibernation_is_there_after(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        opener: Opener) -> None:
    """A bump after hibernation continues from the stored count and still reaches every
    viewer: the sockets were not lost with the instance."""
    rt, server = await dashboard(make_runtime, serve, hibernate_after=1)
    a = await opener(server, "/objects/LiveDashboard/main")
    b = await opener(server, "/objects/LiveDashboard/main")
    assert await recv(a) == "count 0" and await recv(b) == "count 0"
    await a.send("bump")
    assert await recv(a) == "count 1" and await recv(b) == "count 1"
    await barrier(rt)
    await clock.advance(2)
    assert KEY not in rt.resident_objects()
    await b.send("bump")
    assert await recv(a) == "count 2" and await recv(b) == "count 2"


async def test_auto_response_does_not_wake_the_object(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        opener: Opener) -> None:
    """"ping" is answered "pong" by the server while the object sleeps: no object.woke
    event, still not resident; and the answer is recorded as a sign of life."""
    rt, server = await dashboard(make_runtime, serve, hibernate_after=1)
    ws = await opener(server, "/objects/LiveDashboard/main")
    assert await recv(ws) == "count 0"
    await barrier(rt)
    await clock.advance(2)
    assert KEY not in rt.resident_objects()
    sub = rt.events.subscribe()
    await clock.advance(10)
    for _ in range(3):
        await ws.send("ping")
        assert await recv(ws) == "pong"
    await clock.advance(0)
    assert "object.woke" not in types_of(sub)
    assert KEY not in rt.resident_objects()
    (handle,) = rt.sockets.get(KEY)
    assert rt.sockets.auto_response_timestamp(handle.id) == START_MS + 12_000
    # "Ping" is not the request text: it goes to the object, which wakes.
    await ws.send("Ping")
    await ws.send("whoami")
    assert await recv(ws) == f"joined {START_MS}"
    assert "object.woke" in types_of(sub)


async def test_alarm_prunes_a_silent_viewer_and_stops_rearming(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        opener: Opener) -> None:
    """Every 60 s of virtual time the alarm closes viewers silent for over a minute (the
    client sees 1001); a viewer that keeps talking, or pinging, stays. Once nobody is
    connected the alarm is not re-armed."""
    rt, server = await dashboard(make_runtime, serve)
    silent = await opener(server, "/objects/LiveDashboard/main")
    talker = await opener(server, "/objects/LiveDashboard/main")
    pinger = await opener(server, "/objects/LiveDashboard/main")
    for ws in (silent, talker, pinger):
        assert await recv(ws) == "count 0"
    assert await barrier(rt) == 3
    for _ in range(4):  # 4 x 30 s: the talker and pinger show life, the silent one does not
        await clock.advance(30)
        await talker.send("whoami")
        assert (await recv(talker)).startswith("joined ")
        await pinger.send("ping")
        assert await recv(pinger) == "pong"
        await barrier(rt)
    await clock.advance(1)
    assert await close_code_of(silent) == 1001
    assert talker.close_code is None and pinger.close_code is None
    await until(lambda: rt.sockets.count(KEY) == 2)
    assert await barrier(rt) == 2
    status = await rt.alarm(LiveDashboard, "main")
    assert status is not None and status.state == "pending"

    await talker.close()
    await pinger.close()
    await until(lambda: rt.sockets.count(KEY) == 0)
    assert await barrier(rt) == 0  # and their close events have run
    await clock.advance(61)  # the next prune finds nobody and does not re-arm
    assert await rt.alarm(LiveDashboard, "main") is None
    await clock.advance(600)
    assert await rt.alarm(LiveDashboard, "main") is None


async def test_lone_silent_viewer_is_pruned_and_the_alarm_ends(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        opener: Opener) -> None:
    """A single viewer that says nothing is closed 1001 within two prune rounds, and then
    no alarm stays armed for an empty dashboard."""
    rt, server = await dashboard(make_runtime, serve)
    ws = await opener(server, "/objects/LiveDashboard/main")
    assert await recv(ws) == "count 0"
    await barrier(rt)
    await clock.advance(121)
    assert await close_code_of(ws) == 1001
    await clock.advance(61)
    assert await rt.alarm(LiveDashboard, "main") is None
    assert rt.sockets.total() == 0


async def test_silent_viewer_is_pruned_at_the_first_prune(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        opener: Opener) -> None:
    """A viewer silent since it joined is closed (1001) by the prune 60 s later."""
    rt, server = await dashboard(make_runtime, serve)
    ws = await opener(server, "/objects/LiveDashboard/main")
    assert await recv(ws) == "count 0"
    await barrier(rt)
    await clock.advance(60)
    await until(lambda: rt.sockets.count(KEY) == 0)


async def test_unknown_class_is_closed_1008(make_runtime: RuntimeFactory,
                                            serve: ServerFactory, opener: Opener) -> None:
    """A route to a class that is not registered is closed with 1008; so is an invalid
    object name; the server keeps serving the dashboard."""
    _rt, server = await dashboard(make_runtime, serve)
    ws = await opener(server, "/objects/NoSuchClass/x")
    assert await close_code_of(ws) == 1008
    ws = await opener(server, "/objects/LiveDashboard/")
    assert await close_code_of(ws) == 1008
    ws = await opener(server, "/objects/LiveDashboard/bad%01name")
    assert await close_code_of(ws) == 1008
    good = await opener(server, "/objects/LiveDashboard/main")
    assert await recv(good) == "count 0"


async def test_object_that_does_not_accept_closes_1008(make_runtime: RuntimeFactory,
                                                       serve: ServerFactory,
                                                       opener: Opener) -> None:
    """An object that does not call accept_web_socket refuses the connection (1008) and
    leaves nothing registered; one that accepts gets its socket."""
    rt, server = await dashboard(make_runtime, serve)
    ws = await opener(server, "/objects/Picky/p")
    assert await close_code_of(ws) == 1008
    assert rt.sockets.total() == 0
    ok = await opener(server, "/objects/Picky/p?ok")
    assert await recv(ok) == "welcome"
    assert rt.sockets.count(("Picky", "p")) == 1


async def test_object_that_raises_while_connecting_closes_1011(
        make_runtime: RuntimeFactory, serve: ServerFactory, opener: Opener) -> None:
    """An exception in web_socket_connect closes the socket with 1011 and registers
    nothing."""
    rt, server = await dashboard(make_runtime, serve)
    ws = await opener(server, "/objects/Exploding/e")
    assert await close_code_of(ws) == 1011
    assert rt.sockets.total() == 0


async def test_oversize_message_closes_1009_and_unregisters(
        make_runtime: RuntimeFactory, serve: ServerFactory, opener: Opener) -> None:
    """Object sockets have the same 1 MiB frame limit: a bigger message closes that socket
    with 1009, the registry forgets it, and the other viewer carries on."""
    rt, server = await dashboard(make_runtime, serve)
    other = await opener(server, "/objects/LiveDashboard/main")
    big = await connect(f"ws://127.0.0.1:{server.port}/objects/LiveDashboard/main",
                        open_timeout=WAIT_S, max_size=None)
    try:
        assert await recv(other) == "count 0" and await recv(big) == "count 0"
        with contextlib.suppress(ConnectionClosed):
            await big.send("x" * (MAX_FRAME_BYTES + 1))
        assert await close_code_of(big) == 1009
    finally:
        await big.close()
    await until(lambda: rt.sockets.count(KEY) == 1)
    await other.send("bump")
    assert await recv(other) == "count 1"


async def test_socket_events_are_announced(make_runtime: RuntimeFactory,
                                           clock: VirtualClock, serve: ServerFactory,
                                           opener: Opener) -> None:
    """socket.opened and socket.closed are events (with the object), and the registry
    forgets a socket once its client goes."""
    rt, server = await dashboard(make_runtime, serve)
    sub = rt.events.subscribe("socket.")
    ws = await opener(server, "/objects/LiveDashboard/main")
    assert await recv(ws) == "count 0"
    await ws.close()
    await until(lambda: rt.sockets.total() == 0)
    events = sub.drain()
    assert [e.type for e in events] == ["socket.opened", "socket.closed"]
    assert all(e.data["object"] == "LiveDashboard/main" for e in events)
    assert events[1].data["code"] == 1000
