"""The console leaves within 2 s of `q`, and says why it cannot connect.

`q` under Pilot while the embedded runtime (the `--demo` set-up: `cli_support.embedded`)
has an alarm handler held by a 60 s delay and the console waits on a command for
that object: the console, its server and its runtime are all gone within the
bound (generous: a multiple of the 2 s target), the measured figure printed.
The runtime is on a virtual clock: the 60 s never pass, only `q` ends them.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from alarmtop.core import AlarmInfo, DurableObject, Runtime, VirtualClock
from alarmtop.server.auth import Tokens
from alarmtop.tui import cli, cli_support
from alarmtop.tui.app import AlarmtopApp
from alarmtop.tui.client import WebSocketOpsClient
from tests.tui.conftest import OPERATOR, VIEWER, until

TARGET_S = 2.0
BOUND_S = 3 * TARGET_S


class Held(DurableObject):
    async def arm(self) -> None:
        await self.ctx.storage.set_alarm(self.ctx.now_ms())

    async def alarm(self, info: AlarmInfo) -> None:
        await self.ctx.sleep(60)


async def test_q_quits_within_2_s_while_a_handler_runs(tmp_path: Path,
                                                       clock: VirtualClock) -> None:
    rt = Runtime(tmp_path / "data", clock=clock)
    rt.register(Held)
    tokens = Tokens(OPERATOR, VIEWER)
    took: dict[str, float] = {}
    async with cli_support.embedded(rt, tokens) as server:
        await rt.get(Held, "h").arm()
        await clock.advance(0)
        assert ("Held", "h") in rt.scheduler.running
        app = AlarmtopApp(WebSocketOpsClient(server.url, OPERATOR), target="test")
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: app.state.connected, "the connection")
            # A command on the held object is in flight when q comes.
            pending = asyncio.get_running_loop().create_task(
                app.client.request("fire_now", object="Held/h"))
            await pilot.pause(0.2)
            assert not pending.done()
            started = time.monotonic()
            await pilot.press("q")
        took["console"] = time.monotonic() - started
    took["all"] = time.monotonic() - started
    pending.cancel()
    await asyncio.gather(pending, return_exceptions=True)
    print(f"\nq: console gone in {took['console'] * 1000:.0f} ms, console + server + runtime "
          f"in {took['all'] * 1000:.0f} ms")
    assert not rt.running
    assert took["all"] < BOUND_S, took


async def test_the_header_says_why_it_cannot_connect(unused_tcp_port: int) -> None:
    """Nothing listens: the header shows the client's reason while it retries."""
    url = f"ws://127.0.0.1:{unused_tcp_port}/ops"
    app = AlarmtopApp(WebSocketOpsClient(url, OPERATOR, timeout_s=2), target="nowhere")
    async with app.run_test(size=(160, 30)) as pilot:
        await until(pilot, lambda: "connection refused" in app.state.status, "the reason")
        assert app.state.status.startswith("disconnected, reconnecting: connection refused: "
                                           "nothing listens on 127.0.0.1:")
        await pilot.press("q")


@pytest.fixture
def unused_tcp_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_no_confirm_reaches_the_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """`alarmtop --no-confirm` opens the console with confirm_actions=False."""
    seen: dict[str, Any] = {}

    def fake_console(url: str, token_file: Path | None, token: str | None,
                     read_only: bool, confirm: bool = True) -> int:
        seen["confirm"] = confirm
        return 0

    monkeypatch.setattr(cli, "_console", fake_console)
    assert cli.main(["--no-confirm", "--url", "ws://127.0.0.1:1/ops"]) == 0
    assert seen == {"confirm": False}
    assert cli.main(["--url", "ws://127.0.0.1:1/ops"]) == 0
    assert seen == {"confirm": True}


def test_the_demo_without_a_data_dir_says_where_and_removes_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The note comes before the console takes the terminal; the folder is gone after."""
    used: list[Path] = []

    async def fake_demo(data_dir: Path, read_only: bool, confirm: bool = True,
                        cleanup: Any = None) -> None:
        assert await asyncio.to_thread(data_dir.is_dir)
        await asyncio.to_thread((data_dir / "runtime.sqlite").write_text, "x")
        used.append(data_dir)
        assert capsys.readouterr().err.strip() == cli_support.DEMO_DATA_NOTE.format(data_dir)

    monkeypatch.setattr(cli, "_demo_console", fake_demo)
    assert cli.main(["--demo", "--no-confirm"]) == 0
    (data_dir,) = used
    assert not data_dir.exists()


def test_the_demo_keeps_a_data_dir_it_was_given(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    async def fake_demo(data_dir: Path, read_only: bool, confirm: bool = True,
                        cleanup: Any = None) -> None:
        assert cleanup is None
        await asyncio.to_thread(data_dir.mkdir, parents=True)

    monkeypatch.setattr(cli, "_demo_console", fake_demo)
    assert cli.main(["--demo", "--data-dir", str(tmp_path / "d")]) == 0
    assert (tmp_path / "d").is_dir()
    assert "removed when you quit" not in capsys.readouterr().err


async def test_a_request_without_answer_says_so() -> None:
    """The client's own timeout names itself (a bare TimeoutError read "failed: ")."""
    from websockets.asyncio.server import ServerConnection, serve

    async def mute(conn: ServerConnection) -> None:
        await conn.recv()
        await conn.send(json.dumps({"type": "welcome", "role": "operator", "protocol": 1}))
        async for _ in conn:  # never answers
            pass

    async with serve(mute, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        client = WebSocketOpsClient(f"ws://127.0.0.1:{port}/ops", OPERATOR, timeout_s=0.1)
        await client.connect()
        try:
            with pytest.raises(TimeoutError) as caught:
                await client.request("alarms")
        finally:
            await client.close()
    assert str(caught.value) == "no answer from the server within 0.1 s"
