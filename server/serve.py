"""`alarmtop serve`: a runtime and its ops server in one process.

The start is ordered so that a mistake costs nothing: the data dir and the TLS
files are checked, the tokens read (a token file others can read is refused),
the port bound, and only then is the runtime started, new tokens saved and
printed once. A port in use therefore starts no second runtime on the same data
and creates no token that nobody saw.

SIGINT or SIGTERM stops it within `STOP_S` (2 s) whatever is running: the server
gets `SERVER_GRACE_S` to close its connections, the runtime `RUNTIME_GRACE_S` to
stop; handlers still running are abandoned as a crash would abandon them (their
'running' rows are crashed attempts at the next start). `leave_now()` then ends a
process that anything abandoned would otherwise keep alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import importlib
import inspect
import logging
import os
import signal
import ssl
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from alarmtop.core import Runtime
from alarmtop.core.errors import AlarmtopError
from alarmtop.server.app import OpsServer
from alarmtop.server.auth import Tokens, read_tokens, save_tokens
from alarmtop.server.lambda_http import LambdaApiServer
from alarmtop.server.lambda_keys import read_keys, save_keys
from alarmtop.server.ops import DEADLINE_S

STOP_S = 2.0  # from SIGINT to the process gone
SERVER_GRACE_S = 0.5
RUNTIME_GRACE_S = 1.0
log = logging.getLogger("alarmtop.server")


class ServeError(Exception):
    """A mistake in how the server was started; the message says how to fix it."""


class AppError(ServeError):
    """The `--app` module or its factory failed (its code, not the command line)."""


def load_factory(spec: str, folder: Path | None = None) -> Any:
    """`module:factory` -> the factory. The module is found as `python -m` and uvicorn
    find it: in the current folder (`folder`) first, then among the installed
    packages. `ServeError` when the spec names nothing, `AppError` when the module or
    the factory is wrong: one line each, saying what to fix."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ServeError(f"--app takes MODULE:FACTORY (e.g. myapp:build for build() in "
                         f"./myapp.py), not {spec!r}")
    here = str((folder or Path.cwd()).resolve())
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.split(".")[0]
        if exc.name is not None and (module_name == exc.name
                                     or module_name.startswith(exc.name + ".")):
            raise ServeError(f"--app {spec}: no module {module_name!r} in {here} or among "
                             f"the installed packages (run from the folder that holds "
                             f"{top}.py, or install it)") from None
        raise AppError(f"--app {spec}: importing {module_name} failed: {exc}") from None
    except SyntaxError as exc:
        where = f"{exc.filename}, line {exc.lineno}" if exc.filename else module_name
        raise AppError(f"--app {spec}: {where}: {exc.msg}") from None
    except Exception as exc:  # anything the module's own code raised as it was imported
        raise AppError(f"--app {spec}: importing {module_name} raised "
                       f"{type(exc).__name__}: {exc}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ServeError(f"--app {spec}: {module_name} has no callable {attr!r}")
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin, say: its call says
        return factory
    try:
        signature.bind(here)
    except TypeError:
        raise AppError(f"--app {spec}: the factory is called as {attr}(data_dir) and "
                       f"returns a Runtime, but it is {attr}{signature}") from None
    return factory


async def build_runtime(factory: Any, data_dir: Path) -> Runtime:
    """The runtime `factory(data_dir)` builds (it may be async); `AppError` when the
    factory raises or returns anything else (an `AlarmtopError` passes as it is)."""
    try:
        rt = factory(data_dir)
        if inspect.isawaitable(rt):
            rt = await rt
    except AlarmtopError:
        raise
    except Exception as exc:
        raise AppError(f"--app: the factory raised {type(exc).__name__}: {exc}") from None
    if not isinstance(rt, Runtime):
        raise AppError(f"--app: the factory must return an alarmtop Runtime (not started), "
                       f"not {type(rt).__name__}")
    return rt


def tls_context(cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    """The server's TLS context, or None for plain ws://; `ServeError` if the files
    cannot be used."""
    if cert is None:
        if key is not None:
            raise ServeError("--tls-key needs --tls-cert (the certificate it belongs to)")
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(cert, key)
    except FileNotFoundError as exc:
        raise ServeError(f"TLS: {exc.filename or cert} does not exist") from None
    except (ssl.SSLError, OSError) as exc:
        raise ServeError(f"TLS: cannot load {cert}{' and ' + str(key) if key else ''}: "
                         f"{getattr(exc, 'reason', None) or exc} (PEM certificate and "
                         "its private key expected)") from None
    return ctx


def check_data_dir(path: Path) -> None:
    """`ServeError` unless `path` is (or can be made) a folder this process may write."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        what = "is" if probe == path else f"is inside {probe}, which is"
        raise ServeError(f"--data-dir {path} {what} a file, not a folder: give a folder "
                         "path (it is created if missing)")
    if not _writable(probe):
        where = "" if probe == path else f" (its nearest existing parent {probe} is not)"
        raise ServeError(f"--data-dir {path} is not writable{where}: give a folder you may "
                         f"write to, or fix its permissions (ls -ld {probe})")


def _writable(folder: Path) -> bool:
    # Try, rather than ask os.access: the mode bits are not the whole story (a
    # read-only mount, capabilities), and what the runtime will do is write.
    try:
        fd = os.open(folder / f".alarmtop-write-check-{os.getpid()}",
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return True
    except OSError:
        return False
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(folder / f".alarmtop-write-check-{os.getpid()}")
    return True


def bind_error(exc: OSError, host: str, port: int, port_flag: str = "--port",
               host_flag: str = "--host") -> ServeError:
    """What a failed bind means, and what to do about it."""
    where = f"{host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return ServeError(f"port {port} on {host} is in use (another alarmtop serve?): stop "
                          f"it, or give another {port_flag}")
    if exc.errno == errno.EACCES:
        return ServeError(f"not allowed to listen on {where} (ports below 1024 need "
                          f"privileges): give a {port_flag} above 1023")
    if exc.errno == errno.EADDRNOTAVAIL:
        return ServeError(f"{host} is not an address of this machine: give one of its "
                          f"addresses to {host_flag} (default 127.0.0.1)")
    return ServeError(f"cannot listen on {where}: {exc.strerror or exc}")


async def serve_forever(rt: Runtime, data_dir: Path, host: str, port: int,
                        tls: ssl.SSLContext | None = None, demo: bool = False,
                        ready: asyncio.Event | None = None, *, insecure_no_tls: bool = False,
                        allow_origins: Iterable[str] = (),
                        command_timeout_s: float = DEADLINE_S,
                        metrics_token: str | None = None,
                        lambda_api: tuple[str, int] | None = None,
                        on_signal: Callable[[], None] | None = None) -> bool:
    """Serve until SIGINT or SIGTERM, then stop within `STOP_S`; returns whether the
    stop left work behind (see `leave_now`). With `metrics_token`, a scrape of
    /metrics must send it (`Authorization: Bearer <token>`). With `lambda_api`
    (host, port), the Lambda API is served there too (`lambda_http`). Raises
    `ServeError` (or `TokenFileError`, `ValueError`, `DescriptorBudget`) with a message
    for the operator when it cannot start.

    `on_signal` is called at the signal itself, in the main thread, even while a
    handler holds the event loop (which then never sees the signal): `alarmtop serve`
    arms its exit promise there (`LoopWatchdog.exit_within`)."""
    tokens, new_roles = read_tokens(data_dir)
    server = OpsServer(rt, tokens, host, port, ssl_context=tls, insecure_no_tls=insecure_no_tls,
                       allow_origins=allow_origins, command_timeout_s=command_timeout_s)
    server.metrics.token = metrics_token
    lam: LambdaApiServer | None = None
    new_keys = False
    if lambda_api is not None:
        keys, new_keys = read_keys(data_dir)
        lam = LambdaApiServer(rt, keys, *lambda_api, ssl_context=tls,
                              insecure_no_tls=insecure_no_tls)
    rt.check_descriptors()  # before the port: a budget that cannot fit costs nothing
    try:
        await server.bind()
    except OSError as exc:
        raise bind_error(exc, host, port) from None
    if lam is not None:
        assert lambda_api is not None
        try:
            await lam.bind()
        except OSError as exc:
            await server.stop()
            raise bind_error(exc, *lambda_api, "--lambda-api", "--lambda-api-host") from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
            if on_signal is not None:
                # The loop learns of the signal from its wakeup pipe, written by the C
                # handler; the Python one (asyncio's does nothing) runs between any two
                # bytecodes of the main thread, even when a handler blocks the loop.
                signal.signal(sig, lambda signum, frame: on_signal())
    try:
        await rt.start()
        try:
            await server.start()
            _announce(server, host, tokens_saved(tokens, new_roles, data_dir))
            if lam is not None:
                await lam.start()
                _announce_lambda(lam, data_dir, new_keys)
            await _until_stopped(rt, stop, demo, ready)
        finally:
            # Before the runtime stops: handlers call them.
            if lam is not None:
                await lam.stop(SERVER_GRACE_S)
            await server.stop(SERVER_GRACE_S)
            await rt.stop(RUNTIME_GRACE_S)
    finally:
        await server.stop()  # the ports are bound even when the runtime did not start
        if lam is not None:
            await lam.stop(0)
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
    return bool(rt.abandoned or server.abandoned or (lam is not None and lam.abandoned))


def _announce_lambda(lam: LambdaApiServer, data_dir: Path, new_keys: bool) -> None:
    print(f"alarmtop: Lambda API on {lam.url} (region {lam.region}; clients: "
          f"AWS_ENDPOINT_URL_LAMBDA={lam.url})", file=sys.stderr, flush=True)
    if new_keys:
        path = save_keys(lam.keys, data_dir)
        print(f"alarmtop: new Lambda API key pair (saved in {path}, shown once): "
              f"AWS_ACCESS_KEY_ID={lam.keys.access_key_id} "
              f"AWS_SECRET_ACCESS_KEY={lam.keys.secret_access_key}", file=sys.stderr,
              flush=True)


def tokens_saved(tokens: Tokens, roles: list[str], data_dir: Path) -> list[tuple[str, str, Path]]:
    """Save the new tokens; (role, token, path) for each, to print once."""
    paths = save_tokens(tokens, roles, data_dir)
    return [(role, getattr(tokens, role), path) for role, path in zip(roles, paths)]


def _announce(server: OpsServer, host: str, new: list[tuple[str, str, Path]]) -> None:
    print(f"alarmtop: serving {server.url} (metrics: http://{host}:{server.port}/metrics)",
          file=sys.stderr, flush=True)
    for role, token, path in new:
        print(f"alarmtop: new {role} token (saved in {path}, shown once): {token}",
              file=sys.stderr, flush=True)


async def _until_stopped(rt: Runtime, stop: asyncio.Event, demo: bool,
                         ready: asyncio.Event | None) -> None:
    driver = None
    if demo:
        from alarmtop.examples.demo import start_demo_driver
        driver = start_demo_driver(rt)
    if ready is not None:
        ready.set()
    try:
        await stop.wait()
    finally:
        if driver is not None:
            driver.cancel()
            await asyncio.wait({driver}, timeout=SERVER_GRACE_S)  # it ends with the runtime


def leave_now(code: int, *, abandoned: bool = False,
              cleanup: Callable[[], None] | None = None) -> None:
    """End the process at once when work abandoned at shutdown would keep it alive.

    Two things would: a task that ignores its cancellation (the event loop's close
    waits for every task, forever), and an object database left open by an
    abandoned handler (its thread is joined at exit, forever). Then `cleanup` runs,
    the output is flushed and the process ends with `os._exit`. Nothing is lost by
    it that a crash would keep: every commit is durable when it returns, and the
    next start recovers the attempts cut short."""
    stuck = [t for t in threading.enumerate()
             if t is not threading.main_thread() and t.is_alive() and not t.daemon
             and not t.name.startswith(("asyncio_", "ThreadPoolExecutor"))]
    if not abandoned and not stuck:
        return
    log.warning("exiting now: work abandoned at shutdown (%d database threads open); the "
                "next start recovers it", len(stuck))
    if cleanup is not None:
        with contextlib.suppress(Exception):
            cleanup()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
