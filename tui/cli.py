"""The `alarmtop` command line.

`alarmtop` opens the console on a server (`--url`, `--token`, `--read-only`);
`alarmtop --demo` runs the embedded demo runtime and its server in this process
and opens the console on it (`--events` prints the event stream instead);
`alarmtop serve` runs a runtime and its server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import secrets
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from alarmtop.core import Event, configure_logging


def format_event(event: Event) -> str:
    when = datetime.fromtimestamp(event.at_ms / 1000, tz=UTC).strftime("%H:%M:%S.%f")
    data = dict(event.data)
    obj = data.pop("object", "")
    rest = " ".join(f"{k}={v}" for k, v in data.items())
    return f"{when[:-3]}  {event.type:<24} {obj:<28} {rest}".rstrip()


async def _run_demo(data_dir: Path, duration: float | None) -> None:
    from alarmtop.examples.demo import build_demo_runtime, drive_demo

    rt = build_demo_runtime(data_dir)
    events = rt.events.subscribe()
    async with rt:
        driver = asyncio.create_task(drive_demo(rt))
        try:
            async with asyncio.timeout(duration):
                async for event in events:
                    print(format_event(event), flush=True)
        except TimeoutError:
            pass
        finally:
            driver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await driver


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="alarmtop", description="Watch and steer durable "
                                "objects, alarms and sagas. `alarmtop serve --help` for the "
                                "server.")
    p.add_argument("--demo", action="store_true",
                   help="run the embedded demo runtime and server in this process")
    p.add_argument("--url", default=os.environ.get("ALARMTOP_URL", "ws://127.0.0.1:8765/ops"),
                   help="the server's ops channel (default ws://127.0.0.1:8765/ops)")
    p.add_argument("--token", default=None, help="access token (default: "
                   "ALARMTOP_OPERATOR_TOKEN, then ALARMTOP_VIEWER_TOKEN)")
    p.add_argument("--read-only", action="store_true", help="hide and refuse every action")
    p.add_argument("--data-dir", type=Path, help="where the demo keeps its data "
                   "(default: a fresh temporary folder)")
    p.add_argument("--events", action="store_true",
                   help="with --demo: print the runtime's events instead of the console")
    p.add_argument("--duration", type=float, help="with --demo --events: stop after seconds")
    p.add_argument("--log-json", action="store_true", help="structured logs as JSON lines")
    return p


async def _demo_console(data_dir: Path, read_only: bool) -> None:
    """The demo runtime, its server on a free local port, and the console on it."""
    from alarmtop.examples.demo import build_demo_runtime, drive_demo
    from alarmtop.server.app import OpsServer
    from alarmtop.server.auth import Tokens
    from alarmtop.tui.app import AlarmtopApp
    from alarmtop.tui.client import WebSocketOpsClient

    rt = build_demo_runtime(data_dir)
    tokens = Tokens(secrets.token_urlsafe(16), secrets.token_urlsafe(16))
    async with rt:
        server = OpsServer(rt, tokens, "127.0.0.1", 0)
        await server.start()
        driver = asyncio.create_task(drive_demo(rt))
        try:
            app = AlarmtopApp(WebSocketOpsClient(server.url, tokens.operator),
                              target=f"demo@127.0.0.1:{server.port}", read_only=read_only)
            await app.run_async()
        finally:
            driver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await driver
            await server.stop()


def _console(url: str, token: str | None, read_only: bool) -> int:
    from alarmtop.tui.app import AlarmtopApp
    from alarmtop.tui.client import WebSocketOpsClient

    token = token or os.environ.get("ALARMTOP_OPERATOR_TOKEN") or os.environ.get(
        "ALARMTOP_VIEWER_TOKEN")
    if not token:
        print("alarmtop: give --token (or set ALARMTOP_OPERATOR_TOKEN / ALARMTOP_VIEWER_TOKEN; "
              "`alarmtop serve` prints and saves them), or try: alarmtop --demo",
              file=sys.stderr)
        return 2
    target = url.split("://", 1)[-1].split("/", 1)[0]
    AlarmtopApp(WebSocketOpsClient(url, token), target=target, read_only=read_only).run()
    return 0


def build_serve_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="alarmtop serve", description="Run a runtime and its ops "
                                "server (WebSocket /ops, object sockets, /metrics).")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--app", help="MODULE:FACTORY; FACTORY(data_dir) returns a Runtime")
    src.add_argument("--demo", action="store_true", help="serve the embedded demo")
    p.add_argument("--data-dir", type=Path, default=Path("./data"))
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--tls-cert", type=Path, help="certificate (PEM) to serve wss://")
    p.add_argument("--tls-key", type=Path, help="private key of --tls-cert")
    p.add_argument("--log-json", action="store_true", help="structured logs as JSON lines")
    return p


def serve_main(argv: list[str]) -> int:
    from alarmtop.server.serve import build_runtime, load_factory, serve_forever, tls_context

    args = build_serve_parser().parse_args(argv)
    configure_logging(json_lines=args.log_json)
    if args.demo:
        from alarmtop.examples.demo import build_demo_runtime
        factory = build_demo_runtime
    else:
        factory = load_factory(args.app)

    async def run() -> None:
        rt = await build_runtime(factory, args.data_dir)
        await serve_forever(rt, args.data_dir, args.host, args.port,
                            tls_context(args.tls_cert, args.tls_key), demo=args.demo)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        return serve_main(argv[1:])
    args = build_parser().parse_args(argv)
    if not args.demo:
        return _console(args.url, args.token, args.read_only)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="alarmtop-demo-"))
    if args.events:
        configure_logging(json_lines=args.log_json)
        print(f"alarmtop demo: data in {data_dir}; Ctrl-C to stop", file=sys.stderr)
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_run_demo(data_dir, args.duration))
        return 0
    # The console owns the terminal: logs would scribble over it.
    logging.getLogger("alarmtop").addHandler(logging.NullHandler())
    logging.getLogger("alarmtop").propagate = False
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_demo_console(data_dir, args.read_only))
    return 0
