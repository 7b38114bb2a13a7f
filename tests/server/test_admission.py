"""Connections that never show a token cannot lock operators out of `/ops`, over a real
server with real sockets: they wait in a lobby of their own (not in the clients' places),
shared fairly by address, and an operator logs in during a flood of silent WebSockets,
held or reconnecting, from another address or from the operator's own. The welcomed
clients keep their own cap, with its own message. And silent TCP sockets are counted in
the descriptor budget: in a process whose objects fill its descriptor limit, 300 of them
make no object fail to open its database (`lobby_fd_worker.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from alarmtop.server.app import MAX_PENDING, OpsServer
from tests.conftest import RuntimeFactory
from tests.server.conftest import OPERATOR, VIEWER, WAIT_S, Quiet, ServerFactory, until

ROOT = Path(__file__).resolve().parents[2]
FLOOD = 300  # more than MAX_OPS_CLIENTS (256) and than MAX_PENDING (128)
ELSEWHERE = "127.0.0.2"  # the flood's address: loopback, but not the operator's
LOGINS = 20


async def silent(server: OpsServer, host: str) -> ClientConnection | None:
    """A WebSocket on /ops from `host` that never says hello; None if the server pushed
    it out before its handshake ended."""
    try:
        return await connect(server.url, open_timeout=WAIT_S, local_addr=(host, 0))
    except (OSError, InvalidHandshake, TimeoutError):
        return None


async def silent_flood(server: OpsServer, host: str, n: int = FLOOD
                       ) -> list[ClientConnection]:
    """`n` silent WebSockets from `host`, opened 50 at a time; those still open."""
    opened: list[ClientConnection] = []
    for start in range(0, n, 50):
        batch = await asyncio.gather(*(silent(server, host) for _ in range(start,
                                                                             min(n, start + 50))))
        opened += [ws for ws in batch if ws is not None]
    return opened


async def log_in(server: OpsServer, token: str = OPERATOR) -> str:
    """Say hello from 127.0.0.1: the role welcomed, or why not."""
    try:
        async with connect(server.url, open_timeout=WAIT_S) as ws:
            await ws.send(json.dumps({"op": "hello", "token": token}))
            frame = json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))
            return str(frame.get("role") if frame["type"] == "welcome" else frame)
    except ConnectionClosed as exc:
        return f"closed {exc.rcvd.code if exc.rcvd else None}: " \
               f"{exc.rcvd.reason if exc.rcvd else ''}"


async def close_all(sockets: list[ClientConnection]) -> None:
    await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)


async def test_an_operator_gets_in_past_300_silent_websockets_from_elsewhere(
        make_runtime: RuntimeFactory, serve: ServerFactory) -> None:
    """The reported lock-out: 300 sockets that never say hello held every client place
    and the operator's logins failed with 1013 "server full". Now they wait in the lobby,
    at most MAX_PENDING of them, and each of 20 logins is welcomed."""
    server = await serve(await make_runtime(Quiet))
    flood = await silent_flood(server, ELSEWHERE)
    try:
        assert len(server.admission.lobby) <= MAX_PENDING
        assert server.admission.lobby.waiting(ELSEWHERE) == len(server.admission.lobby)
        outcomes = [await log_in(server) for _ in range(LOGINS)]
        assert outcomes == ["operator"] * LOGINS
        await until(lambda: server.clients == 0)  # each left again
    finally:
        await close_all(flood)


async def test_an_operator_gets_in_past_300_silent_websockets_from_the_same_address(
        make_runtime: RuntimeFactory, serve: ServerFactory) -> None:
    """From one address, the sockets held longest make room: a console that says hello
    at once gets in past a flood that sits, and the flood is told why it was closed."""
    server = await serve(await make_runtime(Quiet))
    flood = await silent_flood(server, "127.0.0.1")
    try:
        assert len(server.admission.lobby) <= MAX_PENDING
        assert [await log_in(server) for _ in range(LOGINS)] == ["operator"] * LOGINS
        pushed = next(ws for ws in flood if ws.close_code is not None)
        assert pushed.close_code == 1013
        assert pushed.close_reason == "server full for unauthenticated connections; retry"
    finally:
        await close_all(flood)


async def reconnecting(server: OpsServer, host: str, stop: asyncio.Event,
                       opened: list[int]) -> None:
    """One attacker: a silent socket, and another as soon as the server closes it."""
    while not stop.is_set():
        ws = await silent(server, host)
        if ws is None:
            await asyncio.sleep(0)  # refused in its handshake: straight back
            continue
        opened[0] += 1
        async with ws:
            with contextlib.suppress(ConnectionClosed):
                stopped = asyncio.ensure_future(stop.wait())
                try:
                    await asyncio.wait({stopped, asyncio.ensure_future(ws.wait_closed())},
                                       return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stopped.cancel()


# A smaller server for the churn, so that the attackers (in this test's event loop,
# beside the server) keep it full without taking all of the loop: twice as many of
# them as there are client places, four times the lobby.
SMALL = {"max_clients": 32, "max_pending": 16}
ATTACKERS = 64


@pytest.fixture
async def flood(make_runtime: RuntimeFactory, serve: ServerFactory
                ) -> AsyncIterator[tuple[OpsServer, list[int]]]:
    """A SMALL server, and ATTACKERS from ELSEWHERE reconnecting as they are closed,
    running until the test ends; the count of sockets they opened."""
    server = await serve(await make_runtime(Quiet), **SMALL)
    stop, opened = asyncio.Event(), [0]
    attackers = [asyncio.create_task(reconnecting(server, ELSEWHERE, stop, opened))
                 for _ in range(ATTACKERS)]
    try:
        yield server, opened
    finally:
        stop.set()
        await asyncio.wait(attackers, timeout=WAIT_S * 2)
        for task in attackers:
            task.cancel()


async def test_an_operator_gets_in_during_a_reconnecting_flood(
        flood: tuple[OpsServer, list[int]]) -> None:
    """Attackers that reconnect each time they are closed keep the lobby full (and would
    hold every client place without it); the consoles, from another address, are never
    the ones pushed out."""
    server, opened = flood
    cap = SMALL["max_pending"]
    await until(lambda: opened[0] >= 4 * ATTACKERS, within=WAIT_S * 4)  # churning
    assert len(server.admission.lobby) <= cap
    evicted = server.admission.evicted
    outcomes = [await log_in(server, OPERATOR if i % 2 else VIEWER) for i in range(LOGINS)]
    assert outcomes == ["viewer", "operator"] * (LOGINS // 2)
    assert server.admission.evicted > evicted  # the flood went on during the logins
    assert len(server.admission.lobby) <= cap


async def test_the_welcomed_clients_have_their_own_cap_and_message(
        make_runtime: RuntimeFactory, serve: ServerFactory) -> None:
    """Past `max_clients`, a good token is refused with 1013 and the clients' message,
    not the lobby's; a place that frees up is taken again."""
    server = await serve(await make_runtime(Quiet), max_clients=2)
    first = await connect(server.url, open_timeout=WAIT_S)
    second = await connect(server.url, open_timeout=WAIT_S)
    try:
        for ws in (first, second):
            await ws.send(json.dumps({"op": "hello", "token": VIEWER}))
            assert json.loads(await ws.recv())["type"] == "welcome"
        assert server.clients == 2
        refused = await log_in(server)
        assert refused == "closed 1013: server full: 2 ops clients connected; try again later"
        await first.close()
        await until(lambda: server.clients == 1)
        assert await log_in(server) == "operator"
    finally:
        await close_all([first, second])


def test_silent_tcp_sockets_take_no_descriptor_an_object_needs(tmp_path: Path) -> None:
    """The reported case: idle TCP sockets on the ops port made alarms fail to open their
    database. In a process whose limit is filled by its resident objects beside the
    server's reserved sockets, 300 sockets that never send a byte are accepted, at most
    the lobby's worth are held, and every object opens."""
    log = tmp_path / "worker.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.server.lobby_fd_worker", str(tmp_path / "data"),
             "600"], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
            text=True)
    assert proc.stdin is not None and proc.stdout is not None
    held: list[socket.socket] = []
    try:
        ready = proc.stdout.readline()
        assert ready, log.read_text()
        port = json.loads(ready)["port"]
        for _ in range(FLOOD):
            s = socket.socket()
            s.settimeout(WAIT_S)
            s.bind((ELSEWHERE, 0))
            try:
                s.connect(("127.0.0.1", port))
            except OSError:  # a server out of descriptors stops accepting
                s.close()
                continue
            held.append(s)
        proc.stdin.write("flooded\n")
        proc.stdin.flush()
        done = proc.stdout.readline()
        assert done, log.read_text()
        out = json.loads(done)
    finally:
        for s in held:
            s.close()
        proc.stdin.close()
        proc.stdout.close()
        if proc.wait(30) != 0:
            raise AssertionError(log.read_text())
    assert out["failed"] == 0, out
    assert out["lobby"] <= 16 and out["held"] <= 16, out
