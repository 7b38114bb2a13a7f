"""A user's test file, run by plain `pytest` in an empty folder: the plugin comes from
the installed package (entry point `pytest11`), and a 126-second retry ladder and an
hour-long callback timeout pass on the virtual clock, without sleeping through them.

Nothing here is a speed target: the wall time is only compared with the virtual time
a test covers, which a run that slept on the real clock could not beat, on a machine
however loaded."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

USER_FILE = Path(__file__).parent / "user_project" / "check_payments.py"
# The virtual time two of the user's tests cover: the whole retry ladder, and a
# callback that times out after an hour (the tests check the clock got there).
COVERED_S = {"test_a_failing_charge_walks_the_whole_ladder": 126.0,
             "test_an_unanswered_refund_expires_after_an_hour": 3600.0}
# A whole run: generous for a loaded machine, and far below the hour that one test
# covers, so a run that sleeps through it is stopped and fails.
RUN_BOUND_S = 300.0
pytestmark = pytest.mark.timeout(2 * RUN_BOUND_S)


def run_pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    try:
        return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=RUN_BOUND_S,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout
        raise AssertionError(f"the user's pytest run did not end within {RUN_BOUND_S:g} s: "
                             f"did it sleep on the real clock?\n{out}") from None


def call_times(out: str) -> dict[str, float]:
    """The wall time of each test's call, from pytest's `--durations` lines."""
    return {m["test"]: float(m["s"]) for m in re.finditer(
        r"^(?P<s>[0-9.]+)s call +\S+::(?P<test>\w+)$", out, re.MULTILINE)}


@pytest.fixture
def user_project(tmp_path: Path) -> Path:
    folder = tmp_path / "shop"
    folder.mkdir()
    shutil.copy(USER_FILE, folder / "test_payments.py")
    return folder


def test_a_users_tests_pass_on_the_virtual_clock_without_sleeping_through_it(
        user_project: Path) -> None:
    done = run_pytest(user_project, "--durations=0", "--durations-min=0")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "6 passed" in out and "warning" not in out.lower(), out
    took = call_times(out)
    for test, covered_s in COVERED_S.items():
        # Sleeping on the real clock takes the whole of it; the virtual clock a
        # small part of it, however loaded the machine.
        assert took[test] < covered_s / 2, (
            f"{test} took {took[test]:.1f} s of wall time to cover {covered_s:g} s of "
            f"virtual time: it slept on the real clock\n{out}")


def test_the_fixtures_come_from_the_plugin(user_project: Path) -> None:
    """Without the plugin the same file cannot even set up: nothing else provides them."""
    done = run_pytest(user_project, "-p", "no:alarmtop")
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
    done = run_pytest(user_project, "test_late.py")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "NotReached: the alarm of Later/l dead: not reached after 60 s" in out, out
    assert "next attempt in 7140 s" in out, out
