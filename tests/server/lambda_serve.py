"""A real `alarmtop serve --lambda-api` process for the tests, and boto3 clients of it.

`start(tmp, ...)` runs `alarmtop serve --app tests.server.lambda_app:build` with the
Lambda API on a free port (on SQLite, or on PostgreSQL with `dsn`), its key pair
from the environment, and waits for the line that says where it serves; `client()`
is boto3's own Lambda client on it. Polls use the wall clock with a deadline: the
server is another process, on the system clock.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import boto3
from botocore.config import Config

from tests.tui.test_cli_mistakes import ROOT, RUN_S, env_without_tokens

APP = "tests.server.lambda_app:build"
KEY_ID = "AKIAALARMTOPTESTKEY1"
SECRET = "alarmtop-test-secret-0123456789abcdefABCD"
REGION = "us-east-1"
LAMBDA_AT = re.compile(r"Lambda API on (https?://127\.0\.0\.1:\d+)")
T = TypeVar("T")


@dataclass
class LambdaServe:
    proc: subprocess.Popen[str]
    url: str
    data: Path
    log: Path
    env: dict[str, str] = field(default_factory=dict)

    def client(self, key_id: str = KEY_ID, secret: str = SECRET, region: str = REGION,
               retries: int = 0) -> Any:
        return boto3.client(
            "lambda", endpoint_url=self.url, region_name=region, aws_access_key_id=key_id,
            aws_secret_access_key=secret,
            config=Config(retries={"max_attempts": retries + 1, "mode": "standard"},
                          read_timeout=RUN_S, connect_timeout=RUN_S))

    def text(self) -> str:
        return self.log.read_text()


def start(tmp: Path, *extra: str, dsn: str | None = None, keys: bool = True,
          lambda_port: int = 0, **env: str) -> LambdaServe:
    tmp.mkdir(parents=True, exist_ok=True)
    data, log = tmp / "data", tmp / "serve.log"
    extra_env = dict(env)
    if keys:
        extra_env.update(ALARMTOP_LAMBDA_ACCESS_KEY_ID=KEY_ID,
                         ALARMTOP_LAMBDA_SECRET_ACCESS_KEY=SECRET)
    fleet: tuple[str, ...] = ()
    if dsn is not None:
        extra_env["ALARMTOP_POSTGRES_DSN"] = dsn
        fleet = ("--node-id", "n1", "--lease-s", "2")
    full_env = env_without_tokens(**extra_env)
    if not keys:
        for name in ("ALARMTOP_LAMBDA_ACCESS_KEY_ID", "ALARMTOP_LAMBDA_SECRET_ACCESS_KEY"):
            full_env.pop(name, None)
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from alarmtop.tui.cli import main; "
             "sys.exit(main())", "serve", "--app", APP, "--data-dir", str(data), "--port", "0",
             "--lambda-api", str(lambda_port), *fleet, *extra],
            cwd=ROOT, env=full_env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=err, text=True)
    deadline = time.monotonic() + RUN_S
    while time.monotonic() < deadline:
        m = LAMBDA_AT.search(log.read_text())
        if m:
            return LambdaServe(proc, m[1], data, log, extra_env)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise AssertionError(f"the server did not start: {log.read_text()}")


def stop(served: LambdaServe) -> int:
    served.proc.send_signal(signal.SIGTERM)
    try:
        return served.proc.wait(timeout=RUN_S)
    finally:
        if served.proc.poll() is None:
            served.proc.kill()
            served.proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def until(check: Callable[[], T | None], what: str, timeout_s: float = RUN_S) -> T:
    """Poll `check` (another process's state) until it answers, within the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
