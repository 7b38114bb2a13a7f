"""The web server of `alarmtop web`: textual-serve's pages behind a login.

`WebConsole` is textual-serve's `Server` with a gate in front of every route but
`/login`: a request without a live session cookie gets the login page (status
401), or a bare 401 for the WebSocket and static files. `POST /login` checks the
token with a hello to the ops server; a token it accepts starts a session
(a random id in an HttpOnly, SameSite=Strict cookie, the token kept in this
process only). Each browser WebSocket runs one console process with that
session's token in its environment.

The page is served to the origins it knows: the address it listens on (as
127.0.0.1 and as localhost) and each `public_origins` (`--public-origin`, e.g. a
TLS proxy's https://ops.example.com); a request from any other `Origin` is
refused, and the page finds its WebSocket and files at whatever origin it was
loaded from. The cookie is `Secure` when the login came over https, or when
told (`--secure-cookie`). Wrong tokens are throttled per client address, and a
login runs a few consoles at most, at a clamped size (`limits`).

A session not used for `idle_s` seconds (`--session-idle-h`) is dropped: its
cookie then gets the login page like no cookie. Every request through the gate
uses it, and so does each console it has open, for as long as it is open (its
idle time starts when the last one closes). The cookie's Max-Age is the idle
limit, renewed with each response. `POST /logout` drops the session at once,
stops its consoles and clears the cookie. Expired sessions are pruned at each
request, so repeated logins do not pile up.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import secrets
import shlex
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp_jinja2
import jinja2
from aiohttp import web
from textual_serve.app_service import AppService
from textual_serve.server import Server, to_int

from alarmtop.tui.web.limits import (
    ConsoleCaps,
    LoginThrottle,
    clamp_size,
    origin_of,
    websocket_origins,
)

TEMPLATES = Path(__file__).parent / "templates"
COOKIE = "alarmtop_session"
TOKEN_VARS = {"operator": "ALARMTOP_OPERATOR_TOKEN", "viewer": "ALARMTOP_VIEWER_TOKEN"}
STOP_S = 2.0  # a console process told to quit is killed after this
CLOSE_TRY_AGAIN = 1013  # a console refused for a cap: the page may try again later
MAX_CLOSE_REASON = 123  # bytes of a WebSocket close frame's reason
IDLE_S = 12 * 3600.0  # the default idle limit of a session
# The page may load from this server only (its script and style are inline).
CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' "
       "'unsafe-inline'; img-src 'self' data:; font-src 'self'; connect-src 'self' {ws}; "
       "frame-ancestors 'none'; form-action 'self'; base-uri 'none'")

Check = Callable[[str], Awaitable[str]]  # token -> role; raises CommandError/Disconnected


@dataclass(eq=False)
class Session:
    """One login: its token and role, when it was last used (on the console's clock),
    how many consoles it has open (while one is, it is in use), and whether its cookie
    is `Secure`."""

    token: str
    role: str
    used: float
    consoles: int = 0
    secure: bool = False


class SessionAppService(AppService):
    """One console process, with its session's token in its environment (and none of
    this process's own tokens)."""

    def __init__(self, command: str, session: Session, **kwargs: Any) -> None:
        super().__init__(command, **kwargs)
        self.session = session

    def _build_environment(self, width: int = 80, height: int = 24) -> dict[str, str]:
        width, height = clamp_size(width, height)
        env = super()._build_environment(width=width, height=height)
        for name in TOKEN_VARS.values():
            env.pop(name, None)
        env[TOKEN_VARS[self.session.role]] = self.session.token
        return env

    async def set_terminal_size(self, width: int, height: int) -> None:
        """A resize from the page, clamped like the first size."""
        await super().set_terminal_size(*clamp_size(width, height))

    async def stop_within(self, seconds: float) -> None:
        """Ask the console to quit; kill its process if it has not within `seconds`.
        Returns once the process has exited."""
        process = self._process
        if process is None:
            return
        try:
            # textual-serve's stop() ends with the console's output, not with its
            # process: wait for that too, so that none is left running (nor unreaped).
            await asyncio.wait_for(self._stop_and_wait(process), seconds)
        except (TimeoutError, RuntimeError, ConnectionError):
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()

    async def _stop_and_wait(self, process: asyncio.subprocess.Process) -> None:
        await self.stop()
        await process.wait()


def console_command(ops_url: str, read_only: bool, confirm: bool) -> str:
    """The shell command of one console (textual-serve runs it through a shell)."""
    args = [sys.executable, "-m", "alarmtop.tui.cli", "--url", ops_url]
    if read_only:
        args.append("--read-only")
    if not confirm:
        args.append("--no-confirm")
    # exec: the process textual-serve holds is the console itself, so that a kill
    # ends it (not a shell, leaving the console running with the session's token).
    return "exec " + shlex.join(args)


class WebConsole(Server):
    """textual-serve's server for the console on `ops_url`, behind a login."""

    def __init__(self, ops_url: str, check: Check, target: str, *, read_only: bool = False,
                 confirm: bool = True, idle_s: float = IDLE_S,
                 clock: Callable[[], float] = time.monotonic,
                 public_origins: Iterable[str] = (), secure_cookie: bool = False,
                 caps: ConsoleCaps | None = None) -> None:
        super().__init__(console_command(ops_url, read_only, confirm), host="127.0.0.1",
                         port=0, title=f"alarmtop: {target}", templates_path=TEMPLATES)
        self.ops_url = ops_url
        self.target = target
        self._check = check
        self.idle_s = idle_s
        self._clock = clock
        self.public_origins = [origin_of(o) for o in public_origins]
        self.secure_cookie = secure_cookie
        self.caps = caps or ConsoleCaps()
        self.throttle = LoginThrottle(clock)
        self.sessions: dict[str, Session] = {}
        self.services: set[SessionAppService] = set()
        self.consoles = 0  # console WebSockets open, over every session

    def origins(self) -> list[str]:
        """The origins the page is served to: where it listens, and the public ones."""
        local = self.public_url
        return [local, local.replace("//127.0.0.1:", "//localhost:", 1), *self.public_origins]

    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._gate])
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(TEMPLATES))
        app.add_routes([
            web.get("/login", self.login_page),
            web.post("/login", self.login),
            web.post("/logout", self.logout),  # a GET of it is a 405: it changes state
            web.get("/", self.handle_index, name="index"),
            web.get("/ws", self.handle_websocket, name="websocket"),
            web.get("/download/{key}", self.handle_download, name="download"),
            web.static("/static", self.statics_path, name="static"),
        ])
        app.on_shutdown.append(self._stop_consoles)
        return app

    # -- the gate ----------------------------------------------------------------------

    def session_of(self, request: web.Request) -> Session | None:
        return self.sessions.get(request.cookies.get(COOKIE, ""))

    def _prune(self, now: float) -> None:
        """Drop the sessions idle past the limit (none with a console open)."""
        idle = [sid for sid, s in self.sessions.items()
                if s.consoles == 0 and now - s.used >= self.idle_s]
        for sid in idle:
            del self.sessions[sid]

    def _set_cookie(self, response: web.StreamResponse, sid: str, secure: bool) -> None:
        # Ceil: the browser must not forget the cookie before the session ends.
        response.set_cookie(COOKIE, sid, httponly=True, samesite="Strict", path="/",
                            max_age=max(1, math.ceil(self.idle_s)), secure=secure or None)

    def _same_origin(self, request: web.Request) -> bool:
        origin = request.headers.get("Origin")
        return origin is None or origin.rstrip("/").lower() in self.origins()

    def _secure(self, request: web.Request) -> bool:
        """Whether a login's cookie is `Secure`: told so, or it came over https (to
        this server, or to a proxy whose https origin the browser names)."""
        origin = request.headers.get("Origin", "")
        return self.secure_cookie or request.secure or origin.lower().startswith("https://")

    @web.middleware
    async def _gate(self, request: web.Request,
                    handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                    ) -> web.StreamResponse:
        if not self._same_origin(request):
            raise web.HTTPForbidden(text="alarmtop web: requests from other sites are refused")
        now = self._clock()
        self._prune(now)
        sid = request.cookies.get(COOKIE, "")
        session = self.sessions.get(sid)
        if session is not None:
            session.used = now
        if request.path != "/login" and session is None:
            if request.path == "/":
                response: web.StreamResponse = self._login_form(request, "", 401)
            else:
                raise web.HTTPUnauthorized(text="alarmtop web: log in first at /login")
        else:
            response = await handler(request)
            # The cookie's Max-Age slides with the session's use. A prepared response
            # (a WebSocket's, once closed) has sent its headers already.
            if session is not None and sid in self.sessions and not response.prepared:
                self._set_cookie(response, sid, session.secure)
        ws = " ".join(websocket_origins(self.origins()))
        response.headers.setdefault("Content-Security-Policy", CSP.format(ws=ws))
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "same-origin")  # "null" Origin else
        return response

    async def handle_index(self, request: web.Request) -> web.StreamResponse:
        """textual-serve's page, its addresses relative to wherever it was loaded from
        (a proxy's origin, or this server's): the page works out its WebSocket's."""
        context = {"font_size": to_int(request.query.get("fontsize", "16"), 16),
                   "config": {"static": {"url": "/static/"}},
                   "application": {"name": self.title}}
        return aiohttp_jinja2.render_template("app_index.html", request, context)

    def _login_form(self, request: web.Request, message: str, status: int) -> web.Response:
        return aiohttp_jinja2.render_template(
            "login.html", request, {"message": message, "target": self.target},
            status=status)

    async def login_page(self, request: web.Request) -> web.StreamResponse:
        if self.session_of(request) is not None:
            raise web.HTTPSeeOther("/")
        return self._login_form(request, "", 200)

    async def login(self, request: web.Request) -> web.StreamResponse:
        from alarmtop.tui.client import CommandError, Disconnected

        form = await request.post()
        token = str(form.get("token", "")).strip()
        if not token:
            return self._login_form(request, "Give a token.", 401)
        address = request.remote or "?"
        wait_s = self.throttle.wait_s(address)
        if wait_s:
            response = self._login_form(request, f"Too many wrong tokens from your address: "
                                        f"try again in {wait_s:g} s.", 429)
            response.headers["Retry-After"] = f"{wait_s:g}"
            return response
        try:
            role = await self._check(token)
        except CommandError:
            self.throttle.failed(address)
            return self._login_form(request, "The ops server refused that token.", 401)
        except Disconnected as exc:
            return self._login_form(request, f"The ops server does not answer: {exc.reason}",
                                    503)
        if role not in TOKEN_VARS:
            return self._login_form(request, f"The ops server gave that token an unknown role "
                                    f"({role}).", 401)
        sid = secrets.token_urlsafe(32)
        session = self.sessions[sid] = Session(token, role, self._clock(),
                                               secure=self._secure(request))
        done = web.HTTPSeeOther("/")
        self._set_cookie(done, sid, session.secure)
        raise done

    async def logout(self, request: web.Request) -> web.StreamResponse:
        """End the session now: drop it, stop its consoles, clear the cookie."""
        session = self.sessions.pop(request.cookies.get(COOKIE, ""), None)
        if session is not None:  # else a logout of the same session won the race
            await asyncio.gather(*(self._end_console(s) for s in list(self.services)
                                   if s.session is session))
        done = web.HTTPSeeOther("/login")
        done.del_cookie(COOKIE, path="/", httponly=True, samesite="Strict",
                        secure=(session is not None and session.secure) or None)
        raise done

    # -- the console of a session -------------------------------------------------------

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """textual-serve's handler, with the session's console process."""
        sid = request.cookies.get(COOKIE, "")
        session = self.sessions.get(sid)
        assert session is not None  # the gate let it through
        websocket = web.WebSocketResponse(heartbeat=15)
        width, height = clamp_size(request.query.get("width"), request.query.get("height"))
        refusal = self.caps.refusal(session.consoles, self.consoles)
        if refusal is not None:
            return await self._refuse_console(request, websocket, refusal)
        session.consoles += 1  # before any await: in use from the gate on
        self.consoles += 1
        try:
            await websocket.prepare(request)
            if self.sessions.get(sid) is not session:  # logged out during the handshake
                await websocket.close()
                return websocket
            service = SessionAppService(
                self.command, session, write_bytes=websocket.send_bytes,
                write_str=websocket.send_str, close=websocket.close,
                download_manager=self.download_manager)
            self.services.add(service)
            try:
                await service.start(width, height)
                await self._process_messages(websocket, service)
            finally:
                self.services.discard(service)
                await service.stop_within(STOP_S)
        finally:
            session.consoles -= 1
            self.consoles -= 1
            session.used = self._clock()  # its idle time starts when its last console closes
        return websocket

    async def _refuse_console(self, request: web.Request, websocket: web.WebSocketResponse,
                              refusal: str) -> web.WebSocketResponse:
        """No console process: the reason on the page's terminal and in the close."""
        await websocket.prepare(request)
        await websocket.send_bytes(f"\r\nalarmtop web: {refusal}\r\n".encode())
        await websocket.close(code=CLOSE_TRY_AGAIN,
                              message=refusal.encode()[:MAX_CLOSE_REASON])
        return websocket

    async def _end_console(self, service: SessionAppService) -> None:
        """Stop a console and close its WebSocket (its handler then ends)."""
        await service.stop_within(STOP_S)
        await service.remote_close()

    async def _stop_consoles(self, app: web.Application) -> None:
        await asyncio.gather(*(s.stop_within(STOP_S) for s in list(self.services)))


def bound_url(runner: web.AppRunner) -> str:
    """The http:// URL a started runner listens on."""
    host, port = runner.addresses[0][:2]
    return f"http://{host}:{port}"
