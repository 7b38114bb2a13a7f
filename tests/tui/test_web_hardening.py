"""`alarmtop web` under a user who asks too much, and behind a TLS proxy: a `WebConsole`
served in the test's process on a real ops server (the Pilot tests' harness), with real
console processes behind real WebSockets, a clock the test moves, and the machine's
Chromium through Playwright where only a browser shows it; `alarmtop web` itself as a
real process for its command line.

- consoles: a few per login and in all, refused with a reason (on the page too);
  terminal sizes clamped at start and on resize;
- wrong tokens throttled per address, without asking the ops server meanwhile;
- `--public-origin`: a TLS proxy's origin logs in, its cookie is `Secure`, the page's
  addresses are relative; `--secure-cookie`;
- `web --demo` takes its tokens from the environment like `serve`; a port in use is one
  line and starts nothing; the "Session ended" page has "Log out".
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web as aioweb

from alarmtop.tui.cli_support import DEMO_DATA_NOTE, probe
from alarmtop.tui.web.limits import MAX_HEIGHT, MAX_WIDTH, ConsoleCaps
from alarmtop.tui.web.server import WebConsole, bound_url
from tests.tui.conftest import Harness
from tests.tui.test_web import (
    DRAW_S,
    START_S,
    URL_LINE,
    chromium,
    console_pids,
    env,
    eventually,
    short_failure,
    web,
)
from tests.tui.test_web import tokens as tokens  # the fixture

pytestmark = pytest.mark.timeout(120)
PROXY = "https://ops.example.com"
CSI_AT = re.compile(rb"\x1b\[(\d+);(\d+)H")  # a cursor move: row;column


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Served:
    """A `WebConsole` on 127.0.0.1 in this process, and an HTTP client of it."""

    console: WebConsole
    url: str
    clock: Clock
    http: aiohttp.ClientSession
    token: str
    checks: list[str]  # tokens the ops server was asked about

    async def request(self, method: str, path: str, cookie: str = "",
                      origin: str | None = None, data: dict[str, str] | None = None
                      ) -> tuple[int, dict[str, str], str]:
        headers = {"Cookie": cookie} if cookie else {}
        if origin is not None:
            headers["Origin"] = origin
        async with self.http.request(method, self.url + path, data=data, headers=headers,
                                     allow_redirects=False) as response:
            return (response.status, {k.lower(): v for k, v in response.headers.items()},
                    await response.text())

    async def login(self, token: str | None = None, origin: str | None = None
                    ) -> tuple[int, dict[str, str], str]:
        return await self.request("POST", "/login", origin=origin,
                                  data={"token": self.token if token is None else token})

    async def cookie(self) -> str:
        status, headers, _ = await self.login()
        assert status == 303, status
        return headers["set-cookie"].split(";", 1)[0]

    @contextlib.asynccontextmanager
    async def socket(self, cookie: str, size: str = "width=100&height=30"
                     ) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
        url = self.url.replace("http", "ws", 1) + "/ws?" + size
        async with self.http.ws_connect(url, headers={"Cookie": cookie}) as ws:
            yield ws


Serve = Callable[..., Awaitable[Served]]


@pytest.fixture
async def serve(harness: Harness) -> AsyncIterator[Serve]:
    """Start `WebConsole`s on the harness's ops server with `options`; all stop after."""
    runners: list[aioweb.AppRunner] = []
    client = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar())
    ops_url = harness.server.url

    async def start(**options: Any) -> Served:
        checks: list[str] = []

        async def check(token: str) -> str:
            checks.append(token)
            return await probe(ops_url, token)

        clock = Clock()
        console = WebConsole(ops_url, check, "test", clock=clock, **options)
        runner = aioweb.AppRunner(console.make_app(), access_log=None)
        await runner.setup()
        runners.append(runner)
        await aioweb.TCPSite(runner, "127.0.0.1", 0).start()
        console.public_url = bound_url(runner)
        return Served(console, console.public_url, clock, client, harness.tokens.operator,
                      checks)

    try:
        yield start
    finally:
        await client.close()
        for runner in runners:
            await runner.cleanup()


async def drawn_until(ws: aiohttp.ClientWebSocketResponse, done: Callable[[bytes], bool],
                      within_s: float = DRAW_S) -> bytes:
    """What the console sends until `done(everything so far)` holds."""
    seen = bytearray()
    async with asyncio.timeout(within_s):
        async for message in ws:
            if message.type == aiohttp.WSMsgType.BINARY:
                seen.extend(message.data)
                if done(bytes(seen)):
                    return bytes(seen)
    raise AssertionError(f"the console closed first; it sent {bytes(seen[-300:])!r}")


def rows_drawn(data: bytes) -> int:
    return max((int(row) for row, _ in CSI_AT.findall(data)), default=0)


# -- consoles: how many, how big ----------------------------------------------------------

async def refused(ws: aiohttp.ClientWebSocketResponse) -> tuple[str, int | None]:
    """(what the terminal was sent, the close code) of a refused console."""
    text = ""
    async with asyncio.timeout(DRAW_S):
        async for message in ws:
            if message.type == aiohttp.WSMsgType.BINARY:
                text += message.data.decode()
    return text, ws.close_code


async def test_a_login_runs_a_few_consoles_and_the_server_a_few_more(serve: Serve) -> None:
    """The reported case: one viewer session started consoles without end. Past its cap a
    login is refused a console, and past the server's cap every login is: a 1013 close
    with the reason (also drawn on the page's terminal), and no process started."""
    served = await serve(caps=ConsoleCaps(per_session=2, total=3))
    first, second = await served.cookie(), await served.cookie()
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(2):
            ws = await stack.enter_async_context(served.socket(first))
            await drawn_until(ws, lambda data: len(data) > 100)
        running = len(console_pids(served.token))
        assert running == 2
        async with served.socket(first) as ws:
            text, code = await refused(ws)
        assert code == 1013
        assert "this login has 2 consoles open (at most 2): close one first" in text
        ws = await stack.enter_async_context(served.socket(second))
        await drawn_until(ws, lambda data: len(data) > 100)
        async with served.socket(second) as ws:
            text, code = await refused(ws)
        assert code == 1013 and "server full: 3 consoles open (at most 3)" in text
        assert len(console_pids(served.token)) == 3
    await eventually(lambda: served.console.consoles == 0, "the consoles' end")
    async with served.socket(second) as ws:  # places free again
        await drawn_until(ws, lambda data: len(data) > 100)


async def test_terminal_sizes_are_clamped_at_start_and_on_resize(serve: Serve) -> None:
    """1500x1500 took 150 MB and 71% of a core: a console starts at most MAX_WIDTH x
    MAX_HEIGHT, and a resize past it is clamped too (the console draws no row past it)."""
    served = await serve()
    cookie = await served.cookie()
    async with served.socket(cookie, "width=1500&height=1500") as ws:
        data = await drawn_until(ws, lambda data: rows_drawn(data) >= MAX_HEIGHT)
        assert rows_drawn(data) == MAX_HEIGHT
        (pid,) = console_pids(served.token)
        environ = (await asyncio.to_thread(Path(f"/proc/{pid}/environ").read_bytes)).split(
            b"\0")
        assert f"COLUMNS={MAX_WIDTH}".encode() in environ
        assert f"ROWS={MAX_HEIGHT}".encode() in environ
    await eventually(lambda: served.console.consoles == 0, "the first console's end")
    async with served.socket(cookie, "width=100&height=30") as ws:
        await drawn_until(ws, lambda data: rows_drawn(data) == 30)
        await ws.send_str(json.dumps(["resize", {"width": 1000, "height": 1000}]))
        data = await drawn_until(ws, lambda data: rows_drawn(data) >= MAX_HEIGHT)
        assert rows_drawn(data) == MAX_HEIGHT  # the first frame past 30 rows, not 1000


# -- logins: throttled, and from a proxy's origin -----------------------------------------

async def test_wrong_tokens_are_throttled_per_address(serve: Serve) -> None:
    """50 wrong tokens went through in 0.24 s. Now 5, then one every 2 s: the rest get a
    429 that says how long to wait, and no token (not even the right one) is checked
    with the ops server meanwhile."""
    served = await serve()
    for i in range(5):
        status, _, page = await served.login(f"wrong-{i}")
        assert status == 401 and "refused that token" in page
    status, headers, page = await served.login()
    assert status == 429 and headers["retry-after"] == "2"
    assert "Too many wrong tokens from your address: try again in 2 s." in page
    assert served.checks == [f"wrong-{i}" for i in range(5)]
    served.clock.now += 2
    assert (await served.login())[0] == 303  # the right token, once it may try again
    assert (await served.login(""))[0] == 401  # an empty form is not a wrong token


async def test_a_proxys_public_origin_logs_in_with_a_secure_cookie(serve: Serve) -> None:
    """Behind a TLS proxy the login came from https://ops.example.com and was refused.
    Now the origins named are let in (besides the server's own, as 127.0.0.1 and as
    localhost), a login over https gets a `Secure` cookie (renewed as such), and the
    page names no address of its own: it works at whatever origin it was loaded from."""
    served = await serve(public_origins=[PROXY + "/"])
    port = served.url.rsplit(":", 1)[1]
    status, headers, _ = await served.login(origin=PROXY)
    assert status == 303
    assert "Secure" in headers["set-cookie"] and "HttpOnly" in headers["set-cookie"]
    cookie = headers["set-cookie"].split(";", 1)[0]
    status, headers, page = await served.request("GET", "/", cookie)
    assert status == 200 and "Secure" in headers["set-cookie"]
    assert "wss://ops.example.com" in headers["content-security-policy"]
    assert "127.0.0.1" not in page and 'src="/static/js/textual.js"' in page
    for local in (served.url, f"http://localhost:{port}"):
        status, headers, _ = await served.login(origin=local)
        assert status == 303 and "Secure" not in headers["set-cookie"], local
    assert (await served.login(origin="https://elsewhere.example.com"))[0] == 403


async def test_a_secure_cookie_when_told(serve: Serve) -> None:
    served = await serve(secure_cookie=True)
    status, headers, _ = await served.login()
    assert status == 303 and "Secure" in headers["set-cookie"]
    status, headers, _ = await served.request("POST", "/logout",
                                              headers["set-cookie"].split(";", 1)[0])
    assert status == 303 and "Secure" in headers["set-cookie"]  # cleared as it was set


def test_a_bad_public_origin_is_one_line() -> None:
    short_failure(web("--demo", "--public-origin", "ops.example.com"), 2,
                  "--public-origin", "http(s)://HOST[:PORT]")
    short_failure(web("--demo", "--public-origin", "https://x.io/console"), 2, "no path")


# -- web --demo: tokens, the port ---------------------------------------------------------

@contextlib.contextmanager
def web_demo(tmp_path: Path, environment: dict[str, str]) -> Iterator[tuple[str, str]]:
    """`alarmtop web --demo` with `environment` added: its URL and first line."""
    log = tmp_path / "web.log"
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "alarmtop.tui.cli", "web", "--demo",
                                 "--port", "0", "--data-dir", str(tmp_path / "d")],
                                env={**env(), **environment}, stdout=subprocess.PIPE,
                                stderr=err, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = URL_LINE.search(line)
        assert found, f"{line!r}; stderr: {log.read_text()}"
        yield found[1], line
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


async def test_web_demo_takes_its_tokens_from_the_environment(tmp_path: Path) -> None:
    """Like `serve` and as DESIGN says: ALARMTOP_OPERATOR_TOKEN and ALARMTOP_VIEWER_TOKEN
    are the demo's tokens when set (the login refused them); none is saved."""
    tokens = {"ALARMTOP_OPERATOR_TOKEN": "operator-from-env",
              "ALARMTOP_VIEWER_TOKEN": "viewer-from-env"}
    with web_demo(tmp_path, tokens) as (url, line):
        async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
            for token, role in (("operator-from-env", "operator"),
                                ("viewer-from-env", "viewer")):
                async with http.post(url + "/login", data={"token": token},
                                     allow_redirects=False) as response:
                    assert response.status == 303, (role, await response.text())
        assert "$ALARMTOP_OPERATOR_TOKEN" in line  # where the startup line says it is
    assert not (tmp_path / "d" / "operator.token").exists()
    assert not (tmp_path / "d" / "viewer.token").exists()


def test_a_port_in_use_starts_nothing_and_prints_no_data_folder(tmp_path: Path) -> None:
    """It printed its (temporary) data folder, and built the demo, before failing."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        done = web("--demo", "--port", str(port))
        kept = web("--demo", "--port", str(port), "--data-dir", str(tmp_path / "d"))
    for run in (done, kept):
        short_failure(run, 1, f"port {port} on 127.0.0.1 is in use")
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr
        assert DEMO_DATA_NOTE.split("{}")[0] not in run.stderr + run.stdout
    assert not (tmp_path / "d").exists()


# -- in Chromium: the "Session ended" page ------------------------------------------------

@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    executable = chromium()
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        from tests.environment import unavailable
        unavailable("Playwright's Python package is not installed (pip install playwright)")
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=executable, headless=True,
                                     args=["--no-sandbox"])
        try:
            yield b
        finally:
            await b.close()


async def test_a_refused_console_says_why_and_the_ended_page_logs_out(
        serve: Serve, browser: Any) -> None:
    """A second tab of a login allowed one console: its "Session ended" page says why,
    and has a "Log out" (it had none) that ends the session and its console."""
    served = await serve(caps=ConsoleCaps(per_session=1, total=4))
    context = await browser.new_context(viewport={"width": 1000, "height": 700})
    first = await context.new_page()
    await first.goto(served.url + "/")
    await first.fill("#token", served.token)
    await first.click("#submit")
    await first.wait_for_selector("body.-first-byte", timeout=DRAW_S * 1000)

    second = await context.new_page()
    await second.goto(served.url + "/")
    await second.wait_for_selector("body.-closed", timeout=DRAW_S * 1000)
    message = await second.locator(".closed-dialog .message").inner_text()
    assert message == ("Session ended: this login has 1 consoles open (at most 1): close "
                       "one first")
    assert console_pids(served.token)
    await second.click("#ended-logout-button")
    await second.wait_for_selector("form#login", timeout=DRAW_S * 1000)
    await eventually(lambda: not console_pids(served.token), "the console's end",
                     within_s=START_S)
    assert served.console.sessions == {}
    await first.wait_for_selector("body.-closed", timeout=DRAW_S * 1000)
