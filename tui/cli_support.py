"""What `alarmtop` (`cli.py`) and `alarmtop web` (`web/cli.py`) share: the parser
that says a mistake in one line, a usage error and how a command fails, the checks
of a port and of an ops URL, the demo's data folder, the embedded runtime and its
server, and the hello that checks a token.

`cli.py` hands `alarmtop web` to `web/cli.py`; both import these from here, so
neither imports the other back.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    from alarmtop.core import Runtime
    from alarmtop.server.app import OpsServer
    from alarmtop.server.auth import Tokens

DEFAULT_URL = "ws://127.0.0.1:8765/ops"
DEMO_DATA_NOTE = "alarmtop demo: data in {}; removed when you quit (--data-dir keeps it)"


class UsageError(Exception):
    """A command line that cannot work; the message says how to fix it."""


class Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line instead of the whole usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def fail(message: object, code: int, prog: str = "alarmtop") -> int:
    print(f"{prog}: {message}", file=sys.stderr)
    return code


def port_number(text: str) -> int:
    """argparse type of --port: 0 (any free port) to 65535."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535 (0: any free one), not {text}")
    return port


def check_url(url: str) -> str:
    """The ops URL to connect to (`/ops` added when there is no path), or `UsageError`."""
    parts = urlsplit(url)
    if parts.scheme in ("http", "https"):
        ws = urlunsplit(parts._replace(scheme="ws" if parts.scheme == "http" else "wss"))
        raise UsageError(f"--url {url}: the console speaks WebSocket, not HTTP: try {ws}")
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise UsageError(f"--url {url!r} is not a WebSocket URL: give ws://HOST:PORT/ops "
                         f"(default {DEFAULT_URL})")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise UsageError(f"--url {url}: the port must be 1 to 65535")
    if parts.path in ("", "/"):
        return urlunsplit(parts._replace(path="/ops"))
    return url


@contextlib.contextmanager
def demo_data(data_dir: Path | None) -> Iterator[tuple[Path, Callable[[], None] | None]]:
    """The demo's data dir: `data_dir` (kept), or a temporary folder removed on exit;
    with what removes it early, for an exit that cannot wait for the context's end."""
    if data_dir is not None:
        yield data_dir, None
        return
    with tempfile.TemporaryDirectory(prefix="alarmtop-demo-",
                                     ignore_cleanup_errors=True) as tmp:
        print(DEMO_DATA_NOTE.format(tmp), file=sys.stderr, flush=True)
        yield Path(tmp), functools.partial(shutil.rmtree, tmp, ignore_errors=True)


async def probe(url: str, token: str) -> str:
    """Connect and say hello once, before the console takes the terminal: the role, or
    `Disconnected` / `CommandError` saying why not."""
    from alarmtop.tui.client import WebSocketOpsClient

    client = WebSocketOpsClient(url, token)
    try:
        await client.connect()
        return client.role or "?"
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def embedded(rt: Runtime, tokens: Tokens) -> AsyncIterator[OpsServer]:
    """`rt` started, with its server on a free local port; on the way out both stop
    within 2 s whatever is running (handlers still running are abandoned, as a crash
    would abandon them)."""
    from alarmtop.server.app import OpsServer
    from alarmtop.server.serve import RUNTIME_GRACE_S, SERVER_GRACE_S

    server = OpsServer(rt, tokens, "127.0.0.1", 0)  # before start: its sockets are budgeted
    await rt.start()
    try:
        await server.start()
        yield server
    finally:
        await server.stop(SERVER_GRACE_S)
        await rt.stop(RUNTIME_GRACE_S)


async def stop_driver(driver: asyncio.Task[None]) -> None:
    """Cancel the demo's driver without waiting on it beyond a bound (it may be in a
    call on a stuck object; the runtime's stop deals with that)."""
    from alarmtop.server.serve import SERVER_GRACE_S
    driver.cancel()
    await asyncio.wait({driver}, timeout=SERVER_GRACE_S)
