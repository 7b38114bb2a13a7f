"""The installed console in a real terminal (tmux) on a real `alarmtop serve --lambda-api`
whose AWS SDK execution, started with boto3's Invoke, waits on its callback: the
operator finds it in view 3, sees the checkpoint faults `f` offers it, and answers
the callback by hand with `c`; the execution ends, as boto3 then reads it.

Each terminal is a tmux server of its own (`Terminal` in test_tmux.py), its socket
under the run's TMUX_TMPDIR (the run's watchdog removes what a killed run leaves).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.lambda_serve import LambdaServe, start, stop, until
from tests.tui.test_tmux import ALARMTOP, KEY_S, START_S, Terminal, terminal
from tests.tui.test_tmux_console import exit_status

__all__ = ["terminal"]  # the fixture, used by name
pytest.importorskip("aws_durable_execution_sdk_python")
SERVING = re.compile(r"serving ws://127\.0\.0\.1:(\d+)/ops")
EID = "tmux-1"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[LambdaServe, int]]:
    server = start(tmp_path / "serve")
    try:
        found = SERVING.search(server.text())
        assert found, server.text()
        yield server, int(found[1])
    finally:
        stop(server)


@pytest.mark.timeout(150)
def test_an_aws_callback_is_answered_by_hand_in_the_console(
        terminal: Terminal, served: tuple[LambdaServe, int], tmp_path: Path) -> None:
    assert ALARMTOP is not None
    server, port = served
    client = server.client()
    arn = client.invoke(FunctionName="cb", InvocationType="Event", Payload=b"{}",
                        DurableExecutionName=EID)["DurableExecutionArn"]
    until(lambda: any(ev["EventType"] == "CallbackStarted" for ev in
                      client.get_durable_execution_history(DurableExecutionArn=arn)["Events"]),
          "the callback to start")
    rc = tmp_path / "rc"
    terminal.start(f"{shlex.quote(ALARMTOP)} --url ws://127.0.0.1:{port}/ops --token-file "
                   f"{shlex.quote(str(server.data / 'operator.token'))}; echo $? > "
                   f"{shlex.quote(str(rc))}")
    terminal.wait_for(lambda s: "alarmtop" in s and "operator" in s, "the console", START_S)
    terminal.press("3")
    terminal.wait_for(lambda s: any(f"cb/{EID}" in line and "SUSPENDED" in line
                                    for line in s.splitlines())
                      and "waiting for callback 'approval'" in s,
                      "the execution waiting on its callback", KEY_S)

    terminal.press("f")
    screen = terminal.wait_for(lambda s: f"Inject a fault on {EID}" in s
                               and "checkpoint_fail" in s and "refuses" in s,
                               "the checkpoint faults offered", KEY_S)
    assert "step_raise" not in screen
    terminal.press("Escape")
    terminal.wait_for(lambda s: "Inject a fault" not in s, "the fault form to close", KEY_S)

    terminal.press("c")
    terminal.wait_for(lambda s: f"Complete a callback of cb/{EID} by hand" in s
                      and "approval" in s, "the callback form", KEY_S)
    terminal.press("y", "e", "s", "Enter")
    terminal.wait_for(lambda s: f"completed callback 'approval' of cb/{EID} by hand" in s
                      and any(f"cb/{EID}" in line and "SUCCEEDED" in line
                              for line in s.splitlines()),
                      "the answer said and the execution ended", KEY_S * 2)
    got = client.get_durable_execution(DurableExecutionArn=arn)
    assert (got["Status"], json.loads(got["Result"])) == ("SUCCEEDED", "approved:yes")
    terminal.press("q")
    assert exit_status(rc) == "0"
