"""The installed console in a real terminal (tmux), as an operator runs it: what only a
real terminal shows.

- `alarmtop --demo 2>err.log` showed a blank terminal and wrote megabytes of escape
  codes into the file (Textual draws on stderr): the console must draw on the
  terminal, and the file keep the logs only.
- Against a real `alarmtop serve --demo`, the snooze dialog of the timers board shows
  its six presets at 160x48 and at 80x24; Tab walks them in order, and the one
  reached is the one that runs: the console and the audit view say by how much.

Each terminal is a tmux server of its own (`Terminal` in test_tmux.py).
"""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tui.test_tmux import ALARMTOP, KEY_S, POLL_S, START_S, Terminal, terminal

__all__ = ["terminal"]  # the fixture, used by name
PRESETS = ("30s", "1m", "5m", "15m", "1h", "1d")
SERVING = re.compile(r"serving ws://127\.0\.0\.1:(\d+)/ops")


def exit_status(path: Path) -> str:
    deadline = time.monotonic() + KEY_S
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(POLL_S)
    return path.read_text().strip() if path.exists() else "(still running)"


def test_the_console_draws_on_the_terminal_when_stderr_is_redirected(
        terminal: Terminal, tmp_path: Path) -> None:
    assert ALARMTOP is not None
    err, rc = tmp_path / "err.log", tmp_path / "rc"
    terminal.start(f"{shlex.quote(ALARMTOP)} --demo --data-dir "
                   f"{shlex.quote(str(tmp_path / 'data'))} 2>{shlex.quote(str(err))}; "
                   f"echo $? > {shlex.quote(str(rc))}")
    screen = terminal.wait_for(lambda s: "alarmtop" in s and "demo@127.0.0.1:" in s,
                               "the console on the terminal", START_S)
    assert "DEAD" in screen and "q Quit" in screen
    terminal.press("3")
    terminal.wait_for(lambda s: "festival-stream/hsf-day" in s, "view 3", KEY_S)
    terminal.press("q")
    assert exit_status(rc) == "0"
    logged = err.read_text(errors="replace")
    assert "\x1b[" not in logged, logged[:300]  # no escape code: nothing drawn there
    assert len(logged) < 4000, len(logged)


@pytest.fixture
def demo_server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A real `alarmtop serve --demo` on a free port: (port, its data folder)."""
    assert ALARMTOP is not None
    data, log = tmp_path / "served", tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen([ALARMTOP, "serve", "--demo", "--port", "0", "--data-dir",
                                 str(data)], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=out, text=True)
    try:
        deadline = time.monotonic() + START_S
        while not SERVING.search(log.read_text()) and proc.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(POLL_S)
        found = SERVING.search(log.read_text())
        assert found, log.read_text()
        yield int(found[1]), data
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=START_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def the_dialog(screen: str) -> list[str]:
    """The lines from the snooze question to the field under the presets."""
    lines = screen.splitlines()
    start = next(i for i, line in enumerate(lines) if "Snooze " in line)
    return lines[start:start + 8]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("size", [(160, 48), (80, 24)], ids=["160x48", "80x24"])
def test_every_snooze_preset_is_shown_and_tab_reaches_the_one_it_shows(
        terminal: Terminal, demo_server: tuple[int, Path], tmp_path: Path,
        size: tuple[int, int]) -> None:
    assert ALARMTOP is not None
    port, data = demo_server
    rc = tmp_path / "rc"
    terminal.start(f"{shlex.quote(ALARMTOP)} --url ws://127.0.0.1:{port}/ops --token-file "
                   f"{shlex.quote(str(data / 'operator.token'))}; echo $? > "
                   f"{shlex.quote(str(rc))}")
    terminal.resize(*size)
    terminal.wait_for(lambda s: "alarmtop" in s and "operator" in s, "the console", START_S)
    terminal.press("9")
    terminal.wait_for(lambda s: "Timers" in s and "hsf-day1" in s,
                      "the timers board", KEY_S)
    # The last row, due latest (the festival's hour-long wait): it must not fire while
    # the dialog is up. The cursor stays on it while the rows above come and go.
    terminal.press("End")
    terminal.press("z")
    screen = terminal.wait_for(lambda s: "Snooze " in s and "or by" in s, "the snooze dialog",
                               KEY_S)
    dialog = "\n".join(the_dialog(screen))
    for preset in PRESETS:
        assert re.search(rf"(?<![\w]){re.escape(preset)}(?![\w])", dialog), (preset, dialog)
    # The focus starts on 5m: Tab, Tab, Tab reach 1d (15m, 1h, 1d), and Enter runs it.
    terminal.press("Tab", "Tab", "Tab", "Enter")
    terminal.wait_for(lambda s: "snoozed " in s and " by 1d0h" in s, "the result line",
                      KEY_S)
    terminal.press("7")
    terminal.wait_for(lambda s: any("snooze_t" in line and "by 1d0h" in line
                                    for line in s.splitlines()),
                      "the audit row saying by how much", KEY_S)
    terminal.press("q")
    assert exit_status(rc) == "0"
