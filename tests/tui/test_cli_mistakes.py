"""Command-line mistakes, each as an operator would make it: the real `alarmtop` command
in its own process, against a real `alarmtop serve` (plain and TLS) where one is
needed. Each prints one or two lines saying what is wrong and how to fix it, exits
non-zero (2 for the command line itself, 1 otherwise), and prints no traceback."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from alarmtop.core import DurableObject, Runtime

ROOT = Path(__file__).resolve().parents[2]
RUN_S = 60.0  # generous: a loaded 2-core machine starts Python slowly
SERVING = re.compile(r"serving (wss?)://127\.0\.0\.1:(\d+)/ops")
APP = "tests.tui.test_cli_mistakes:build_runtime"


class Nothing(DurableObject):
    async def ping(self) -> str:
        return "pong"


def build_runtime(data_dir: Path) -> Runtime:
    """The `--app` the servers below run: a runtime with one class, nothing firing."""
    rt = Runtime(data_dir)
    rt.register(Nothing)
    return rt


@dataclass
class Outcome:
    code: int
    out: str
    err: str

    def lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


def env_without_tokens(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ALARMTOP_OPERATOR_TOKEN", "ALARMTOP_VIEWER_TOKEN", "ALARMTOP_URL")}
    return {**env, **extra}


def alarmtop(*args: str, env: dict[str, str] | None = None,
             prefix: tuple[str, ...] = ()) -> Outcome:
    """Run the `alarmtop` entry point with `args`, in its own process."""
    proc = subprocess.run(
        [*prefix, sys.executable, "-c", "import sys; from alarmtop.tui.cli import main; "
         "sys.exit(main())", *args],
        cwd=ROOT, env=env if env is not None else env_without_tokens(), stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=RUN_S)
    return Outcome(proc.returncode, proc.stdout, proc.stderr)


def assert_clear(outcome: Outcome, code: int, *words: str) -> None:
    """Exit status `code`, no traceback, at most two lines, naming `words`."""
    assert outcome.code == code, outcome
    assert "Traceback" not in outcome.err + outcome.out, outcome.err
    assert 1 <= len(outcome.lines()) <= 2, outcome.err
    for word in words:
        assert word in outcome.err, (word, outcome.err)


@dataclass
class Served:
    proc: subprocess.Popen[str]
    port: int
    scheme: str
    data: Path
    log: Path

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}/ops"

    def token_file(self, role: str = "viewer") -> Path:
        return self.data / f"{role}.token"


def start_server(tmp: Path, *extra: str) -> Served:
    """`alarmtop serve --app ...` on a free port; its stderr goes to a file read for the
    port (a pipe nobody drains would block it)."""
    data, log = tmp / "data", tmp / "serve.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from alarmtop.tui.cli import main; "
             "sys.exit(main())", "serve", "--app", APP, "--data-dir", str(data),
             "--port", "0", *extra],
            cwd=ROOT, env=env_without_tokens(), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=err, text=True)
    deadline = time.monotonic() + RUN_S
    while time.monotonic() < deadline:
        m = SERVING.search(log.read_text())
        if m:
            return Served(proc, int(m[2]), m[1], data, log)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"the server did not start: {log.read_text()}")


def stop_server(served: Served) -> None:
    served.proc.send_signal(signal.SIGTERM)
    try:
        served.proc.wait(timeout=RUN_S)
    except subprocess.TimeoutExpired:
        served.proc.kill()
        served.proc.wait()


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = start_server(tmp_path_factory.mktemp("plain"))
    yield served
    stop_server(served)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    tmp = tmp_path_factory.mktemp("tls")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=RUN_S)
    served = start_server(tmp, "--tls-cert", str(cert), "--tls-key", str(key))
    yield served
    stop_server(served)


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the console ----------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "words"), [
    ("notaurl", ["is not a WebSocket URL", "ws://HOST:PORT/ops"]),
    ("http://127.0.0.1:8765/ops", ["not HTTP", "try ws://127.0.0.1:8765/ops"]),
    ("https://ops.example.com/ops", ["try wss://ops.example.com/ops"]),
    ("ws://127.0.0.1:99999/ops", ["the port must be 1 to 65535"]),
])
def test_a_url_that_cannot_work(url: str, words: list[str]) -> None:
    assert_clear(alarmtop("--url", url, env=env_without_tokens(ALARMTOP_VIEWER_TOKEN="t")),
                 2, *words)


def test_a_closed_port() -> None:
    port = closed_port()
    outcome = alarmtop("--url", f"ws://127.0.0.1:{port}/ops",
                       env=env_without_tokens(ALARMTOP_VIEWER_TOKEN="t"))
    assert_clear(outcome, 1, "connection refused", f"127.0.0.1:{port}", "alarmtop serve")


def test_no_token() -> None:
    assert_clear(alarmtop(), 2, "no token", "--token-file", "ALARMTOP_OPERATOR_TOKEN")


def test_a_token_file_others_can_read(tmp_path: Path) -> None:
    path = tmp_path / "viewer.token"
    path.write_text("t\n")
    path.chmod(0o644)
    assert_clear(alarmtop("--token-file", str(path)), 2, f"chmod 600 {path}")


def test_a_missing_token_file(tmp_path: Path) -> None:
    assert_clear(alarmtop("--token-file", str(tmp_path / "nope")), 2, "does not exist")


def test_wrong_token(plain: Served) -> None:
    outcome = alarmtop("--url", plain.url,
                       env=env_without_tokens(ALARMTOP_OPERATOR_TOKEN="not-the-token"))
    assert_clear(outcome, 1, "refused the token", "invalid token", "--token-file")


def test_token_on_the_command_line_warns(plain: Served) -> None:
    """--token still works (here it is wrong, so the console does not open) but warns
    that argv is visible to every local user."""
    outcome = alarmtop("--url", plain.url, "--token", "not-the-token")
    assert_clear(outcome, 1, "--token puts the token on the command line", "refused")


def test_wrong_path(plain: Served) -> None:
    outcome = alarmtop("--url", f"ws://127.0.0.1:{plain.port}/opz", "--token-file",
                       str(plain.token_file()))
    assert_clear(outcome, 1, "wrong path", "/opz", "/ops")


def test_wss_to_a_plain_server(plain: Served) -> None:
    outcome = alarmtop("--url", f"wss://127.0.0.1:{plain.port}/ops", "--token-file",
                       str(plain.token_file()))
    assert_clear(outcome, 1, "TLS", "try ws://")


def test_ws_to_a_tls_server(tls: Served) -> None:
    outcome = alarmtop("--url", f"ws://127.0.0.1:{tls.port}/ops", "--token-file",
                       str(tls.token_file()))
    assert_clear(outcome, 1, "use wss://")


def test_wss_with_an_untrusted_certificate(tls: Served) -> None:
    outcome = alarmtop("--url", tls.url, "--token-file", str(tls.token_file()))
    assert_clear(outcome, 1, "certificate is not trusted", "SSL_CERT_FILE")


# -- the server -----------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "words"), [
    (["--port", "99999"], ["--port", "0 to 65535"]),
    (["--port", "http"], ["--port"]),
    (["--host", "0.0.0.0"], ["--insecure-no-tls", "--tls-cert"]),
    (["--tls-key", "key.pem"], ["--tls-key needs --tls-cert"]),
    (["--tls-cert", "/nonexistent/cert.pem"], ["does not exist"]),
    ([], ["one of the arguments --app --demo is required"]),
])
def test_serve_command_line_mistakes(tmp_path: Path, args: list[str], words: list[str]) -> None:
    source = [] if not args else ["--app", APP]
    outcome = alarmtop("serve", *source, "--data-dir", str(tmp_path / "d"), *args)
    assert_clear(outcome, 2, *words)
    assert not (tmp_path / "d").exists()


def test_serve_on_a_port_in_use(plain: Served, tmp_path: Path) -> None:
    """Nothing is created: no data dir, no token, no second runtime."""
    data = tmp_path / "d"
    outcome = alarmtop("serve", "--app", APP, "--data-dir", str(data), "--port",
                       str(plain.port))
    assert_clear(outcome, 1, f"port {plain.port} on 127.0.0.1 is in use", "--port")
    assert not data.exists()


def test_serve_with_a_data_dir_that_is_a_file(tmp_path: Path) -> None:
    afile = tmp_path / "data"
    afile.write_text("not a folder")
    outcome = alarmtop("serve", "--app", APP, "--data-dir", str(afile), "--port", "0")
    assert_clear(outcome, 2, "is a file, not a folder")


def test_the_demo_with_a_data_dir_that_is_a_file(tmp_path: Path) -> None:
    afile = tmp_path / "data"
    afile.write_text("not a folder")
    assert_clear(alarmtop("--demo", "--data-dir", str(afile)), 2, "is a file, not a folder")


def test_serve_with_a_read_only_data_dir(tmp_path: Path) -> None:
    """The folder's mode says no writes; root ignores modes, so as root the server runs
    without the capability that lets it (setpriv), as an ordinary user would."""
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: cannot make a folder read-only")
        drop = "-dac_override,-dac_read_search"
        prefix = ("setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}")
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o500)
    try:
        outcome = alarmtop("serve", "--app", APP, "--data-dir", str(data), "--port", "0",
                           prefix=prefix)
    finally:
        data.chmod(0o700)
    assert_clear(outcome, 2, "is not writable", f"ls -ld {data}")
    assert list(data.iterdir()) == []


def test_serve_with_a_token_file_others_can_read(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "operator.token").write_text("secret\n")
    (data / "operator.token").chmod(0o644)
    outcome = alarmtop("serve", "--app", APP, "--data-dir", str(data), "--port", "0")
    assert_clear(outcome, 1, f"chmod 600 {data / 'operator.token'}")
    assert not (data / "viewer.token").exists()
