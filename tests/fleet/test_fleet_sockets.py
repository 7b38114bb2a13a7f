"""Object sockets on a fleet: a client connected to node a, for an object whose shard
node b holds, is served as if it had connected to b. Real PostgreSQL, real ops
servers on 127.0.0.1 and real WebSocket clients."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from alarmtop.core import DurableObject, Runtime, VirtualClock
from alarmtop.core.fleet.links import NodeClient
from alarmtop.core.fleet.sockets import CLOSE_MOVED, LINK_GONE, MOVED, NODE_GONE
from alarmtop.core.kernel.objects.sockets import HibernatableWebSocket
from alarmtop.core.model.errors import InvalidArgument, UnknownSocket
from alarmtop.server.app import OpsServer
from alarmtop.server.auth import Tokens
from alarmtop.server.objects import ObjectSocketLimits
from tests.fleet.conftest import (
    Counter,
    NodeFactory,
    backend_of,
    balance,
    name_on,
    prove,
    until,
)

WAIT_S = 10.0


class Room(DurableObject):
    """Accepts members (unless asked not to), echoes naming the node it runs on,
    broadcasts, closes on request, fails on request, and keeps its close events."""

    def __init__(self, ctx: Any, env: Any) -> None:
        super().__init__(ctx, env)
        ctx.set_web_socket_auto_response(("ping", "pong"))

    async def web_socket_connect(self, ws: HibernatableWebSocket,
                                 request: dict[str, Any]) -> None:
        if request["path"].endswith("?no"):
            return
        self.ctx.accept_web_socket(ws, tags=["member"])
        ws.serialize_attachment({"via": request["address"].rsplit(":", 1)[0],
                                 "joined_ms": self.ctx.now_ms()})
        await ws.send(f"welcome {len(self.ctx.get_web_sockets())} on {self.env}")

    async def web_socket_message(self, ws: HibernatableWebSocket, message: str) -> None:
        if message == "all":
            members = self.ctx.get_web_sockets("member")
            for member in members:
                await member.send(f"all {len(members)} on {self.env}")
        elif message == "bye":
            await ws.close(4000, "bye from the object")
        elif message == "boom":
            raise RuntimeError("the handler failed")
        elif message == "bump":
            count = int(await self.ctx.storage.get("count") or 0) + 1
            await self.ctx.storage.put("count", count)
            for member in self.ctx.get_web_sockets("member"):
                await member.send(f"count {count}")
        elif message == "joined":
            await ws.send(f"joined {ws.deserialize_attachment()['joined_ms']}")
        else:
            await ws.send(f"echo {message} on {self.env}")

    async def web_socket_close(self, ws: HibernatableWebSocket, code: int, reason: str,
                               clean: bool) -> None:
        closes = list(await self.ctx.storage.get("closes") or [])
        await self.ctx.storage.put("closes", [*closes, [code, reason]])

    async def closes(self) -> list[list[Any]]:
        return list(await self.ctx.storage.get("closes") or [])

    async def count(self) -> int:
        return int(await self.ctx.storage.get("count") or 0)

    async def members(self) -> int:
        return len(self.ctx.get_web_sockets("member"))


Opener = Callable[[OpsServer, str], Awaitable[ClientConnection]]
TOKENS = Tokens(operator="op-token", viewer="viewer-token")


@pytest.fixture
async def opener() -> AsyncIterator[Opener]:
    opened: list[ClientConnection] = []

    async def open_(server: OpsServer, path: str) -> ClientConnection:
        ws = await connect(f"ws://127.0.0.1:{server.port}{path}", open_timeout=WAIT_S)
        opened.append(ws)
        return ws

    yield open_
    await asyncio.gather(*(ws.close() for ws in opened), return_exceptions=True)


@pytest.fixture
async def servers() -> AsyncIterator[Callable[..., Awaitable[OpsServer]]]:
    started: list[OpsServer] = []

    async def serve(rt: Runtime, **options: Any) -> OpsServer:
        server = OpsServer(rt, TOKENS, "127.0.0.1", 0, tick_s=0.05, **options)
        await server.start()
        started.append(server)
        return server

    yield serve
    for server in reversed(started):
        await server.stop()


async def recv(ws: ClientConnection) -> str:
    msg = await asyncio.wait_for(ws.recv(), WAIT_S)
    assert isinstance(msg, str)
    return msg


async def closed_with(ws: ClientConnection) -> tuple[int | None, str | None]:
    with pytest.raises(ConnectionClosed) as info:
        async with asyncio.timeout(WAIT_S):
            while True:
                await ws.recv()
    rcvd = info.value.rcvd
    return (rcvd.code, rcvd.reason) if rcvd else (None, None)


async def fleet(node: NodeFactory, **options: Any) -> tuple[Runtime, Runtime, str]:
    """Nodes a and b, and the name of a Room whose shard b holds."""
    a = await node("a", Room, Counter, env="a", **options)
    b = await node("b", Room, Counter, env="b", **options)
    await balance(a, b)
    return a, b, name_on(b, "Room")


async def metric(server: OpsServer, name: str) -> float:
    """A gauge of the server's /metrics, as a scraper reads it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    await writer.drain()
    body = (await asyncio.wait_for(reader.read(), WAIT_S)).decode()
    writer.close()
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


async def test_a_socket_through_a_reaches_its_object_on_b(
        node: NodeFactory, servers: Callable[..., Awaitable[OpsServer]],
        opener: Opener) -> None:
    a, b, name = await fleet(node)
    key = ("Room", name)
    server_a, server_b = await servers(a), await servers(b)
    ws = await opener(server_a, f"/objects/Room/{name}")
    assert await recv(ws) == "welcome 1 on b"  # web_socket_connect ran on b
    for text in ("one", "two", "three"):
        await ws.send(text)
    assert [await recv(ws) for _ in range(3)] == [f"echo {t} on b" for t in
                                                  ("one", "two", "three")]
    # The owner's registry holds it (its object lists it); the edge's holds nothing.
    assert b.sockets.count(key) == 1 and a.sockets.total() == 0
    assert await a.get("Room", name).members() == 1
    # Each node's metrics: b counts it among its sockets, a among those it relays.
    edge, owner = server_a.objects.relayed, await metric(server_b, "alarmtop_object_sockets")
    assert (edge, owner) == (1, 1)
    assert await metric(server_a, "alarmtop_relayed_object_sockets") == 1
    assert await metric(server_a, "alarmtop_object_sockets") == 0
    assert key in b.resident_objects() and key not in a.resident_objects()


async def test_broadcast_reaches_sockets_through_both_nodes(
        node: NodeFactory, servers: Callable[..., Awaitable[OpsServer]],
        opener: Opener) -> None:
    a, b, name = await fleet(node)
    via_a = await opener(await servers(a), f"/objects/Room/{name}")
    assert await recv(via_a) == "welcome 1 on b"
    on_b = await opener(await servers(b), f"/objects/Room/{name}")
    assert await recv(on_b) == "welcome 2 on b"
    await via_a.send("all")
    assert await recv(via_a) == "all 2 on b" and await recv(on_b) == "all 2 on b"
    await on_b.send("all")
    assert await recv(via_a) == "all 2 on b" and await recv(on_b) == "all 2 on b"


async def test_the_object_hibernates_on_b_while_the_socket_through_a_stays(
        node: NodeFactory, clock: VirtualClock, servers: Callable[..., Awaitable[OpsServer]],
        opener: Opener) -> None:
    a, b, name = await fleet(node, hibernate_after=1)
    key = ("Room", name)
    ws = await opener(await servers(a), f"/objects/Room/{name}")
    assert await recv(ws) == "welcome 1 on b"
    joined = clock.now_ms()
    assert await a.get("Room", name).members() == 1  # its events have run
    await clock.advance(3)
    await until(lambda: key not in b.resident_objects(), what="b hibernating the object")
    assert ws.close_code is None and b.sockets.count(key) == 1
    sub = b.events.subscribe("object.")
    # The auto-response is answered by b's registry, without waking the object.
    for _ in range(2):
        await ws.send("ping")
        assert await recv(ws) == "pong"
    assert key not in b.resident_objects()
    assert [e.type for e in sub.drain()] == []
    (handle,) = b.sockets.get(key)
    assert b.sockets.auto_response_timestamp(handle.id) == clock.now_ms()
    # A message wakes it on b, with the attachment written at connect.
    await ws.send("joined")
    assert await recv(ws) == f"joined {joined}"
    assert "object.woke" in [e.type for e in sub.drain()]
    assert key in b.resident_objects() and key not in a.resident_objects()


async def test_closes_from_the_client_and_from_the_object(
        node: NodeFactory, servers: Callable[..., Awaitable[OpsServer]],
        opener: Opener) -> None:
    a, b, name = await fleet(node)
    key = ("Room", name)
    server = await servers(a)
    leaving = await opener(server, f"/objects/Room/{name}")
    assert await recv(leaving) == "welcome 1 on b"
    await leaving.close(4001, "client leaves")
    await until(lambda: b.sockets.count(key) == 0, what="b forgetting the socket")
    await until(lambda: _has(b, name, [4001, "client leaves"]), what="the close event on b")

    told = await opener(server, f"/objects/Room/{name}")
    assert await recv(told) == "welcome 1 on b"
    await told.send("bye")
    assert await closed_with(told) == (4000, "bye from the object")
    await until(lambda: b.sockets.count(key) == 0, what="b forgetting the socket")
    await until(lambda: _has(b, name, [4000, "bye from the object"]),
                what="the close event on b")

    failing = await opener(server, f"/objects/Room/{name}")
    assert await recv(failing) == "welcome 1 on b"
    await failing.send("boom")
    assert await closed_with(failing) == (1011, "the handler failed")
    await until(lambda: b.sockets.count(key) == 0, what="b forgetting the socket")


async def _has(rt: Runtime, name: str, close: list[Any]) -> bool:
    return close in await rt.get("Room", name).closes()


async def test_the_owner_stopping_closes_the_relayed_socket_and_a_takes_over(
        node: NodeFactory, servers: Callable[..., Awaitable[OpsServer]],
        opener: Opener) -> None:
    a, b, name = await fleet(node)
    server = await servers(a)
    ws = await opener(server, f"/objects/Room/{name}")
    assert await recv(ws) == "welcome 1 on b"
    await b.stop()
    assert await closed_with(ws) == (CLOSE_MOVED, MOVED)
    # The client reconnects through a: the shard's next owner (a, now) serves it.
    again = await opener(server, f"/objects/Room/{name}")
    assert await recv(again) == "welcome 1 on a"
    await again.send("hi")
    assert await recv(again) == "echo hi on a"


async def test_the_shard_moving_closes_the_objects_sockets(
        node: NodeFactory, servers: Callable[..., Awaitable[OpsServer]],
        opener: Opener) -> None:
    """Handed over to a, the object's sockets on b (relayed, and b's own) are closed
    1012; a client reconnecting through b reaches it on a."""
    a, b, name = await fleet(node)
    key = ("Room", name)
    server_b = await servers(b)
    via_a = await opener(await servers(a), f"/objects/Room/{name}")
    assert await recv(via_a) == "welcome 1 on b"
    on_b = await opener(server_b, f"/objects/Room/{name}")
    assert await recv(on_b) == "welcome 2 on b"
    shard = backend_of(b).shard_of(key)
    await backend_of(b).hand_over([shard], "a")
    assert await closed_with(via_a) == (CLOSE_MOVED, MOVED)
    assert await closed_with(on_b) == (CLOSE_MOVED, MOVED)
    await until(lambda: b.sockets.total() == 0, what="b forgetting the sockets")
    assert await backend_of(a).claim_now(shard)  # a takes the shard it was offered
    again = await opener(server_b, f"/objects/Room/{name}")
    assert await recv(again) == "welcome 1 on a"
    assert a.sockets.count(key) == 1 and b.sockets.total() == 0


async def test_the_node_link_dropping_closes_both_sides(
        node: NodeFactory, servers: Callable[..., Awaitable[OpsServer]],
        opener: Opener) -> None:
    """As when b dies: the connection between the nodes ends. The client on a is closed
    1012 (reconnect); b forgets the socket and its object hears an unclean close."""
    a, b, name = await fleet(node)
    key = ("Room", name)
    ws = await opener(await servers(a), f"/objects/Room/{name}")
    assert await recv(ws) == "welcome 1 on b"
    assert a.node is not None
    router = a.node.routing.router
    (client,) = router._clients.values()  # type: ignore[attr-defined]
    assert client._conn is not None
    client._conn.transport.abort()
    assert await closed_with(ws) == (CLOSE_MOVED, NODE_GONE)
    await until(lambda: b.sockets.count(key) == 0, what="b forgetting the socket")
    await until(lambda: _has(b, name, [1006, LINK_GONE]), what="the close event on b")


async def test_refused_sockets_create_nothing_on_the_owner(
        node: NodeFactory, servers: Callable[..., Awaitable[OpsServer]],
        opener: Opener) -> None:
    a, b, name = await fleet(node)
    counter = name_on(b, "Counter")
    server = await servers(a, object_sockets=ObjectSocketLimits(max_per_address=1))
    # Not opted in: refused at a's edge; b is never asked.
    ws = await opener(server, f"/objects/Counter/{counter}")
    assert (await closed_with(ws))[0] == 1008
    # Not accepted by the object (on b): refused, nothing kept there.
    ws = await opener(server, f"/objects/Room/{name}?no")
    assert await closed_with(ws) == (1008, "the object did not accept the connection")
    assert b.sockets.total() == 0 and a.sockets.total() == 0
    assert ("Counter", counter) not in b.resident_objects()
    assert b.node is not None and b.node.owned.relayed() == 0
    # a's caps hold for relayed sockets: one per client address here.
    first = await opener(server, f"/objects/Room/{name}")
    assert await recv(first) == "welcome 1 on b"
    second = await opener(server, f"/objects/Room/{name}")
    assert (await closed_with(second))[0] == 1013
    assert b.sockets.total() == 1


async def test_the_owner_checks_what_it_is_relayed(node: NodeFactory) -> None:
    """Malformed socket requests are refused with a clear error and register nothing;
    a frame for a socket the owner does not hold says so."""
    _a, b, name = await fleet(node)
    backend = backend_of(b)
    assert backend.address is not None
    peer = NodeClient(backend.address, "tester", backend.cluster_secret)

    def ignore(frame: dict[str, Any] | None) -> None:
        pass
    good = {"path": f"/objects/Room/{name}", "address": "127.0.0.1:1", "headers": {}}
    try:
        for fields, match in (
                ({"cls": "Room", "name": name, "socket": "", "request": good}, "socket"),
                ({"cls": "Room", "name": name, "socket": "r1", "request": {"path": 1}},
                 "request is"),
                ({"cls": "Counter", "name": name, "socket": "r1", "request": good},
                 "takes no WebSockets")):
            with pytest.raises(InvalidArgument, match=match):
                await peer.open_stream("r1", ignore, "socket_open", timeout_s=5, **fields)
        assert b.sockets.total() == 0 and ("Room", name) not in b.resident_objects()
        await peer.open_stream("r1", ignore, "socket_open", timeout_s=5, cls="Room",
                               name=name, socket="r1", request=good)
        with pytest.raises(UnknownSocket):
            await peer.request("socket_message", timeout_s=5, socket="nope", text="x")
        with pytest.raises(InvalidArgument, match="code is"):
            await peer.stream_request("r1", "socket_close", 5, socket="r1", code="x",
                                      reason="", clean=True)
        assert b.sockets.total() == 1
        await peer.stream_request("r1", "socket_close", 5, socket="r1", code=1000,
                                  reason="done", clean=True)
        assert b.sockets.total() == 0
    finally:
        await peer.close()


async def test_a_node_refuses_a_protocol_it_does_not_speak(node: NodeFactory) -> None:
    _a, b, _name = await fleet(node)
    backend = backend_of(b)
    assert backend.address is not None
    async with connect(backend.address) as conn:
        await prove(conn, backend.cluster_secret, "future", 99)
        code, reason = await closed_with(conn)
        assert code == 1008 and reason is not None and "protocol 99" in reason
    # A node of protocol 1 (no protocol in its hello) may call, but has no sockets.
    async with connect(backend.address) as conn:
        await prove(conn, backend.cluster_secret, "old", None)
        assert json.loads(await recv(conn))["op"] == "welcome"
        await conn.send(json.dumps({"id": 1, "op": "socket_message", "socket": "r",
                                    "text": "x"}))
        reply = json.loads(await recv(conn))
        assert reply["ok"] is False and "protocol 2" in reply["error"]["message"]
        await conn.send("[1, 2]")
        reply = json.loads(await recv(conn))
        assert reply["ok"] is False and reply["error"]["type"] == "InvalidArgument"


async def test_one_event_at_a_time_across_the_nodes(
        node: NodeFactory, servers: Callable[..., Awaitable[OpsServer]],
        opener: Opener) -> None:
    """Bumps from a socket through a and one on b, sent at once, run one at a time on
    b: no count is lost or repeated, and both members see every count in order."""
    a, b, name = await fleet(node)
    via_a = await opener(await servers(a), f"/objects/Room/{name}")
    on_b = await opener(await servers(b), f"/objects/Room/{name}")
    assert (await recv(via_a)).startswith("welcome") and (await recv(on_b)).startswith(
        "welcome")
    n = 20
    await asyncio.gather(*(ws.send("bump") for ws in (via_a, on_b) for _ in range(n)))
    for ws in (via_a, on_b):
        assert [await recv(ws) for _ in range(2 * n)] == [f"count {i}"
                                                          for i in range(1, 2 * n + 1)]


async def test_the_edge_paces_a_relayed_socket(
        node: NodeFactory, servers: Callable[..., Awaitable[OpsServer]],
        opener: Opener) -> None:
    """Past a's rate limit the client is closed 1008 at a; b ran at most the burst."""
    a, b, name = await fleet(node)
    server = await servers(a, object_sockets=ObjectSocketLimits(rate_per_s=0.1, burst=3))
    ws = await opener(server, f"/objects/Room/{name}")
    assert await recv(ws) == "welcome 1 on b"
    for _ in range(10):
        try:
            await ws.send("bump")
        except ConnectionClosed:
            break
    code, _reason = await closed_with(ws)
    assert code == 1008
    await until(lambda: b.sockets.total() == 0, what="b forgetting the socket")
    assert 1 <= int(await a.get("Room", name).count()) <= 3
