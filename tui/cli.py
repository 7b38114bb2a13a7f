"""The `alarmtop` command line.

`alarmtop` opens the console on a server (`--url`, `--token-file` or the token
from the environment, `--read-only`); `alarmtop --demo` runs the embedded demo
runtime and its server in this process and opens the console on it (`--events`
prints the event stream instead); `alarmtop serve` runs a runtime and its server;
`alarmtop web` serves the console to a browser (`alarmtop.tui.web`). What the two
command lines share is in `cli_support.py`, which `web/cli.py` imports instead of this.

A mistake (a URL that is not a WebSocket URL, a wrong token, nothing listening,
TLS on one side only, a port in use, a data dir that is a file) is one or two
lines saying what is wrong and how to fix it, and a non-zero exit: 2 for a bad
command line, 1 for anything else. Never a traceback for those.

`--demo` without `--data-dir` keeps its data in a temporary folder, removed on
exit (it says where first). Quitting the demo console (`q`, SIGINT, SIGTERM)
stops its embedded server and runtime within 2 s whatever is running.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import secrets
import signal
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from alarmtop.core import Event, configure_logging
from alarmtop.tui.cli_support import (
    DEFAULT_URL,
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

TOKEN_ARGV_WARNING = ("alarmtop: warning: --token puts the token on the command line, where "
                      "every local user can read it (ps); use --token-file PATH or "
                      "ALARMTOP_OPERATOR_TOKEN instead")


def format_event(event: Event) -> str:
    when = datetime.fromtimestamp(event.at_ms / 1000, tz=UTC).strftime("%H:%M:%S.%f")
    data = dict(event.data)
    obj = data.pop("object", None) or ""
    # Fields an event has no value for say nothing ("id=None name=None" said noise).
    rest = " ".join(f"{k}={v}" for k, v in data.items() if v is not None)
    return f"{when[:-3]}  {event.type:<24} {obj:<28} {rest}".rstrip()


def console_token(token_file: Path | None, token: str | None) -> str:
    """The token the console says hello with: --token-file, --token (with a warning),
    then ALARMTOP_OPERATOR_TOKEN, then ALARMTOP_VIEWER_TOKEN; `UsageError` if none."""
    from alarmtop.server.auth import TokenFileError, read_token_file

    if token_file is not None and token is not None:
        raise UsageError("give --token-file or --token, not both")
    if token_file is not None:
        try:
            return read_token_file(token_file)
        except TokenFileError as exc:
            raise UsageError(str(exc)) from None
    if token is not None:
        print(TOKEN_ARGV_WARNING, file=sys.stderr)
        return token
    found = os.environ.get("ALARMTOP_OPERATOR_TOKEN") or os.environ.get(
        "ALARMTOP_VIEWER_TOKEN")
    if not found:
        raise UsageError("no token: give --token-file PATH (`alarmtop serve` saves them under "
                         "its data dir), or set ALARMTOP_OPERATOR_TOKEN or "
                         "ALARMTOP_VIEWER_TOKEN; or try: alarmtop --demo")
    return found


def positive_seconds(text: str) -> float:
    """argparse type of a duration: seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"seconds > 0, e.g. 5, not {text}")
    return value


async def _run_demo(data_dir: Path, duration: float | None,
                    cleanup: Callable[[], None] | None = None) -> None:
    from alarmtop.examples.demo import build_demo_runtime, start_demo_driver
    from alarmtop.server.serve import RUNTIME_GRACE_S, leave_now

    rt = build_demo_runtime(data_dir)
    events = rt.events.subscribe()
    await rt.start()
    driver = start_demo_driver(rt)
    try:
        async with asyncio.timeout(duration):
            async for event in events:
                print(format_event(event), flush=True)
    except TimeoutError:
        pass
    finally:
        await stop_driver(driver)
        await rt.stop(RUNTIME_GRACE_S)
        if rt.abandoned:
            leave_now(0, abandoned=True, cleanup=cleanup)


def distribution_version() -> str:
    """The installed distribution's version (pyproject's, once installed)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("alarmtop")
    except PackageNotFoundError:
        return "(not installed: run from a source tree)"


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="alarmtop", description="Watch and steer durable objects, alarms and "
               "sagas. `alarmtop serve --help` for the server, `alarmtop web --help` for the "
               "console in a browser. Also `python -m alarmtop`.")
    p.add_argument("--version", action="version",
                   version=f"alarmtop {distribution_version()}")
    p.add_argument("--demo", action="store_true",
                   help="run the embedded demo runtime and server in this process")
    p.add_argument("--url", default=os.environ.get("ALARMTOP_URL", DEFAULT_URL),
                   help=f"the server's ops channel (default {DEFAULT_URL})")
    p.add_argument("--token-file", type=Path, default=None,
                   help="file holding the access token (mode 0600), e.g. DATA_DIR/"
                   "operator.token; default: ALARMTOP_OPERATOR_TOKEN, then "
                   "ALARMTOP_VIEWER_TOKEN")
    p.add_argument("--token", default=None, help="the access token itself (visible to "
                   "every local user in ps: prefer --token-file or the environment)")
    p.add_argument("--read-only", action="store_true", help="hide and refuse every action")
    p.add_argument("--no-confirm", action="store_true",
                   help="act on re-arm and fire now without asking first")
    p.add_argument("--data-dir", type=Path, help="where the demo keeps its data "
                   "(default: a temporary folder, removed on exit)")
    p.add_argument("--events", action="store_true",
                   help="with --demo: print the runtime's events instead of the console")
    p.add_argument("--duration", type=float, help="with --demo --events: stop after seconds")
    p.add_argument("--log-json", action="store_true", help="structured logs as JSON lines")
    return p


async def _demo_console(data_dir: Path, read_only: bool, confirm: bool = True,
                        cleanup: Callable[[], None] | None = None) -> None:
    """The demo runtime, its server on a free local port, and the console on it."""
    from alarmtop.examples.demo import build_demo_runtime, start_demo_driver
    from alarmtop.server.auth import Tokens
    from alarmtop.server.serve import leave_now
    from alarmtop.tui.app import AlarmtopApp
    from alarmtop.tui.client import WebSocketOpsClient

    rt = build_demo_runtime(data_dir)
    tokens = Tokens(secrets.token_urlsafe(16), secrets.token_urlsafe(16))
    async with embedded(rt, tokens) as server:
        driver = start_demo_driver(rt)
        app = AlarmtopApp(WebSocketOpsClient(server.url, tokens.operator),
                          target=f"demo@127.0.0.1:{server.port}", read_only=read_only,
                          confirm_actions=confirm)
        loop = asyncio.get_running_loop()
        # A signal (kill, or Ctrl-C outside the console's raw terminal) quits as q does.
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, app.exit)
        try:
            await app.run_async()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(sig)
            await stop_driver(driver)
    if rt.abandoned or server.abandoned:
        # A task ignored its cancellation: the loop's close would wait for it forever.
        leave_now(0, abandoned=True, cleanup=cleanup)


def _console(url: str, token_file: Path | None, token: str | None, read_only: bool,
             confirm: bool = True) -> int:
    from alarmtop.tui.app import AlarmtopApp
    from alarmtop.tui.client import CommandError, Disconnected, WebSocketOpsClient

    try:
        url = check_url(url)
        token = console_token(token_file, token)
    except UsageError as exc:
        return fail(exc, 2)
    try:
        asyncio.run(probe(url, token))
    except CommandError as exc:
        return fail(f"{url} refused the token ({exc}): check --token-file or "
                     "ALARMTOP_*_TOKEN; `alarmtop serve` printed its tokens when it made them "
                     "and keeps them under its data dir", 1)
    except Disconnected as exc:
        return fail(f"cannot connect to {url}: {exc.reason}", 1)
    target = url.split("://", 1)[-1].split("/", 1)[0]
    app = AlarmtopApp(WebSocketOpsClient(url, token), target=target, read_only=read_only,
                      confirm_actions=confirm)
    app.run()
    # The feed stops for good only when the server refuses the token (say, rotated).
    return 1 if app.state.status.startswith("refused") else 0


class ServeParser(Parser):
    """`alarmtop serve`'s: an unknown flag is reported before a missing --app (argparse
    checks required arguments first, so `serve --frob` said --app was missing)."""

    def parse_known_args(  # type: ignore[override]
            self, args: Any = None, namespace: Any = None) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if not extras and not parsed.app and not parsed.demo:
            self.error("one of the arguments --app --demo is required")
        return parsed, extras


def build_serve_parser() -> argparse.ArgumentParser:
    p = ServeParser(prog="alarmtop serve", description="Run a runtime and its ops server "
                    "(WebSocket /ops, object sockets, /metrics).")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--app", help="MODULE:FACTORY: FACTORY(data_dir) returns a Runtime; "
                     "MODULE is looked for in the current folder first (e.g. myapp:build "
                     "for build() in ./myapp.py), then among the installed packages")
    src.add_argument("--demo", action="store_true", help="serve the embedded demo")
    p.add_argument("--data-dir", type=Path, default=Path("./data"))
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; "
                   "another one needs --tls-cert or --insecure-no-tls)")
    p.add_argument("--port", type=port_number, default=8765)
    p.add_argument("--tls-cert", type=Path, help="certificate (PEM) to serve wss://")
    p.add_argument("--tls-key", type=Path, help="private key of --tls-cert")
    p.add_argument("--insecure-no-tls", action="store_true", help="serve a non-loopback "
                   "--host or --node-host without TLS (only behind something that "
                   "encrypts, e.g. a VPN)")
    p.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                   help="a browser origin let in to the WebSocket routes, e.g. "
                   "https://ops.example.com (repeatable; none by default)")
    p.add_argument("--command-timeout", type=positive_seconds, default=None, metavar="S",
                   help="seconds an operator command may take before it is answered as "
                   "failed (default 5)")
    p.add_argument("--metrics-token-file", type=Path, default=None, metavar="PATH",
                   help="a file (mode 600) holding the token /metrics then asks for: "
                   "Authorization: Bearer <token> (default: /metrics is open)")
    p.add_argument("--log-json", action="store_true", help="structured logs as JSON lines")
    p.add_argument("--audit-retention-days", type=retention(float, "days"), default=UNSET,
                   metavar="DAYS", help="prune audit rows older than this (default: the "
                   "runtime's, 90; 'off' keeps them whatever their age)")
    p.add_argument("--audit-max-rows", type=retention(int, "rows"), default=UNSET,
                   metavar="N", help="keep at most the newest N audit rows (default: the "
                   "runtime's, 1000000; 'off': no cap)")
    aws = p.add_argument_group("AWS Lambda API (alarmtop[aws])")
    aws.add_argument("--lambda-api", type=port_number, default=None, metavar="PORT",
                     help="also serve the Lambda API's durable-execution routes here, "
                     "SigV4-signed (for boto3 and handlers in other processes: "
                     "AWS_ENDPOINT_URL_LAMBDA); keys: ALARMTOP_LAMBDA_ACCESS_KEY_ID/"
                     "_SECRET_ACCESS_KEY, or DATA_DIR/lambda.credentials (made on first start)")
    aws.add_argument("--lambda-api-host", default=None, metavar="HOST",
                     help="address the Lambda API binds (default 127.0.0.1; another one "
                     "needs --tls-cert, which it then serves too, or --insecure-no-tls)")
    fleet = p.add_argument_group("fleet on PostgreSQL")
    fleet.add_argument("--postgres", metavar="DSN", default=os.environ.get("ALARMTOP_POSTGRES_DSN"),
                       help="run as a node of a fleet on this PostgreSQL (default: "
                       "ALARMTOP_POSTGRES_DSN; keep the password in a PGPASSFILE)")
    fleet.add_argument("--node-id", metavar="NAME", help="this node's name in the fleet "
                       "(default host-pid; give a stable one so a restart takes its shards back)")
    fleet.add_argument("--node-host", default="127.0.0.1", metavar="HOST",
                       help="address other nodes call this one on (default 127.0.0.1; "
                       "another one needs --node-tls-cert or --insecure-no-tls)")
    fleet.add_argument("--node-tls-cert", type=Path, metavar="PATH",
                       help="certificate (PEM) for node links (wss://); it must name "
                       "--node-host")
    fleet.add_argument("--node-tls-key", type=Path, metavar="PATH",
                       help="private key of --node-tls-cert")
    fleet.add_argument("--node-tls-ca", type=Path, metavar="PATH",
                       help="certificates (PEM) this node trusts when it calls another "
                       "(default: the system's and --node-tls-cert itself)")
    fleet.add_argument("--shards", type=shard_count, default=64,
                       help="shards objects hash to (default 64; fixed at the fleet's first "
                       "start)")
    fleet.add_argument("--lease-s", type=positive_seconds, default=10.0, metavar="S",
                       help="seconds a node's shard leases last unless renewed (default 10): "
                       "how long a dead node's objects wait for another node")
    return p


UNSET: Any = object()  # a flag not given: the runtime's own setting stays


def retention(kind: Callable[[str], float], unit: str) -> Callable[[str], float | None]:
    """argparse type of an audit retention: a positive number of `unit`, or 'off'."""
    def parse(text: str) -> float | None:
        if text.strip().lower() == "off":
            return None
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"a positive number of {unit}, or off, not {text}")
        return value
    return parse


def shard_count(text: str) -> int:
    """argparse type of --shards: 1 to 4096."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 4096:
        raise argparse.ArgumentTypeError(f"a whole number from 1 to 4096, not {text}")
    return value


def serve_main(argv: list[str]) -> int:
    from alarmtop.core.model.errors import AlarmtopError
    from alarmtop.server.auth import read_token_file
    from alarmtop.server.fleet_options import (
        DSN_ARGV_WARNING,
        call_factory,
        dsn_has_password,
        make_backend,
    )
    from alarmtop.server.guard import check_bind
    from alarmtop.server.ops import DEADLINE_S
    from alarmtop.server.serve import (
        STOP_S,
        AppError,
        ServeError,
        build_runtime,
        check_data_dir,
        leave_now,
        load_factory,
        serve_forever,
        tls_context,
    )

    args = build_serve_parser().parse_args(argv)
    configure_logging(json_lines=args.log_json)
    prog = "alarmtop serve"
    backend = None
    try:
        check_bind(args.host, args.tls_cert is not None, args.insecure_no_tls)
        lambda_api = None
        if args.lambda_api is not None:
            lambda_api = (args.lambda_api_host or "127.0.0.1", args.lambda_api)
            check_bind(lambda_api[0], args.tls_cert is not None, args.insecure_no_tls,
                       "--lambda-api-host")
        elif args.lambda_api_host is not None:
            raise ServeError("--lambda-api-host is where the Lambda API listens: give "
                             "--lambda-api PORT too")
        check_data_dir(args.data_dir)
        tls = tls_context(args.tls_cert, args.tls_key)
        metrics_token = (None if args.metrics_token_file is None
                         else read_token_file(args.metrics_token_file))
        if args.postgres:
            if "--postgres" in argv and dsn_has_password(args.postgres):
                print(DSN_ARGV_WARNING, file=sys.stderr)
            if args.node_tls_cert is not None:
                tls_context(args.node_tls_cert, args.node_tls_key)  # usable files, or say
            backend = make_backend(args.postgres, args.node_id, args.node_host, args.shards,
                                   args.lease_s, node_tls_cert=args.node_tls_cert,
                                   node_tls_key=args.node_tls_key,
                                   node_tls_ca=args.node_tls_ca,
                                   insecure_no_tls=args.insecure_no_tls)
        elif args.node_id or args.node_tls_cert or args.node_tls_key or args.node_tls_ca:
            given = "--node-id" if args.node_id else "--node-tls-*"
            raise ServeError(f"{given} is for a node of a fleet: give --postgres DSN (or set "
                             "ALARMTOP_POSTGRES_DSN) too")
        if args.demo:
            from alarmtop.examples.demo import build_demo_runtime
            factory = build_demo_runtime
        else:
            factory = load_factory(args.app)
    except AppError as exc:  # the app's own code: not the command line
        return fail(exc, 1, prog)
    except (ValueError, ServeError, AlarmtopError) as exc:  # TokenFileError: a ValueError
        return fail(exc, 2, prog)

    async def run() -> None:
        rt = await build_runtime(lambda d: call_factory(factory, d, backend), args.data_dir)
        if args.audit_retention_days is not UNSET or args.audit_max_rows is not UNSET:
            keep = rt.audit.retention
            rt.audit.retain(
                keep.days if args.audit_retention_days is UNSET else args.audit_retention_days,
                keep.rows if args.audit_max_rows is UNSET else args.audit_max_rows)
        if await serve_forever(rt, args.data_dir, args.host, args.port, tls,
                               demo=args.demo, insecure_no_tls=args.insecure_no_tls,
                               allow_origins=args.allow_origin,
                               command_timeout_s=args.command_timeout or DEADLINE_S,
                               metrics_token=metrics_token, lambda_api=lambda_api,
                               on_signal=lambda: rt.watchdog.exit_within(STOP_S - 0.1)):
            # A task ignored its cancellation: the loop's close would wait for it forever.
            leave_now(0, abandoned=True)

    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(run())
    except (ServeError, AlarmtopError, ValueError) as exc:  # TokenFileError is a ValueError
        code = fail(exc, 1, prog)
    except OSError as exc:  # the data dir, say, changed under us
        code = fail(f"{exc.strerror or exc}{': ' + str(exc.filename) if exc.filename else ''}",
                     1, prog)
    else:
        code = 0
    leave_now(code)
    return code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        return serve_main(argv[1:])
    if argv[:1] == ["web"]:
        from alarmtop.tui.web.cli import web_main
        return web_main(argv[1:])
    args = build_parser().parse_args(argv)
    if not args.demo:
        return _console(args.url, args.token_file, args.token, args.read_only,
                        not args.no_confirm)
    from alarmtop.core.model.errors import AlarmtopError
    from alarmtop.server.serve import ServeError, check_data_dir, leave_now
    if args.data_dir is not None:
        try:
            check_data_dir(args.data_dir)
        except ServeError as exc:
            return fail(exc, 2)
    code = 0
    with demo_data(args.data_dir) as (data_dir, cleanup):
        try:
            if args.events:
                configure_logging(json_lines=args.log_json)
                print("alarmtop demo: Ctrl-C to stop", file=sys.stderr)
                with contextlib.suppress(KeyboardInterrupt):
                    asyncio.run(_run_demo(data_dir, args.duration, cleanup))
            else:
                # The console owns the terminal: logs would scribble over it. Put back
                # after it: a caller of main() in this process keeps its logging.
                logger = logging.getLogger("alarmtop")
                quiet, propagated = logging.NullHandler(), logger.propagate
                logger.addHandler(quiet)
                logger.propagate = False
                try:
                    with contextlib.suppress(KeyboardInterrupt):
                        asyncio.run(_demo_console(data_dir, args.read_only,
                                                  not args.no_confirm, cleanup))
                finally:
                    logger.removeHandler(quiet)
                    logger.propagate = propagated
        except AlarmtopError as exc:  # the descriptor budget, say
            code = fail(exc, 1)
    leave_now(code)  # after the temporary data is removed
    return code


if __name__ == "__main__":  # the console processes of `alarmtop web` start this way
    sys.exit(main())
