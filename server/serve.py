"""`alarmtop serve`: a runtime and its ops server in one process."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import signal
import ssl
import sys
from pathlib import Path
from typing import Any

from alarmtop.core import Runtime
from alarmtop.server.app import OpsServer
from alarmtop.server.auth import load_tokens


def load_factory(spec: str) -> Any:
    """`package.module:factory` -> the factory; a clear error when it cannot be found."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SystemExit(f"--app takes MODULE:FACTORY (e.g. myapp.runtime:build), not {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SystemExit(f"--app: cannot import {module_name!r}: {exc}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise SystemExit(f"--app: {module_name} has no callable {attr!r}")
    return factory


async def build_runtime(factory: Any, data_dir: Path) -> Runtime:
    rt = factory(data_dir)
    if inspect.isawaitable(rt):
        rt = await rt
    if not isinstance(rt, Runtime):
        raise SystemExit("--app: the factory must return an alarmtop Runtime (not started)")
    return rt


def tls_context(cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    if cert is None:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    return ctx


async def serve_forever(rt: Runtime, data_dir: Path, host: str, port: int,
                        tls: ssl.SSLContext | None = None, demo: bool = False,
                        ready: asyncio.Event | None = None) -> None:
    tokens, created = load_tokens(data_dir)
    server = OpsServer(rt, tokens, host, port, ssl_context=tls)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    async with rt:
        await server.start()
        print(f"alarmtop: serving {server.url} (metrics: http://{host}:{server.port}/metrics)",
              file=sys.stderr, flush=True)
        for role in created:
            token = getattr(tokens, role)
            print(f"alarmtop: new {role} token (saved in {data_dir / (role + '.token')}, "
                  f"shown once): {token}", file=sys.stderr, flush=True)
        driver = None
        if demo:
            from alarmtop.examples.demo import drive_demo
            driver = asyncio.create_task(drive_demo(rt))
        if ready is not None:
            ready.set()
        try:
            await stop.wait()
        finally:
            if driver is not None:
                driver.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await driver
            await server.stop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(sig)
