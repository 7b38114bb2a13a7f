"""A user's test file, run by plain `pytest` in an empty folder: the plugin comes from
the installed package (entry point `pytest11`), and a 126-second retry ladder and an
hour-long callback timeout take seconds of wall time, pytest's start-up included."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

USER_FILE = Path(__file__).parent / "user_project" / "check_payments.py"
WALL_S = 15.0  # the whole run, start-up included; the virtual time covered is over an hour
pytestmark = pytest.mark.timeout(60)


def run_pytest(folder: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    return done, time.monotonic() - started


@pytest.fixture
def user_project(tmp_path: Path) -> Path:
    folder = tmp_path / "shop"
    folder.mkdir()
    shutil.copy(USER_FILE, folder / "test_payments.py")
    return folder


def test_a_users_tests_pass_on_the_virtual_clock_in_seconds(user_project: Path) -> None:
    done, wall_s = run_pytest(user_project)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "6 passed" in out and "warning" not in out.lower(), out
    assert wall_s < WALL_S, f"{wall_s:.1f} s of wall time:\n{out}"


def test_the_fixtures_come_from_the_plugin(user_project: Path) -> None:
    """Without the plugin the same file cannot even set up: nothing else provides them."""
    done, _ = run_pytest(user_project, "-p", "no:alarmtop")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "fixture 'alarmtop_runtime' not found" in out, out


def test_a_failing_user_test_fails_saying_what_was_reached(user_project: Path) -> None:
    (user_project / "test_late.py").write_text(
        "import pytest\n"
        "from alarmtop.core import DurableObject\n"
        "from alarmtop.testing import until_dead\n\n"
        "class Later(DurableObject):\n"
        "    async def arm(self):\n"
        "        await self.ctx.storage.set_alarm(self.ctx.now_ms() + 7_200_000)\n\n"
        "@pytest.mark.asyncio\n"
        "@pytest.mark.alarmtop(register=[Later])\n"
        "async def test_late(alarmtop_runtime):\n"
        "    await alarmtop_runtime.get(Later, 'l').arm()\n"
        "    await until_dead(alarmtop_runtime, Later, 'l', within=60)\n")
    done, _ = run_pytest(user_project, "test_late.py")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "NotReached: the alarm of Later/l dead: not reached after 60 s" in out, out
    assert "next attempt in 7140 s" in out, out
