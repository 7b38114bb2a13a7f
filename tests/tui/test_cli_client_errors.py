"""Why the console cannot connect, as the client says it while it retries: a real
`WebSocketOpsClient` against a real server (or nothing). `Disconnected.reason` and
`last_error` name the cause an operator can act on, and a connection that works clears
it."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import InvalidMessage

from alarmtop.core import Event
from alarmtop.server.app import OpsServer
from alarmtop.server.auth import Tokens
from alarmtop.tui.cli import format_event
from alarmtop.tui.cli_support import probe
from alarmtop.tui.client import CommandError, Disconnected, WebSocketOpsClient, describe_failure
from tests.conftest import RuntimeFactory

TOKENS = Tokens("op-token-for-client-tests", "view-token-for-client-tests")
WAIT_S = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def served(make_runtime: RuntimeFactory) -> OpsServer:
    server = OpsServer(await make_runtime(), TOKENS, "127.0.0.1", 0, tick_s=0.02)
    await server.start()
    return server


async def failure(client: WebSocketOpsClient) -> str:
    with pytest.raises(Disconnected) as info:
        await client.connect()
    assert client.last_error == info.value.reason
    return info.value.reason


async def test_the_reason_follows_the_server_and_clears_once_connected(
        make_runtime: RuntimeFactory) -> None:
    """Nothing listening: "connection refused"; a wrong path: "wrong path"; wss:// to a
    plain server: TLS; the right URL connects and clears the reason; when the server
    goes, the reason says it closed the connection."""
    port = free_port()
    reason = await failure(WebSocketOpsClient(f"ws://127.0.0.1:{port}/ops", TOKENS.viewer,
                                              timeout_s=WAIT_S))
    assert reason.startswith("connection refused") and f"127.0.0.1:{port}" in reason
    server = await served(make_runtime)
    try:
        base = f"127.0.0.1:{server.port}"
        reason = await failure(WebSocketOpsClient(f"ws://{base}/nope", TOKENS.viewer,
                                                  timeout_s=WAIT_S))
        assert reason.startswith("wrong path") and "/nope" in reason
        reason = await failure(WebSocketOpsClient(f"wss://{base}/ops", TOKENS.viewer,
                                                  timeout_s=WAIT_S))
        assert "TLS" in reason and "ws://" in reason
        client = WebSocketOpsClient(f"ws://{base}/ops", TOKENS.viewer, timeout_s=WAIT_S)
        client.last_error = "left over from an earlier attempt"
        await client.connect()
        assert client.role == "viewer" and client.last_error is None
        frames = client.frames()
        assert (await anext(frames))["type"] == "welcome"
    finally:
        await server.stop()
    with pytest.raises(Disconnected) as info:
        async with asyncio.timeout(WAIT_S):
            async for _ in frames:
                pass
    assert "closed the connection" in info.value.reason
    assert client.last_error == info.value.reason
    await client.close()


@pytest.mark.parametrize("code", [1000, 1001])
async def test_a_normal_close_leaves_the_reason_too(code: int) -> None:
    """A server that closes normally (1000, or 1001 "going away", as a stopping server
    may) ends the client's iteration without an error: the reason was left unset, and
    the console's header said nothing while the frames said the server closed."""
    async def handler(conn: ServerConnection) -> None:
        await conn.recv()  # the hello
        await conn.send(json.dumps({"type": "welcome", "role": "viewer"}))
        await conn.close(code, "bye")

    async with serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        client = WebSocketOpsClient(f"ws://127.0.0.1:{port}/ops", TOKENS.viewer,
                                    timeout_s=WAIT_S)
        await client.connect()
        try:
            with pytest.raises(Disconnected) as info:
                async with asyncio.timeout(WAIT_S):
                    async for _ in client.frames():
                        pass
        finally:
            await client.close()
    assert info.value.reason == f"the server closed the connection ({code} bye)"
    assert client.last_error == info.value.reason


async def test_a_wrong_token_is_a_command_error_with_the_reason(
        make_runtime: RuntimeFactory) -> None:
    """Retrying cannot fix a wrong token: CommandError (the console stops retrying), and
    the reason says refused."""
    server = await served(make_runtime)
    try:
        client = WebSocketOpsClient(server.url, "wrong", timeout_s=WAIT_S)
        with pytest.raises(CommandError, match="invalid token"):
            await client.connect()
        assert client.last_error == "refused: invalid token"
        with pytest.raises(CommandError):
            await probe(server.url, "wrong")
        assert await probe(server.url, TOKENS.operator) == "operator"
    finally:
        await server.stop()


def test_describe_failure_names_the_fix() -> None:
    """The causes that have no live server to show them."""
    url = "wss://ops.example.com:8443/ops"
    cert = ssl.SSLCertVerificationError(1, "certificate verify failed")
    cert.verify_message = "self-signed certificate"
    assert "not trusted (self-signed certificate)" in describe_failure(cert, url)
    assert "cannot resolve ops.example.com" in describe_failure(
        socket.gaierror(-2, "Name or service not known"), url)
    assert "in time" in describe_failure(TimeoutError(), url)
    plain = "ws://127.0.0.1:8765/ops"
    assert "use wss://" in describe_failure(InvalidMessage("no HTTP response"), plain)


def test_demo_events_say_nothing_of_fields_without_a_value() -> None:
    """`alarmtop --demo --events` printed "id=None name=None" on the lines of events
    whose operation has no id or name."""
    line = format_event(Event("execution.step_started", 1_800_000_000_000,
                              {"execution_id": "hsf-day1", "id": None, "name": None,
                               "step": "reserve_streaming"}))
    assert "None" not in line
    assert line.startswith("08:00:00.000  execution.step_started")
    assert line.endswith("execution_id=hsf-day1 step=reserve_streaming")
    assert "None" not in format_event(Event("x.y", 0, {"object": None}))
