"""`alarmtop web`: serve the console to a browser on 127.0.0.1.

    alarmtop web --demo                       # the embedded demo, its tokens saved
    alarmtop web --url ws://HOST:8765/ops     # an ops server; log in with its token
    alarmtop web --demo --session-idle-h 1    # a login unused for an hour ends
    alarmtop web --url ... --public-origin https://ops.example.com   # behind a TLS proxy

It binds 127.0.0.1 only (the login is a password over plain HTTP: put a TLS proxy
in front to reach it from elsewhere, and name the proxy's origin with
`--public-origin`; the cookie is then `Secure`). A login lasts while it is used:
one idle for `--session-idle-h` hours (no request, no console open) ends, and the
console page's "Log out" ends it at once. With `--demo` the tokens come from
ALARMTOP_OPERATOR_TOKEN / ALARMTOP_VIEWER_TOKEN when set, else from the data
folder (made there on first start), as with `alarmtop serve`. The port is taken
first: a mistake (a URL that is not a WebSocket URL, nothing listening there, the
port in use, textual-serve missing) is one line and a non-zero exit, 2 for the
command line, 1 for the rest, and starts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import signal
import socket
from pathlib import Path

from alarmtop.tui.cli_support import (
    Parser,
    UsageError,
    check_url,
    demo_data,
    embedded,
    fail,
    port_number,
    probe,
    stop_driver,
)

PROG = "alarmtop web"
DEFAULT_PORT = 8766
DEFAULT_IDLE_H = 12.0
NEEDS_EXTRA = ("the console in a browser needs textual-serve: "
               "pip install 'alarmtop[web]'")


class WebError(Exception):
    """`alarmtop web` cannot run; the message says why and what to do."""


def idle_hours(text: str) -> float:
    """argparse type of --session-idle-h: a number of hours above 0."""
    try:
        hours = float(text)
    except ValueError:
        hours = math.nan
    if not (math.isfinite(hours) and hours > 0):
        raise argparse.ArgumentTypeError(f"a session's idle limit is a number of hours "
                                         f"above 0 (e.g. 12 or 0.5), not {text}")
    return hours


def public_origin(text: str) -> str:
    """argparse type of --public-origin: an http(s) origin, no path."""
    from alarmtop.tui.web.limits import origin_of

    try:
        return origin_of(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_web_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description="Serve the console to a browser on 127.0.0.1, behind "
               "a login that checks the token against the ops server.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--demo", action="store_true",
                     help="run the embedded demo runtime and its ops server in this process")
    src.add_argument("--url", help="the ops server's channel, e.g. ws://127.0.0.1:8765/ops")
    p.add_argument("--port", type=port_number, default=DEFAULT_PORT,
                   help=f"port on 127.0.0.1 (default {DEFAULT_PORT}; 0: any free one)")
    p.add_argument("--data-dir", type=Path, help="with --demo: where it keeps its data "
                   "and tokens (default: a temporary folder, removed on exit)")
    p.add_argument("--read-only", action="store_true", help="consoles hide every action")
    p.add_argument("--no-confirm", action="store_true",
                   help="consoles act on re-arm and fire now without asking first")
    p.add_argument("--session-idle-h", type=idle_hours, default=DEFAULT_IDLE_H,
                   metavar="HOURS", help="a login not used for this long ends: no request "
                   f"and no console open (default {DEFAULT_IDLE_H:g}; a fraction is fine)")
    p.add_argument("--public-origin", type=public_origin, action="append", default=[],
                   metavar="URL", help="an origin the page is also served at, e.g. a TLS "
                   "proxy's https://ops.example.com (repeatable); logins from any origin "
                   "other than these and this server's own are refused")
    p.add_argument("--secure-cookie", action="store_true", help="mark the session cookie "
                   "Secure even on logins that did not come over https")
    return p


def listen(port: int) -> socket.socket:
    """The web port, taken before anything else starts; OSError if it cannot be."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


async def check_reachable(url: str) -> None:
    """Say hello to `url` without a token: a refusal shows the server is there."""
    from alarmtop.tui.client import CommandError, Disconnected

    try:
        await probe(url, "")
    except CommandError:
        return
    except Disconnected as exc:
        raise WebError(f"cannot connect to {url}: {exc.reason}") from None


async def serve_web(ops_url: str, target: str, sock: socket.socket,
                    args: argparse.Namespace, note: str = "") -> None:
    """Serve on `sock` (bound already) until SIGINT or SIGTERM."""
    from aiohttp import web

    from alarmtop.tui.web.server import WebConsole, bound_url

    console = WebConsole(ops_url, lambda token: probe(ops_url, token), target,
                         read_only=args.read_only, confirm=not args.no_confirm,
                         idle_s=args.session_idle_h * 3600,
                         public_origins=args.public_origin, secure_cookie=args.secure_cookie)
    runner = web.AppRunner(console.make_app(), access_log=None, shutdown_timeout=3.0)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    console.public_url = bound_url(runner)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    also = "".join(f", and as {o}/" for o in console.public_origins)
    print(f"{PROG}: the console of {target} on {console.public_url}/{also} (log in with an "
          f"operator or viewer token{note}); Ctrl-C stops", flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


async def serve_demo(data_dir: Path, sock: socket.socket, args: argparse.Namespace) -> None:
    """The demo runtime and its ops server in this process, and the web console on it.
    Its tokens are the environment's, else those saved under `data_dir` (made and saved
    there on first start), like `alarmtop serve`'s."""
    from alarmtop.examples.demo import build_demo_runtime, start_demo_driver
    from alarmtop.server.auth import read_tokens, save_tokens

    try:
        tokens, new = read_tokens(data_dir)
    except ValueError as exc:  # a token file not to use, or the same token for both roles
        raise WebError(str(exc)) from None
    rt = build_demo_runtime(data_dir)
    async with embedded(rt, tokens) as server:
        save_tokens(tokens, new, data_dir)
        driver = start_demo_driver(rt)
        try:
            await serve_web(server.url, f"demo@127.0.0.1:{server.port}", sock, args,
                            f": the operator's is {operator_token_source(data_dir)}")
        finally:
            await stop_driver(driver)


def operator_token_source(data_dir: Path) -> str:
    """Where the demo's operator token is, as the startup line says it."""
    from alarmtop.server.auth import token_path

    var = "ALARMTOP_OPERATOR_TOKEN"
    return f"in ${var}" if os.environ.get(var) else f"in {token_path(data_dir, 'operator')}"


def web_main(argv: list[str]) -> int:
    args = build_web_parser().parse_args(argv)
    try:
        import textual_serve  # noqa: F401
    except ImportError:
        return fail(NEEDS_EXTRA, 1, PROG)
    from alarmtop.core.model.errors import AlarmtopError
    from alarmtop.server.serve import ServeError, bind_error, check_data_dir

    logging.getLogger("alarmtop").addHandler(logging.NullHandler())
    try:
        if args.data_dir is not None:
            check_data_dir(args.data_dir)
        url = None if args.demo else check_url(args.url)
    except (UsageError, ServeError) as exc:
        return fail(exc, 2, PROG)
    try:
        sock = listen(args.port)  # first: a port in use starts (and prints) nothing
    except OSError as exc:
        return fail(bind_error(exc, "127.0.0.1", args.port), 1, PROG)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            if url is not None:
                asyncio.run(check_reachable(url))
                target = url.split("://", 1)[-1].split("/", 1)[0]
                asyncio.run(serve_web(url, target, sock, args))
            else:
                with demo_data(args.data_dir) as (data_dir, _):
                    asyncio.run(serve_demo(data_dir, sock, args))
    except (WebError, AlarmtopError) as exc:
        return fail(exc, 1, PROG)
    finally:
        sock.close()
    return 0
