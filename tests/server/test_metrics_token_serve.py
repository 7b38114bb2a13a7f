"""`alarmtop serve --metrics-token-file`: the real command in its own process, scraped
over HTTP. Without the flag /metrics is open (as before); with it, a scrape without
the token or with another one is refused (401) and one with it is served; a token
file other users can read is refused before anything starts."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.tui.test_cli_mistakes import APP, ROOT, RUN_S, env_without_tokens

SERVING = re.compile(r"metrics: (http://127\.0\.0\.1:\d+/metrics)")


def scrape(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=RUN_S) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def serve(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    """Start `alarmtop serve` and wait for its metrics address."""
    log = tmp_path / "serve.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from alarmtop.tui.cli import main; "
             "sys.exit(main())", "serve", "--app", APP, "--data-dir", str(tmp_path / "data"),
             "--port", "0", *args],
            cwd=ROOT, env=env_without_tokens(), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=err, text=True)
    deadline = time.monotonic() + RUN_S
    while time.monotonic() < deadline:
        if (m := SERVING.search(log.read_text())) is not None:
            return proc, m[1]
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"the server never said where it serves: {log.read_text()}")


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(timeout=RUN_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_metrics_ask_for_the_token_of_the_file_given(tmp_path: Path) -> None:
    token_file = tmp_path / "metrics.token"
    token_file.write_text("scrape-me-7f3a\n")
    os.chmod(token_file, 0o600)
    proc, url = serve(tmp_path, "--metrics-token-file", str(token_file))
    try:
        assert scrape(url)[0] == 401
        assert scrape(url, "scrape-me")[0] == 401
        status, body = scrape(url, "scrape-me-7f3a")
        assert status == 200 and "alarmtop_dead_letters 0.0" in body, body
    finally:
        stop(proc)


def test_metrics_are_open_without_the_flag(tmp_path: Path) -> None:
    proc, url = serve(tmp_path)
    try:
        status, body = scrape(url)
        assert status == 200 and "alarmtop_alarms" in body
    finally:
        stop(proc)


def test_a_token_file_others_can_read_is_refused_before_serving(tmp_path: Path) -> None:
    token_file = tmp_path / "metrics.token"
    token_file.write_text("scrape-me\n")
    os.chmod(token_file, 0o644)
    out = subprocess.run(
        [sys.executable, "-c", "import sys; from alarmtop.tui.cli import main; "
         "sys.exit(main())", "serve", "--app", APP, "--data-dir", str(tmp_path / "data"),
         "--port", "0", "--metrics-token-file", str(token_file)],
        cwd=ROOT, env=env_without_tokens(), capture_output=True, text=True, timeout=RUN_S)
    assert out.returncode == 2, out.stderr
    assert "chmod 600" in out.stderr and "serving" not in out.stderr
    assert not (tmp_path / "data").exists()  # nothing was started
