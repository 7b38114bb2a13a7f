"""The ways to start alarmtop, each in its own process from a folder of the user's: the
console script, `python -m alarmtop`, and `--version` on both (there was none, and
`python -m alarmtop` failed: `alarmtop` was a namespace with nothing to run)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.tui.test_cli_mistakes import RUN_S
from tests.tui.test_serve_app import ALARMTOP, user_env

VERSION = re.compile(r"alarmtop \d+\.\d+\.\d+\S*\n")


def run(*command: str, folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), cwd=folder, env=user_env(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=RUN_S, check=False)


def test_version_from_the_script_and_from_python_m(tmp_path: Path) -> None:
    assert ALARMTOP is not None
    script = run(ALARMTOP, "--version", folder=tmp_path)
    assert script.returncode == 0 and VERSION.fullmatch(script.stdout), script
    module = run(sys.executable, "-m", "alarmtop", "--version", folder=tmp_path)
    assert module.returncode == 0 and module.stdout == script.stdout, module


def test_python_m_alarmtop_is_the_alarmtop_command(tmp_path: Path) -> None:
    """The same command line: its help, and a mistake said the same way."""
    helped = run(sys.executable, "-m", "alarmtop", "--help", folder=tmp_path)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: alarmtop ")
    frob = run(sys.executable, "-m", "alarmtop", "serve", "--frob", folder=tmp_path)
    assert frob.returncode == 2 and "Traceback" not in frob.stderr
    assert frob.stderr.startswith("alarmtop serve: unrecognized arguments: --frob")
