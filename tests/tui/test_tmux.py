"""The installed `alarmtop --demo` in a real terminal (tmux): read the screen, press keys, quit.

The console runs in a detached tmux session of 160x48 on a tmux server of its
own (`-L`), so the test never touches a user's tmux. The screen is read with
`capture-pane`, polled every 0.1 s up to a deadline: here we wait for another
process, not for a timer of ours. A key or a resize is drawn in steps (the view,
then its list, the header on its own pace), so a test waits for the whole state it
checks, held for a moment (`SETTLE_S`), not for the first frame that shows part of it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

TMUX = shutil.which("tmux")
ALARMTOP = shutil.which("alarmtop", path=str(Path(sys.executable).parent)) or shutil.which(
    "alarmtop")
WIDTH, HEIGHT = 160, 48
START_S = 30.0  # the demo's festival needs a few seconds to reach needs-human
DEAD_S = 75.0  # its first flaky alarm walks 7 attempts over about 32 s to a dead letter
KEY_S = 10.0
POLL_S = 0.1
SETTLE_S = 0.5  # a screen is settled when a check holds on every capture for this long
# How each view's title starts, on the top line of its box (the view a key switched to).
VIEW_TITLES = {"1": "Alarms (most urgent first)", "2": "Alarms ─", "3": "Executions",
               "4": "Objects", "5": "Dead letters", "6": "Active faults", "7": "Audit log",
               "8": "Event log"}

pytestmark = [
    pytest.mark.skipif(TMUX is None, reason="tmux is not installed (apt-get install tmux)"),
    pytest.mark.skipif(ALARMTOP is None, reason="the alarmtop console script is not "
                       "installed (pip install -e '.[dev]')"),
]


@dataclass
class Terminal:
    """One tmux session on a private tmux server."""

    socket: str
    session: str = "alarmtop"

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        assert TMUX is not None
        # COLUMNS and LINES (an xdist worker has them) would size the console instead of
        # the terminal it runs in: the server passes its environment on to the command.
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        env["LANG"] = env.get("LANG") or "C.UTF-8"
        return subprocess.run([TMUX, "-L", self.socket, *args], capture_output=True,
                              text=True, timeout=10, env=env, check=False)

    def start(self, command: str) -> None:
        done = self.tmux("new-session", "-d", "-s", self.session, "-x", str(WIDTH),
                         "-y", str(HEIGHT), command)
        assert done.returncode == 0, done.stderr

    def resize(self, width: int, height: int) -> None:
        done = self.tmux("resize-window", "-t", self.session, "-x", str(width),
                         "-y", str(height))
        assert done.returncode == 0, done.stderr

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.session).stdout

    def press(self, *keys: str) -> None:
        done = self.tmux("send-keys", "-t", self.session, *keys)
        assert done.returncode == 0, done.stderr

    def alive(self) -> bool:
        return self.tmux("has-session", "-t", self.session).returncode == 0

    def wait_for(self, check: Callable[[str], bool], what: str, timeout: float) -> str:
        """Poll the screen until `check` accepts every capture for `SETTLE_S` (a frame
        drawn halfway may pass a check once); fail with the last screen."""
        deadline = time.monotonic() + timeout
        screen, since = "", None
        while time.monotonic() < deadline:
            screen = self.screen()
            if not check(screen):
                since = None
            elif since is None:
                since = time.monotonic()
            elif time.monotonic() - since >= SETTLE_S:
                return screen
            time.sleep(POLL_S)
        raise AssertionError(f"no {what} within {timeout:.0f} s; the screen was:\n{screen}")


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    term = Terminal(socket=f"alarmtop-test-{uuid.uuid4().hex[:8]}")
    try:
        yield term
    finally:
        term.tmux("kill-server")  # our private server only, and what runs in it


def rows_of(screen: str, word: str) -> list[str]:
    return [line for line in screen.splitlines() if word in line]


def test_demo_console_in_tmux(terminal: Terminal, tmp_path: Path) -> None:
    """The installed `alarmtop --demo` draws its header and reaches a needs-human
    festival; 3 lists the three festival executions with the saga of the stuck one;
    ? opens the help and escape closes it; q ends the process with status 0."""
    assert ALARMTOP is not None
    rc_file = tmp_path / "exit-status"
    command = (f"{shlex.quote(ALARMTOP)} --demo --data-dir "
               f"{shlex.quote(str(tmp_path / 'demo-data'))}; echo $? > "
               f"{shlex.quote(str(rc_file))}")
    terminal.start(command)

    # The list and the header refresh on their own paces: wait for both.
    screen = terminal.wait_for(
        lambda s: "alarmtop" in s and any("hsf-day2" in r for r in rows_of(s, "NEEDS-HUMAN"))
        and "NEEDS-HUMAN 1" in s and "Re-arm" in s.splitlines()[-1],
        "header and needs-human festival", START_S)
    header = screen.splitlines()[0]
    assert "alarmtop" in header and "demo@127.0.0.1:" in header and "operator" in header
    assert "NEEDS-HUMAN 1" in screen and "DISCONNECTED" not in screen
    assert "Re-arm" in screen.splitlines()[-1]  # the footer shows the actions

    terminal.press("3")
    screen = terminal.wait_for(
        lambda s: all(f"festival-stream/hsf-day{n}" in s for n in (1, 2, 3))
        and "saga stack" in s and "SUSPENDED" in s and "SUCCEEDED" in s,
        "the executions view", KEY_S)
    assert "SUSPENDED" in screen and "SUCCEEDED" in screen
    # The cursor stays on the row it landed on while rows move (by identity): the
    # festival that needs a human sorts first, and home goes to it whatever came first.
    terminal.press("Home")
    screen = terminal.wait_for(lambda s: "✗ open_viewing_page" in s,
                               "the stuck festival's saga", KEY_S)
    assert "Retry comp." in screen

    terminal.press("?")
    terminal.wait_for(lambda s: "alarmtop keys" in s, "the help", KEY_S)
    terminal.press("Escape")
    terminal.wait_for(lambda s: "alarmtop keys" not in s and "saga stack" in s,
                      "the help to close", KEY_S)

    terminal.press("q")
    deadline = time.monotonic() + KEY_S
    while not rc_file.exists() and time.monotonic() < deadline:
        time.sleep(POLL_S)
    assert rc_file.exists(), f"alarmtop did not exit on q; the screen was:\n{terminal.screen()}"
    assert rc_file.read_text().strip() == "0"
    deadline = time.monotonic() + KEY_S
    while terminal.alive() and time.monotonic() < deadline:
        time.sleep(POLL_S)
    assert not terminal.alive()


def demo_command(tmp_path: Path, rc_file: Path) -> str:
    assert ALARMTOP is not None
    return (f"{shlex.quote(ALARMTOP)} --demo --data-dir "
            f"{shlex.quote(str(tmp_path / 'demo-data'))}; echo $? > "
            f"{shlex.quote(str(rc_file))}")


def drawn_at_80x24(screen: str, title: str) -> bool:
    """The view titled `title` fills an 80x24 screen: its box, the header's first line
    and the footer's right end are drawn."""
    lines = screen.splitlines()
    return (len(lines) >= 24 and lines[2].startswith(f"╭─ {title}") and "NEEDS-HUMAN" in lines[0]
            and lines[23].rstrip().endswith("? Help q Quit"))


def dead_count(screen: str) -> int:
    """The header's DEAD count."""
    match = re.search(r"DEAD (\d+)", screen.splitlines()[1])
    return int(match.group(1)) if match else -1


@pytest.mark.timeout(150)
def test_a_dead_letter_appears_in_view_5_and_the_header_fits_80x24(
        terminal: Terminal, tmp_path: Path) -> None:
    """View 5 opened before the demo's first flaky alarm has died: it shows the dead
    letter when it dies, without a key, and its count is the header's DEAD. Then at
    80x24 the first line holds the urgent counts, no line is wider than the terminal,
    and ? and q are in the footer, in every view."""
    terminal.start(demo_command(tmp_path, tmp_path / "exit-status"))
    terminal.wait_for(lambda s: "alarmtop" in s and any(
        "Flaky/payments-0" in r for r in rows_of(s, "RETRYING")), "the flaky alarm retrying",
        START_S)
    terminal.press("5")
    screen = terminal.wait_for(lambda s: "Dead letters" in s and "─ none ─" in s,
                               "view 5, empty", KEY_S)
    assert dead_count(screen) == 0, screen
    # The list and the header refresh on their own paces (each within one refresh):
    # both must come to show the dead letter.
    screen = terminal.wait_for(lambda s: any("Flaky/payments-0" in r for r in rows_of(s, "DEAD"))
                               and "1-1 of 1" in s and dead_count(s) == 1,
                               "the dead letter in view 5 and in the header", DEAD_S)
    assert dead_count(screen) == 1
    terminal.resize(80, 24)
    for key in "123456785":
        terminal.press(key)
        # Settled: the view the key asked for, drawn at 80x24 with its header and footer
        # (every view's footer ends in "q Quit": alone it does not tell the view changed).
        title = VIEW_TITLES[key]
        screen = terminal.wait_for(lambda s, title=title: drawn_at_80x24(s, title),
                                   f"view {key} at 80x24", KEY_S)
        lines = screen.splitlines()
        assert all(len(line) <= 80 for line in lines), screen
        first = lines[0]
        for label in ("DEAD", "NEAR-EXH", "RETRYING", "NEEDS-HUMAN"):
            assert label in first, (key, first)
        assert "? Help" in lines[23], (key, lines[23])
    terminal.press("q")
