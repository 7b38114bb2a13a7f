"""`alarmtop serve`, in process: a runtime and its server from a factory, tokens created
once (0600) and printed once, clients connecting with them, TLS, a clean stop on
SIGTERM, and clear errors for bad `--app` specs."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import re
import shutil
import signal
import socket
import ssl
import stat
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from alarmtop.core import Runtime, VirtualClock
from alarmtop.examples.demo import build_demo_runtime
from alarmtop.server.auth import TokenFileError
from alarmtop.server.serve import (
    AppError,
    ServeError,
    build_runtime,
    check_data_dir,
    load_factory,
    serve_forever,
    tls_context,
)
from alarmtop.tui.cli import build_serve_parser
from tests.server.conftest import WAIT_S, Client, Quiet

SERVING = re.compile(r"alarmtop: serving (wss?)://127\.0\.0\.1:(\d+)/ops")
NEW_TOKEN = re.compile(r"alarmtop: new (operator|viewer) token \(saved in (\S+), shown once\): "
                       r"(\S+)")


@dataclass
class Running:
    task: asyncio.Task[None]
    port: int
    scheme: str
    stderr: str

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}/ops"

    def printed_tokens(self) -> dict[str, tuple[str, str]]:
        """role -> (saved path, token) for every token announced on stderr."""
        return {m[1]: (m[2], m[3]) for m in NEW_TOKEN.finditer(self.stderr)}


Starter = Callable[..., Awaitable[Running]]


@pytest.fixture(autouse=True)
def no_env_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tokens come from files unless a test sets them."""
    monkeypatch.delenv("ALARMTOP_OPERATOR_TOKEN", raising=False)
    monkeypatch.delenv("ALARMTOP_VIEWER_TOKEN", raising=False)


@pytest.fixture
async def start(capsys: pytest.CaptureFixture[str]) -> AsyncIterator[Starter]:
    """Run serve_forever as a task, wait for it to be ready, learn the port from stderr;
    every one still running is cancelled afterwards."""
    tasks: list[asyncio.Task[None]] = []

    async def run(rt: Runtime, data_dir: Path, **kw: Any) -> Running:
        capsys.readouterr()
        ready = asyncio.Event()
        task = asyncio.create_task(serve_forever(rt, data_dir, "127.0.0.1", 0, ready=ready,
                                                 **kw))
        tasks.append(task)
        waiter = asyncio.create_task(ready.wait())
        done, _ = await asyncio.wait([task, waiter], timeout=WAIT_S,
                                     return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if task in done:
            task.result()  # raises what went wrong
        assert ready.is_set(), "serve_forever did not become ready"
        err = capsys.readouterr().err
        m = SERVING.search(err)
        assert m, err
        return Running(task, int(m[2]), m[1], err)

    yield run
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def stop(running: Running) -> None:
    running.task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running.task


async def hello(url: str, token: str, **kw: Any) -> tuple[Client, dict[str, Any]]:
    ws = await connect(url, open_timeout=WAIT_S, **kw)
    c = Client(ws)
    welcome, snap = await c.hello(token)
    assert snap["type"] == "snapshot"
    return c, welcome


def quiet_runtime(data_dir: Path, clock: VirtualClock) -> Runtime:
    rt = Runtime(data_dir, clock=clock)
    rt.register(Quiet)
    return rt


async def test_tokens_created_once_saved_0600_and_usable(start: Starter, tmp_path: Path,
                                                         clock: VirtualClock) -> None:
    """First start: both tokens are created under the data dir with mode 0600, printed
    once on stderr (with where they are saved), and grant their roles. A second start on
    the same data dir prints no token and the same tokens still work."""
    data = tmp_path / "data"
    running = await start(quiet_runtime(data, clock), data)
    printed = running.printed_tokens()
    assert set(printed) == {"operator", "viewer"}
    for role, (path, token) in printed.items():
        saved = data / f"{role}.token"
        assert Path(path) == saved
        assert saved.read_text().strip() == token
        assert stat.S_IMODE(saved.stat().st_mode) == 0o600
        assert running.stderr.count(token) == 1
    op, welcome = await hello(running.url, printed["operator"][1])
    assert welcome["role"] == "operator"
    view, welcome = await hello(running.url, printed["viewer"][1])
    assert welcome["role"] == "viewer"
    await op.ws.close()
    await view.ws.close()
    await stop(running)

    again = await start(quiet_runtime(data, clock), data)
    assert again.printed_tokens() == {}
    assert "token" not in again.stderr
    op, welcome = await hello(again.url, printed["operator"][1])
    assert welcome["role"] == "operator"
    await op.ws.close()


async def test_environment_tokens_are_used_and_not_printed(
        start: Starter, tmp_path: Path, clock: VirtualClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With ALARMTOP_*_TOKEN set, nothing is written or printed and those tokens work."""
    monkeypatch.setenv("ALARMTOP_OPERATOR_TOKEN", "env-operator")
    monkeypatch.setenv("ALARMTOP_VIEWER_TOKEN", "env-viewer")
    data = tmp_path / "data"
    running = await start(quiet_runtime(data, clock), data)
    assert running.printed_tokens() == {}
    assert not list(data.glob("*.token"))
    c, welcome = await hello(running.url, "env-viewer")
    assert welcome["role"] == "viewer"
    await c.ws.close()


async def test_binds_localhost_and_serves_metrics(start: Starter, tmp_path: Path,
                                                  clock: VirtualClock) -> None:
    """The announced metrics URL answers on the same port."""
    import urllib.request

    data = tmp_path / "data"
    running = await start(quiet_runtime(data, clock), data)
    assert f"metrics: http://127.0.0.1:{running.port}/metrics" in running.stderr

    def get() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{running.port}/metrics", timeout=5) as r:
            return str(r.read().decode())
    assert "alarmtop_dead_letters" in await asyncio.to_thread(get)


async def test_sigterm_stops_cleanly(start: Starter, tmp_path: Path,
                                     clock: VirtualClock) -> None:
    """SIGTERM makes serve_forever return normally: the server closes (clients see the
    connection end) and the runtime stops."""
    data = tmp_path / "data"
    rt = quiet_runtime(data, clock)
    fallback: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: fallback.append(signum))
    loop = asyncio.get_running_loop()
    try:
        running = await start(rt, data)
        token = running.printed_tokens()["viewer"][1]
        c, _ = await hello(running.url, token)
        signal.raise_signal(signal.SIGTERM)
        await asyncio.wait_for(running.task, WAIT_S)  # returns, not cancelled
        assert fallback == [], "serve_forever did not handle SIGTERM"
        assert not rt.running
        exc = await c.closed()
        assert exc.rcvd is not None and exc.rcvd.code == 1001
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        signal.signal(signal.SIGTERM, previous)


# Stopping cancels the demo driver; when that lands while an RPC is opening a fresh
# object's SQLite file, the aiosqlite connection leaks (a core bug, reported; it is
# timing-dependent, so it cannot be a strict xfail). Collected here, not in a later test.
@pytest.mark.filterwarnings("ignore:.*was deleted before being closed:ResourceWarning")
async def test_demo_serves_live_activity(start: Starter, tmp_path: Path) -> None:
    """`serve --demo`: the demo runtime on the wall clock, driven; a viewer sees demo
    alarms in deltas within a few seconds."""
    data = tmp_path / "demo"
    rt = await build_runtime(build_demo_runtime, data)
    running = await start(rt, data, demo=True)
    token = running.printed_tokens()["viewer"][1]
    c, _ = await hello(running.url, token)
    delta = await c.wait_for(lambda f: f["type"] == "delta" and any(
        e["type"] == "alarm.set" and e["data"]["object"].startswith("LeaseLedger/")
        for e in f["events"]), within=10)
    assert delta["counts"]["objects"] >= 1
    await c.ws.close()
    await stop(running)
    assert not rt.running
    gc.collect()


def make_cert(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


async def test_tls(start: Starter, tmp_path: Path, clock: VirtualClock) -> None:
    """Given a certificate, the server speaks wss:// and a client trusting it connects;
    a plain ws:// client does not get in."""
    cert, key = make_cert(tmp_path)
    data = tmp_path / "data"
    running = await start(quiet_runtime(data, clock), data, tls=tls_context(cert, key))
    assert running.scheme == "wss"
    token = running.printed_tokens()["operator"][1]
    trust = ssl.create_default_context(cafile=str(cert))
    c, welcome = await hello(running.url, token, ssl=trust)
    assert welcome["role"] == "operator"
    await c.ws.close()
    with pytest.raises(Exception):  # noqa: B017 - a handshake error of some kind
        await asyncio.wait_for(hello(f"ws://127.0.0.1:{running.port}/ops", token), WAIT_S)


def test_tls_context_without_certificate_is_none() -> None:
    """No certificate: plain ws://."""
    assert tls_context(None, None) is None


@pytest.mark.parametrize(("spec", "words"), [
    ("nocolon", "MODULE:FACTORY"),
    (":build", "MODULE:FACTORY"),
    ("alarmtop.examples.demo:", "MODULE:FACTORY"),
    ("no_such_module_for_alarmtop_tests:build", "no module 'no_such_module_for_alarmtop"),
    ("alarmtop.examples.demo:no_such_factory", "no callable 'no_such_factory'"),
    ("alarmtop.examples.demo:TENANTS", "no callable 'TENANTS'"),
])
def test_load_factory_errors(spec: str, words: str) -> None:
    """A bad --app spec is a `ServeError` saying what is wrong (one line, no traceback)."""
    with pytest.raises(ServeError, match=re.escape(words)):
        load_factory(spec)


def test_load_factory_finds_a_factory() -> None:
    """MODULE:FACTORY resolves to the callable."""
    assert load_factory("alarmtop.examples.demo:build_demo_runtime") is build_demo_runtime


async def test_build_runtime(tmp_path: Path) -> None:
    """The factory may be sync or async; anything but a Runtime is refused clearly."""
    rt = await build_runtime(build_demo_runtime, tmp_path)
    assert isinstance(rt, Runtime) and not rt.running

    async def async_factory(data_dir: Path) -> Runtime:
        return Runtime(data_dir)
    assert isinstance(await build_runtime(async_factory, tmp_path), Runtime)
    with pytest.raises(AppError, match="must return an alarmtop Runtime"):
        await build_runtime(lambda d: {"not": "a runtime"}, tmp_path)


def test_serve_command_line() -> None:
    """`alarmtop serve` takes --app or --demo (exactly one), binds 127.0.0.1 by default."""
    parser = build_serve_parser()
    args = parser.parse_args(["--demo", "--data-dir", "/tmp/x", "--port", "0"])
    assert args.demo and args.port == 0 and args.host == "127.0.0.1"
    assert args.data_dir == Path("/tmp/x")
    args = parser.parse_args(["--app", "pkg.mod:build"])
    assert args.app == "pkg.mod:build" and not args.demo
    for bad in ([], ["--demo", "--app", "a:b"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)


def test_token_line_pattern() -> None:
    """The pattern the tests above read tokens with matches serve's announcement line."""
    line = "alarmtop: new viewer token (saved in /d/viewer.token, shown once): abc-DEF_1\n"
    m = NEW_TOKEN.search(line)
    assert m and m.groups() == ("viewer", "/d/viewer.token", "abc-DEF_1")


# -- a start that cannot work creates nothing -----------------------------------------------


def listening_socket() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


async def test_port_in_use_starts_nothing_and_the_next_start_prints_the_tokens(
        start: Starter, tmp_path: Path, clock: VirtualClock,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The port is bound before the runtime starts and before tokens are saved: a port
    in use is a ServeError saying so, with the runtime never started, no data dir, no
    token file, nothing printed. The next start that works creates the tokens and
    prints them, once, after the "serving" line."""
    data = tmp_path / "data"
    rt = quiet_runtime(data, clock)
    with listening_socket() as busy:
        port = busy.getsockname()[1]
        with pytest.raises(ServeError) as info:
            await serve_forever(rt, data, "127.0.0.1", port)
    assert f"port {port} on 127.0.0.1 is in use" in str(info.value)
    assert "--port" in str(info.value)
    assert not rt.running and not data.exists()
    assert "token" not in capsys.readouterr().err

    running = await start(quiet_runtime(data, clock), data)
    printed = running.printed_tokens()
    assert set(printed) == {"operator", "viewer"}
    assert running.stderr.index("serving") < running.stderr.index("new operator token")
    for role, (path, token) in printed.items():
        saved = data / f"{role}.token"
        assert str(saved) == path and saved.read_text().strip() == token


async def test_a_second_server_on_the_same_port_never_starts_its_runtime(
        start: Starter, tmp_path: Path, clock: VirtualClock) -> None:
    """`alarmtop serve` twice on one data dir and port: the second fails on the port
    before its runtime starts, so two runtimes never fire the same alarms; the first
    keeps serving."""
    data = tmp_path / "data"
    first = await start(quiet_runtime(data, clock), data)
    second = quiet_runtime(data, clock)
    with pytest.raises(ServeError, match="in use"):
        await serve_forever(second, data, "127.0.0.1", first.port)
    assert not second.running
    c, welcome = await hello(first.url, first.printed_tokens()["viewer"][1])
    assert welcome["role"] == "viewer"
    await c.ws.close()


async def test_a_token_file_others_can_read_stops_the_start(tmp_path: Path,
                                                            clock: VirtualClock) -> None:
    """A saved token with mode 0644 is refused before anything starts, naming the fix."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "operator.token").write_text("op-secret\n")
    (data / "operator.token").chmod(0o644)
    rt = quiet_runtime(data, clock)
    with pytest.raises(TokenFileError, match=f"chmod 600 {data / 'operator.token'}"):
        await serve_forever(rt, data, "127.0.0.1", 0)
    assert not rt.running and not (data / "viewer.token").exists()


async def test_non_loopback_host_without_tls_needs_to_be_told(
        tmp_path: Path, clock: VirtualClock, capsys: pytest.CaptureFixture[str]) -> None:
    """0.0.0.0 without TLS is refused; with insecure_no_tls it serves."""
    data = tmp_path / "data"
    rt = quiet_runtime(data, clock)
    with pytest.raises(ValueError, match="--insecure-no-tls"):
        await serve_forever(rt, data, "0.0.0.0", 0)
    assert not rt.running and not data.exists()
    ready = asyncio.Event()
    task = asyncio.create_task(serve_forever(rt, data, "0.0.0.0", 0, ready=ready,
                                             insecure_no_tls=True))
    try:
        await asyncio.wait_for(ready.wait(), WAIT_S)
        assert "serving ws://0.0.0.0:" in capsys.readouterr().err
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_allowed_origins_reach_the_server(start: Starter, tmp_path: Path,
                                                clock: VirtualClock) -> None:
    """--allow-origin is passed through: that origin gets in, another is closed 1008."""
    data = tmp_path / "data"
    running = await start(quiet_runtime(data, clock), data,
                          allow_origins=["https://ops.example.com"])
    token = running.printed_tokens()["viewer"][1]
    c, _ = await hello(running.url, token, origin="https://ops.example.com")
    await c.ws.close()
    ws = await connect(running.url, open_timeout=WAIT_S, origin="https://evil.example")
    exc = await Client(ws).closed()
    assert exc.rcvd is not None and exc.rcvd.code == 1008


def test_check_data_dir(tmp_path: Path) -> None:
    """A file, or a path under a file, is refused; a missing folder under a writable one
    is fine (it is created later); an existing folder is fine."""
    afile = tmp_path / "f"
    afile.write_text("x")
    for bad in (afile, afile / "sub"):
        with pytest.raises(ServeError, match="a file, not a folder"):
            check_data_dir(bad)
    check_data_dir(tmp_path / "new" / "deeper")
    check_data_dir(tmp_path)
    assert not (tmp_path / "new").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]  # the probe left nothing


def test_tls_context_errors(tmp_path: Path) -> None:
    """A key without a certificate, a missing file, a file that is not PEM: ServeError."""
    with pytest.raises(ServeError, match="--tls-key needs --tls-cert"):
        tls_context(None, tmp_path / "key.pem")
    with pytest.raises(ServeError, match="does not exist"):
        tls_context(tmp_path / "nope.pem", None)
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    with pytest.raises(ServeError, match="cannot load"):
        tls_context(junk, None)
