"""`alarmtop web`: serve the console to a browser on 127.0.0.1.

    alarmtop web --demo                       # the embedded demo, its tokens saved
    alarmtop web --url ws://HOST:8765/ops     # an ops server; log in with its token
    alarmtop web --demo --session-idle-h 1    # a login unused for an hour ends

It binds 127.0.0.1 only (the login is a password over plain HTTP: put a TLS proxy
in front to reach it from elsewhere). A login lasts while it is used: one idle
for `--session-idle-h` hours (no request, no console open) ends, and the console
page's "Log out" ends it at once. A mistake (a URL that is not a WebSocket
URL, nothing listening there, the port in use, textual-serve missing) is one line
and a non-zero exit: 2 for the command line, 1 for the rest.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import secrets
import signal
from pathlib import Path

from alarmtop.tui.cli import Parser, UsageError, check_url, demo_data, fail, port_number

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
    return p


async def check_reachable(url: str) -> None:
    """Say hello to `url` without a token: a refusal shows the server is there."""
    from alarmtop.tui.cli import probe
    from alarmtop.tui.client import CommandError, Disconnected

    try:
        await probe(url, "")
    except CommandError:
        return
    except Disconnected as exc:
        raise WebError(f"cannot connect to {url}: {exc.reason}") from None


async def serve_web(ops_url: str, target: str, port: int, args: argparse.Namespace,
                    note: str = "") -> None:
    """Serve until SIGINT or SIGTERM."""
    from aiohttp import web

    from alarmtop.server.serve import bind_error
    from alarmtop.tui.cli import probe
    from alarmtop.tui.web.server import WebConsole, bound_url

    console = WebConsole(ops_url, lambda token: probe(ops_url, token), target,
                         read_only=args.read_only, confirm=not args.no_confirm,
                         idle_s=args.session_idle_h * 3600)
    runner = web.AppRunner(console.make_app(), access_log=None, shutdown_timeout=3.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", port).start()
    except OSError as exc:
        await runner.cleanup()
        raise WebError(str(bind_error(exc, "127.0.0.1", port))) from None
    console.public_url = bound_url(runner)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    print(f"{PROG}: the console of {target} on {console.public_url}/ (log in with an "
          f"operator or viewer token{note}); Ctrl-C stops", flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


async def serve_demo(data_dir: Path, port: int, args: argparse.Namespace) -> None:
    """The demo runtime and its ops server in this process, its tokens saved under
    `data_dir` for the login, and the web console on it."""
    from alarmtop.examples.demo import build_demo_runtime, drive_demo
    from alarmtop.server.auth import Tokens, save_tokens, token_path
    from alarmtop.tui.cli import embedded, stop_driver

    rt = build_demo_runtime(data_dir)
    tokens = Tokens(secrets.token_urlsafe(16), secrets.token_urlsafe(16))
    async with embedded(rt, tokens) as server:
        save_tokens(tokens, ["operator", "viewer"], data_dir)
        driver = asyncio.create_task(drive_demo(rt))
        try:
            await serve_web(server.url, f"demo@127.0.0.1:{server.port}", port, args,
                            f": the operator's is in {token_path(data_dir, 'operator')}")
        finally:
            await stop_driver(driver)


def web_main(argv: list[str]) -> int:
    args = build_web_parser().parse_args(argv)
    try:
        import textual_serve  # noqa: F401
    except ImportError:
        return fail(NEEDS_EXTRA, 1, PROG)
    from alarmtop.core.model.errors import AlarmtopError
    from alarmtop.server.serve import ServeError, check_data_dir

    logging.getLogger("alarmtop").addHandler(logging.NullHandler())
    try:
        if args.data_dir is not None:
            check_data_dir(args.data_dir)
        url = None if args.demo else check_url(args.url)
    except (UsageError, ServeError) as exc:
        return fail(exc, 2, PROG)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            if url is not None:
                asyncio.run(check_reachable(url))
                target = url.split("://", 1)[-1].split("/", 1)[0]
                asyncio.run(serve_web(url, target, args.port, args))
            else:
                with demo_data(args.data_dir) as (data_dir, _):
                    asyncio.run(serve_demo(data_dir, args.port, args))
    except (WebError, AlarmtopError) as exc:
        return fail(exc, 1, PROG)
    return 0
