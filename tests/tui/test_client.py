"""The console's requests are the server's typed commands: a real `WebSocketOpsClient`
against a real server (and against a stand-in for an older one). A request the server
would refuse for its fields fails at once, in the server's words, and never reaches
it; an op the server lacks is the server's "unknown op", as before."""

from __future__ import annotations

import json
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from alarmtop.server import wire
from alarmtop.server.app import OpsServer
from alarmtop.server.auth import Tokens
from alarmtop.tui.client import CommandError, WebSocketOpsClient
from tests.conftest import RuntimeFactory

TOKENS = Tokens("op-token-for-request-tests", "view-token-for-request-tests")
WAIT_S = 10.0


async def answer_raw(url: str, frame: dict[str, Any]) -> dict[str, Any]:
    """What the server answers to `frame` sent as it is, by another connection."""
    async with connect(url) as ws:
        await ws.send(json.dumps({"op": "hello", "token": TOKENS.operator}))
        while True:
            msg = json.loads(await ws.recv())
            if msg.get("type") == "welcome":
                break
        await ws.send(json.dumps(frame))
        while True:
            msg = json.loads(await ws.recv())
            if msg.get("type") in ("result", "error"):
                return dict(msg)


@pytest.mark.parametrize("op, fields", [
    ("rearm", {"object": 5}),  # a field of the wrong type
    ("rearm", {}),  # a required field left out
    ("fire_now", {"object": "Job/a", "resaon": "typo"}),  # a field the op does not take
    ("alarms", {"limit": 10_000}),  # out of range
    ("resolve_everything", {}),  # an op no server has
])
async def test_a_request_the_server_would_refuse_fails_at_once_in_its_words(
        make_runtime: RuntimeFactory, op: str, fields: dict[str, Any]) -> None:
    rt = await make_runtime()
    server = OpsServer(rt, TOKENS, "127.0.0.1", 0, tick_s=0.02)
    await server.start()
    client = WebSocketOpsClient(server.url, TOKENS.operator, timeout_s=WAIT_S)
    try:
        await client.connect()
        with pytest.raises(CommandError) as caught:
            await client.request(op, **fields)
        assert await rt.audit.list() == []  # nothing reached the server
        said = await answer_raw(server.url, {"op": op, "id": 1, **fields})
        assert said["ok"] is False and str(caught.value) == said["error"]
        assert (await client.request("alarms"))["total"] == 0  # and the client goes on
    finally:
        await client.close()
        await server.stop()


def test_a_command_is_built_as_the_server_decodes_it() -> None:
    """`wire.command` is the frame the server's `decode` reads back, field for field;
    a field given as None is left out, as the server reads a null."""
    cmd = wire.command("rearm", 7, object="Job/a", at_ms=None, reason="by hand")
    assert cmd == wire.Command("rearm", 7, {"object": "Job/a", "reason": "by hand"})
    assert wire.decode(wire.encode(cmd.message())) == cmd
    with pytest.raises(wire.ProtocolError, match="not a command"):
        wire.command("hello", 1, token="x")


async def test_an_op_an_older_server_lacks_is_its_unknown_op() -> None:
    """A server from before the timers board answers `timers` as unknown: the console
    sends it (its table knows it) and hands the server's answer on."""
    async def older_server(ws: ServerConnection) -> None:
        await ws.recv()  # hello
        await ws.send(json.dumps({"type": "welcome", "role": "operator", "protocol": 1}))
        async for raw in ws:
            msg = json.loads(raw)
            await ws.send(json.dumps({"type": "result", "id": msg["id"], "ok": False,
                                      "error": f"unknown op {msg['op']!r}; ops: alarms"}))

    async with serve(older_server, "127.0.0.1", 0) as older:
        port = next(iter(older.sockets)).getsockname()[1]
        client = WebSocketOpsClient(f"ws://127.0.0.1:{port}/ops", "t", timeout_s=WAIT_S)
        await client.connect()
        try:
            with pytest.raises(CommandError, match=r"^unknown op 'timers'"):
                await client.request("timers", limit=10)
        finally:
            await client.close()
