"""`alarmtop serve --postgres`: the real command, in its own processes, as nodes of one
fleet on a real PostgreSQL; and its mistakes, each a line or two and no traceback."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from websockets.sync.client import connect

from alarmtop.server.fleet_options import dsn_has_password, redact
from tests.fleet.test_node_links import make_cert
from tests.tui.test_cli_mistakes import alarmtop, assert_clear, env_without_tokens

ROOT = Path(__file__).resolve().parents[2]
RUN_S = 60.0
SERVING = re.compile(r"serving (ws://127\.0\.0\.1:\d+/ops)")


def start_node(dsn: str, data: Path, node_id: str, log: Path,
               *more: str) -> subprocess.Popen[str]:
    """A demo node, its DSN from the environment (nothing secret in argv)."""
    with log.open("w") as err:
        return subprocess.Popen(
            [sys.executable, "-c", "import sys; from alarmtop.tui.cli import main; "
             "sys.exit(main())", "serve", "--demo", "--data-dir", str(data), "--port", "0",
             "--node-id", node_id, "--lease-s", "2", *more],
            cwd=ROOT, env=env_without_tokens(ALARMTOP_POSTGRES_DSN=dsn),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, text=True)


def wait_serving(log: Path, proc: subprocess.Popen[str]) -> str:
    deadline = time.monotonic() + RUN_S
    while time.monotonic() < deadline:
        m = SERVING.search(log.read_text())
        if m:
            return m[1]
        assert proc.poll() is None, log.read_text()
        time.sleep(0.05)
    raise AssertionError(f"no 'serving' line: {log.read_text()}")


def ask(url: str, token: str, op: dict[str, object]) -> dict[str, object]:
    with connect(url, open_timeout=RUN_S) as ws:
        ws.send(json.dumps({"op": "hello", "token": token}))
        assert '"welcome"' in ws.recv(timeout=RUN_S)
        ws.send(json.dumps({**op, "id": 1}))
        while True:
            frame = json.loads(ws.recv(timeout=RUN_S))
            if frame.get("id") == 1:
                return dict(frame)


def test_two_serve_nodes_share_the_fleet_and_stop_in_time(pg_dsn: str, tmp_path: Path) -> None:
    procs: list[subprocess.Popen[str]] = []
    try:
        urls = []
        for name in ("a", "b"):
            log = tmp_path / f"{name}.log"
            procs.append(start_node(pg_dsn, tmp_path / name, name, log))
            urls.append(wait_serving(log, procs[-1]))
        token = (tmp_path / "b" / "operator.token").read_text().strip()
        # The demo's flaky object lives on one of the two; node b's ops reach it either
        # way, and node a reads the re-armed time from the shared alarm index.
        at_ms = int(time.time() * 1000) + 3_600_000
        deadline = time.monotonic() + RUN_S
        while True:
            answer = ask(urls[1], token, {"op": "rearm", "object": "Flaky/payments-0",
                                          "at_ms": at_ms, "reason": "test"})
            if answer.get("ok") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert answer.get("ok"), answer
        viewer = (tmp_path / "a" / "viewer.token").read_text().strip()
        seen = ask(urls[0], viewer, {"op": "alarm", "object": "Flaky/payments-0"})
        assert str(at_ms) in json.dumps(seen), seen
        started = time.monotonic()
        for proc in procs:
            proc.send_signal(signal.SIGINT)
        codes = [proc.wait(timeout=RUN_S) for proc in procs]
        took = time.monotonic() - started
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    logs = [(tmp_path / f"{n}.log").read_text() for n in ("a", "b")]
    assert codes == [0, 0], logs
    assert all("Traceback" not in text for text in logs), logs
    assert took < 5.0, took


def test_a_second_serve_with_a_running_nodes_id_is_one_line_and_a_crashed_one_restarts(
        pg_dsn: str, tmp_path: Path) -> None:
    """The wrong --node-id as an operator gives it: a second `serve` under the id of a
    node that runs refuses in one line and changes nothing; after a SIGKILL of that
    node, a restart under its id starts at once (nothing answers at its address)."""
    first = start_node(pg_dsn, tmp_path / "a", "a", tmp_path / "a.log")
    procs = [first]
    try:
        wait_serving(tmp_path / "a.log", first)
        twin = alarmtop("serve", "--demo", "--data-dir", str(tmp_path / "twin"), "--port", "0",
                        "--node-id", "a", "--lease-s", "2",
                        env=env_without_tokens(ALARMTOP_POSTGRES_DSN=pg_dsn))
        assert_clear(twin, 1, "node id 'a' is in use", "answers at ws://", "--node-id")
        assert first.poll() is None
        first.kill()
        first.wait()
        again = start_node(pg_dsn, tmp_path / "a2", "a", tmp_path / "a2.log")
        procs.append(again)
        wait_serving(tmp_path / "a2.log", again)
        again.send_signal(signal.SIGINT)
        assert again.wait(timeout=RUN_S) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert "Traceback" not in (tmp_path / "a2.log").read_text()


def test_a_postgres_that_cannot_be_reached_is_one_line(tmp_path: Path) -> None:
    outcome = alarmtop("serve", "--demo", "--data-dir", str(tmp_path / "d"), "--port", "0",
                       env=env_without_tokens(
                           ALARMTOP_POSTGRES_DSN="postgresql://alarmtop@127.0.0.1:1/none"))
    assert_clear(outcome, 1, "cannot connect to PostgreSQL", "DSN")


def test_a_password_in_argv_is_warned_about(tmp_path: Path) -> None:
    outcome = alarmtop("serve", "--demo", "--data-dir", str(tmp_path / "d"), "--port", "0",
                       "--postgres", "postgresql://alarmtop:hunter2@127.0.0.1:1/none")
    assert outcome.code == 1 and "Traceback" not in outcome.err, outcome
    assert "ALARMTOP_POSTGRES_DSN" in outcome.err and "PGPASSFILE" in outcome.err
    assert "hunter2" not in outcome.err, outcome.err


@pytest.mark.parametrize(("args", "words"), [
    (["--node-id", "a"], ["--node-id", "--postgres"]),
    (["--postgres", "x", "--shards", "0"], ["--shards", "1 to 4096"]),
    (["--postgres", "x", "--lease-s", "-1"], ["--lease-s", "seconds > 0"]),
    (["--postgres", "x", "--node-id", ""], ["node id", "printable", "not ''"]),
    (["--postgres", "x", "--node-id", "node a"], ["node id", "without spaces", "'node a'"]),
    (["--postgres", "x", "--node-host", "10.1.2.3"], ["node host 10.1.2.3", "clear text",
                                                      "--node-tls-cert", "--insecure-no-tls"]),
    (["--postgres", "x", "--node-host", "0.0.0.0"], ["node host 0.0.0.0", "clear text"]),
    (["--postgres", "x", "--node-tls-key", "k.pem"], ["TLS key needs its certificate"]),
    (["--postgres", "x", "--node-tls-cert", "missing.pem"], ["missing.pem", "does not exist"]),
    (["--node-tls-cert", "c.pem"], ["--node-tls-*", "--postgres"]),
])
def test_fleet_command_line_mistakes(tmp_path: Path, args: list[str], words: list[str]) -> None:
    outcome = alarmtop("serve", "--demo", "--data-dir", str(tmp_path / "d"), *args)
    assert_clear(outcome, 2, *words)


def test_two_serve_nodes_call_each_other_over_tls(pg_dsn: str, tmp_path: Path) -> None:
    """With --node-tls-cert/--node-tls-key the nodes' links are wss://: both demos'
    traffic (objects spread over both nodes) and an operator's re-arm cross them."""
    cert, key = make_cert(tmp_path)
    tls = ["--node-tls-cert", str(cert), "--node-tls-key", str(key)]
    procs: list[subprocess.Popen[str]] = []
    try:
        urls = []
        for name in ("a", "b"):
            log = tmp_path / f"{name}.log"
            procs.append(start_node(pg_dsn, tmp_path / name, name, log, *tls))
            urls.append(wait_serving(log, procs[-1]))
        token = (tmp_path / "b" / "operator.token").read_text().strip()
        deadline = time.monotonic() + RUN_S
        while True:
            rows = ask(urls[1], token, {"op": "nodes"})["data"]["rows"]  # type: ignore[index]
            if (all(r["up"] and r["shards"] for r in rows) and len(rows) == 2) or \
                    time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert len(rows) == 2 and all(r["up"] and r["shards"] for r in rows), rows
        assert all(str(r["address"]).startswith("wss://127.0.0.1:") for r in rows), rows
        at_ms = int(time.time() * 1000) + 3_600_000
        while True:
            answer = ask(urls[1], token, {"op": "rearm", "object": "Flaky/payments-0",
                                          "at_ms": at_ms, "reason": "test"})
            if answer.get("ok") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert answer.get("ok"), answer
        time.sleep(2.0)  # the demos' traffic, over the nodes' links
        for proc in procs:
            proc.send_signal(signal.SIGINT)
        codes = [proc.wait(timeout=RUN_S) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    logs = [(tmp_path / f"{n}.log").read_text() for n in ("a", "b")]
    assert codes == [0, 0], logs
    assert all("Traceback" not in text and "tick failed" not in text and "refused" not in
               text for text in logs), logs


def test_an_app_factory_must_take_the_backend(tmp_path: Path) -> None:
    outcome = alarmtop("serve", "--app", "tests.tui.test_cli_mistakes:build_runtime",
                       "--data-dir", str(tmp_path / "d"), "--port", "0",
                       env=env_without_tokens(
                           ALARMTOP_POSTGRES_DSN="postgresql://alarmtop@127.0.0.1:1/none"))
    assert_clear(outcome, 1, "backend=")


@pytest.mark.parametrize(("dsn", "has"), [
    ("postgresql://u:p@h/db", True), ("postgresql://u@h/db", False),
    ("postgresql://u@h/db?password=x", True), ("host=h user=u password=x", True),
    ("host=h user=u", False), ("host=h passfile=/x", False),
])
def test_dsn_password_detection(dsn: str, has: bool) -> None:
    assert dsn_has_password(dsn) is has
    assert ("p@" not in redact(dsn) and "password=x" not in redact(dsn))
