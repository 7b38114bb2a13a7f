"""`alarmtop web` in a real headless Chromium, and its login and command line.

The browser is the machine's own (Debian's `chromium`), driven by Playwright's
Python package through `executable_path`. xterm.js draws on a canvas, so what the
console draws is read from the bytes it sends the page (the test wraps the page's
WebSocket to keep a copy) and from a screenshot. Every request the page makes is
recorded: none may leave 127.0.0.1.

The sessions' idle expiry and log out are tested on a `WebConsole` in the test's
process, on a real ops server (the Pilot tests' harness), with a clock the test
moves, and a real console process behind a real WebSocket where one is open.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web as aioweb

from alarmtop.server.auth import Tokens
from alarmtop.tui.cli_support import probe
from alarmtop.tui.web.server import Session, WebConsole, bound_url
from tests.environment import unavailable
from tests.tui.conftest import Harness

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "screenshots" / "web.png"
UPDATE = "ALARMTOP_UPDATE_SCREENSHOTS"  # set: the test rewrites SCREENSHOT
START_S = 30.0
DRAW_S = 30.0
URL_LINE = re.compile(r"on (http://127\.0\.0\.1:\d+)/")
ANSI = re.compile(r"\x1b(\[[0-9;?<=>]*[ -/]*[@-~]"  # CSI
                  r"|\][^\x07\x1b]*(\x07|\x1b\\)|[PX^_][^\x1b]*\x1b\\"  # OSC, DCS...
                  r"|.)")
# Keeps a copy of what the console sends the page, as text without escape sequences.
CAPTURE = """
(() => {
  window.__drawn = "";
  const Real = window.WebSocket;
  window.WebSocket = function (...args) {
    const ws = new Real(...args);
    ws.addEventListener("message", (e) => {
      if (typeof e.data !== "string") {
        window.__drawn += new TextDecoder().decode(new Uint8Array(e.data));
      }
    });
    return ws;
  };
  window.WebSocket.prototype = Real.prototype;
})();
"""
pytestmark = pytest.mark.timeout(120)


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path is not None:
            return path
    unavailable("no Chromium on this machine (apt-get install chromium)")


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("ALARMTOP_")}
    return {**out, "PYTHONUNBUFFERED": "1"}


def web(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "alarmtop.tui.cli", "web", *args],
                          capture_output=True, text=True, timeout=timeout, env=env(),
                          check=False)


@dataclass
class Web:
    proc: subprocess.Popen[str]
    url: str
    token: str
    viewer_token: str

    def request(self, method: str, path: str, body: str | None = None,
                cookie: str | None = None) -> tuple[int, dict[str, str], str]:
        parts = urllib.parse.urlsplit(self.url)
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
        headers = {"Content-Type": "application/x-www-form-urlencoded"} if body else {}
        if cookie:
            headers["Cookie"] = cookie
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        text = response.read().decode()
        conn.close()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, text


@contextlib.contextmanager
def web_demo(tmp_path: Path, *args: str) -> Iterator[Web]:
    """`alarmtop web --demo` on a free port, with `args` added."""
    data, log = tmp_path / "demo-data", tmp_path / "web.log"
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "alarmtop.tui.cli", "web", "--demo",
                                 "--port", "0", "--data-dir", str(data), *args], env=env(),
                                stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the line saying where it serves
        found = URL_LINE.search(line)
        assert found, f"{line!r}; stderr: {log.read_text()}"
        yield Web(proc, found[1], (data / "operator.token").read_text().strip(),
                  (data / "viewer.token").read_text().strip())
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Web]:
    with web_demo(tmp_path) as w:
        yield w


def login(w: Web, token: str) -> tuple[int, dict[str, str], str]:
    return w.request("POST", "/login", urllib.parse.urlencode({"token": token}))


# -- without a browser: the gate ----------------------------------------------------------

def test_without_a_session_there_is_only_the_login_page(demo: Web) -> None:
    status, _, page = demo.request("GET", "/")
    assert status == 401 and 'action="/login"' in page and "textual-terminal" not in page
    for path in ("/ws", "/static/js/textual.js", "/download/x"):
        assert demo.request("GET", path)[0] == 401, path
    assert demo.request("GET", "/", cookie="alarmtop_session=made-up")[0] == 401


def test_a_wrong_token_gets_the_login_page_again_saying_so(demo: Web) -> None:
    status, headers, page = login(demo, "not-the-token")
    assert status == 401 and "set-cookie" not in headers
    assert "The ops server refused that token." in page and 'action="/login"' in page
    assert "Give a token." in login(demo, "")[2]


def test_a_good_token_gets_an_httponly_session_cookie(demo: Web) -> None:
    status, headers, _ = login(demo, demo.token)
    assert status == 303 and headers["location"] == "/"
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and demo.token not in cookie
    session = cookie.split(";", 1)[0]
    status, headers, page = demo.request("GET", "/", cookie=session)
    assert status == 200 and "textual-terminal" in page
    assert "fonts.googleapis" not in page and "https://" not in page
    assert "default-src 'self'" in headers["content-security-policy"]
    assert demo.request("GET", "/static/js/textual.js", cookie=session)[0] == 200
    assert login(demo, demo.viewer_token)[0] == 303


def test_the_cookie_lasts_as_long_as_an_idle_session(tmp_path: Path) -> None:
    with web_demo(tmp_path, "--session-idle-h", "0.5") as w:
        status, headers, _ = login(w, w.token)
        assert status == 303 and "Max-Age=1800" in headers["set-cookie"]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """`alarmtop serve --demo` on a free port: its ops URL and data dir."""
    data, log = tmp_path / "served", tmp_path / "serve.log"
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "alarmtop.tui.cli", "serve", "--demo",
                                 "--data-dir", str(data), "--port", "0"], env=env(),
                                stdout=subprocess.DEVNULL, stderr=err, text=True)
    try:
        deadline = time.monotonic() + START_S
        while (found := re.search(r"serving (ws://\S+)", log.read_text())) is None:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)  # a real process starting: poll its log
        yield found[1], data
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_console_of_a_server_given_by_url(served: tuple[str, Path], tmp_path: Path
                                              ) -> None:
    url, data = served
    log = tmp_path / "web.log"
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "alarmtop.tui.cli", "web", "--url", url,
                                 "--port", "0"], env=env(), stdout=subprocess.PIPE,
                                stderr=err, text=True)
    try:
        assert proc.stdout is not None
        found = URL_LINE.search(proc.stdout.readline())
        assert found, log.read_text()
        w = Web(proc, found[1], "", "")
        assert login(w, "made-up")[0] == 401
        status, headers, _ = login(w, (data / "viewer.token").read_text().strip())
        assert status == 303 and "HttpOnly" in headers["set-cookie"]
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


# -- sessions: idle expiry and log out --------------------------------------------------

IDLE_S = 3600.0


class Clock:
    """The idle clock of a `WebConsole`, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Local:
    """A `WebConsole` served on 127.0.0.1 in this process, and a client of it."""

    console: WebConsole
    url: str
    clock: Clock
    http: aiohttp.ClientSession
    token: str

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

    async def login(self) -> str:
        """A new session: its `Cookie` header value."""
        status, headers, _ = await self.request("POST", "/login", data={"token": self.token})
        assert status == 303, status
        return headers["set-cookie"].split(";", 1)[0]

    async def live(self, cookie: str) -> bool:
        """Whether `cookie` gets the console page (the request uses the session)."""
        status, _, page = await self.request("GET", "/", cookie)
        assert (status, "textual-terminal" in page) in ((200, True), (401, False)), status
        return status == 200

    async def prune(self) -> None:
        """A request without a session: the gate drops what expired, using nothing."""
        assert (await self.request("GET", "/"))[0] == 401

    def session(self, cookie: str) -> Session | None:
        return self.console.sessions.get(cookie.split("=", 1)[1])

    @contextlib.asynccontextmanager
    async def console_open(self, cookie: str) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
        """The WebSocket of a console, once its process has drawn something."""
        url = self.url.replace("http", "ws", 1) + "/ws?width=100&height=30"
        async with self.http.ws_connect(url, headers={"Cookie": cookie}) as ws:
            first = await ws.receive(timeout=START_S)
            assert first.type == aiohttp.WSMsgType.BINARY, first
            yield ws


@pytest.fixture
def tokens() -> Tokens:
    # Its own tokens: the console processes are found by them in /proc.
    return Tokens(operator=secrets.token_urlsafe(16), viewer=secrets.token_urlsafe(16))


@pytest.fixture
async def local(harness: Harness) -> AsyncIterator[Local]:
    clock, ops_url = Clock(), harness.server.url
    console = WebConsole(ops_url, lambda token: probe(ops_url, token), "test",
                         idle_s=IDLE_S, clock=clock)
    runner = aioweb.AppRunner(console.make_app(), access_log=None)
    await runner.setup()
    try:
        await aioweb.TCPSite(runner, "127.0.0.1", 0).start()
        console.public_url = bound_url(runner)
        async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as client:
            yield Local(console, console.public_url, clock, client, harness.tokens.operator)
    finally:
        await runner.cleanup()


async def eventually(check: Callable[[], bool], what: str, within_s: float = 10.0) -> None:
    """Wait for `check()` to hold: the server ends a console in its own time."""
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_a_session_idle_past_the_limit_gets_the_login_page_again(local: Local) -> None:
    cookie = await local.login()
    assert await local.live(cookie)
    local.clock.now += IDLE_S
    status, _, page = await local.request("GET", "/", cookie)
    assert status == 401 and 'action="/login"' in page
    assert local.console.sessions == {}
    assert (await local.request("GET", "/static/js/textual.js", cookie))[0] == 401
    assert (await local.request("GET", "/login", cookie))[0] == 200  # the form, not "/"


async def test_expired_sessions_are_dropped_at_the_next_login(local: Local) -> None:
    for _ in range(5):
        await local.login()
    local.clock.now += IDLE_S
    cookie = await local.login()
    assert list(local.console.sessions) == [cookie.split("=", 1)[1]]


async def test_a_session_in_use_stays(local: Local) -> None:
    status, headers, _ = await local.request("POST", "/login", data={"token": local.token})
    assert status == 303 and f"Max-Age={IDLE_S:.0f}" in headers["set-cookie"]
    cookie = headers["set-cookie"].split(";", 1)[0]
    for _ in range(3):  # three idle limits in all, never one without a request
        local.clock.now += IDLE_S - 1
        assert (await local.request("GET", "/static/js/textual.js", cookie))[0] == 200
    status, headers, _ = await local.request("GET", "/", cookie)
    assert status == 200 and f"Max-Age={IDLE_S:.0f}" in headers["set-cookie"]  # renewed
    assert len(local.console.sessions) == 1


async def test_an_open_console_keeps_its_session_until_it_closes(local: Local) -> None:
    cookie = await local.login()
    session = local.session(cookie)
    assert session is not None
    async with local.console_open(cookie):
        local.clock.now += 3 * IDLE_S
        await local.prune()
        assert local.session(cookie) is session
        closed_at = local.clock.now
    await eventually(lambda: session.consoles == 0, "the console's end")
    local.clock.now = closed_at + IDLE_S - 1
    await local.prune()
    assert local.session(cookie) is session  # its idle time began when the console closed
    local.clock.now = closed_at + IDLE_S
    assert not await local.live(cookie)


def console_pids(token: str) -> list[int]:
    return processes_with(f"ALARMTOP_OPERATOR_TOKEN={token}", "environ")


async def test_log_out_ends_the_session_and_its_consoles(local: Local) -> None:
    assert (await local.request("POST", "/logout"))[0] == 401  # no session: the gate's 401
    assert (await local.request("POST", "/logout", "alarmtop_session=made-up"))[0] == 401
    cookie, other = await local.login(), await local.login()
    async with local.console_open(cookie) as ws:
        assert console_pids(local.token)
        assert (await local.request("GET", "/logout", cookie))[0] == 405
        foreign = await local.request("POST", "/logout", cookie, origin="http://elsewhere")
        assert foreign[0] == 403 and await local.live(cookie)

        status, headers, _ = await local.request("POST", "/logout", cookie)
        assert status == 303 and headers["location"] == "/login"
        cleared = headers["set-cookie"]
        assert cleared.startswith('alarmtop_session="";') and "Max-Age=0" in cleared
        assert console_pids(local.token) == []  # stopped before the answer
        async for _ in ws:  # what the console drew before it quit, then the close
            pass
        assert ws.closed
    assert not await local.live(cookie)
    assert (await local.request("POST", "/logout", cookie))[0] == 401
    assert await local.live(other)  # the same token's other login is another session
    await eventually(lambda: not local.console.services, "the console's handler to end")


# -- the command line's mistakes ----------------------------------------------------------

def short_failure(done: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert 1 <= len(lines) <= 2 and "Traceback" not in done.stderr, done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


def test_a_bad_url_is_one_line() -> None:
    short_failure(web("--url", "http://127.0.0.1:8765/ops"), 2, "speaks WebSocket", "ws://")
    short_failure(web("--url", "nonsense"), 2, "not a WebSocket URL")
    short_failure(web(), 2, "--demo", "--url")


def test_a_bad_session_idle_limit_is_one_line() -> None:
    for value in ("0", "-1", "soon", "nan", "inf"):
        short_failure(web("--demo", "--session-idle-h", value), 2, "--session-idle-h",
                      "hours above 0", f"not {value}")


def test_nothing_listening_at_the_url_is_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free, and nothing listens on it
    short_failure(web("--url", f"ws://127.0.0.1:{port}/ops"), 1, "cannot connect")


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        done = web("--demo", "--port", str(port), "--data-dir", str(tmp_path / "d"))
    short_failure(done, 1, f"port {port} on 127.0.0.1 is in use")


# -- in Chromium --------------------------------------------------------------------------

def drawn(page: Any) -> str:
    return ANSI.sub("", str(page.evaluate("window.__drawn || ''")))


def wait_drawn(page: Any, text: str, what: str) -> str:
    deadline = time.monotonic() + DRAW_S
    while time.monotonic() < deadline:
        seen = drawn(page)
        if text in seen:
            return seen
        page.wait_for_timeout(100)  # the browser's own pacing, between looks
    raise AssertionError(f"{what}: {text!r} never drawn; last 2000 chars:\n{drawn(page)[-2000:]}")


def processes_with(needle: str, where: str) -> list[int]:
    """Pids of this machine whose `where` (cmdline or environ) contains `needle`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle.encode() in (entry / where).read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_the_console_in_chromium(demo: Web, tmp_path: Path) -> None:
    executable = chromium()
    try:
        from playwright import sync_api
    except ImportError:
        unavailable("Playwright's Python package is not installed (pip install playwright)")
    outside: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, headless=True,
                                     args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 760})
            page.on("request", lambda r: None if r.url.startswith(demo.url) or
                    r.url.startswith(demo.url.replace("http", "ws", 1)) or
                    r.url.startswith("data:") else outside.append(r.url))
            page.add_init_script(CAPTURE)
            page.goto(demo.url + "/")
            assert page.locator("form#login").is_visible()

            page.fill("#token", "wrong-token")
            page.click("#submit")
            assert "refused that token" in page.locator("#message").inner_text()
            assert page.locator(".textual-terminal").count() == 0

            page.fill("#token", demo.token)
            page.click("#submit")
            page.wait_for_selector("body.-first-byte", timeout=DRAW_S * 1000)
            wait_drawn(page, "NEEDS-HUMAN", "the header of the demo's console")
            assert page.evaluate("document.cookie") == ""  # HttpOnly: no script sees it

            assert processes_with(demo.token, "cmdline") == []
            assert processes_with(f"ALARMTOP_OPERATOR_TOKEN={demo.token}", "environ")

            # No click first: the keys go to the console as soon as it draws.
            page.keyboard.press("5")
            wait_drawn(page, "Dead letters (retries", "the dead letters view after 5")
            page.wait_for_timeout(500)  # let the canvas paint what it was sent
            # The README's copy is rewritten only when missing or asked for, so that a
            # test run leaves the tree as it was.
            shot = SCREENSHOT if UPDATE in os.environ or not SCREENSHOT.exists() \
                else tmp_path / "web.png"
            shot.parent.mkdir(exist_ok=True)
            png = page.locator(".textual-terminal").screenshot(path=str(shot))
            assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000

            bar = page.locator(".bar").bounding_box()
            terminal = page.locator(".textual-terminal").bounding_box()
            assert bar is not None and terminal is not None
            assert bar["y"] + bar["height"] <= terminal["y"]  # the bar covers none of it
            assert terminal["y"] + terminal["height"] <= 760  # and pushes none out of sight
            page.click("#logout-button")
            page.wait_for_selector("form#login", timeout=DRAW_S * 1000)
            assert processes_with(f"ALARMTOP_OPERATOR_TOKEN={demo.token}", "environ") == []
            page.goto(demo.url + "/")
            assert page.locator("form#login").is_visible()  # the session is gone
        finally:
            browser.close()
    assert outside == [], outside
