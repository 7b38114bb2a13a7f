"""A real install: the wheel built from this tree, in a fresh virtualenv, runs `alarmtop`.

The editable install the other tests use maps folders onto the package and so
cannot show a module or a `.tcss` file missing from the wheel, or the metadata
warnings setuptools prints at build time. Here the sources are copied to a temp
folder (so the build leaves nothing in the tree), built once per module with
`pip wheel`, installed with `pip install` into a new virtualenv (its dependencies
from the package index, as a user gets them), and run from outside the tree: the
command line's help, then `alarmtop --demo` in tmux until the demo's stuck saga
shows, and `q`; and the pytest plugin, found by the venv's own pytest through
its entry point, runs a user's test file.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.environment import need_command, unavailable
from tests.testing.test_user_project import USER_FILE
from tests.tui.test_tmux import POLL_S, Terminal

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "README.md", "top", "core", "server", "tui", "examples",
           "testing")
PIP_S = 240.0  # a cold pip cache downloads setuptools and the dependencies
DEMO_S = 30.0  # the demo's festival needs a few seconds to need a human
QUIT_S = 10.0
# The first test also pays for the module's build and install (its fixture's set-up).
pytestmark = pytest.mark.timeout(PIP_S + 60)


@dataclass(frozen=True)
class Installed:
    bin: Path
    output: str  # everything pip printed while building and installing

    def run(self, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.bin / args[0]), *args[1:]], cwd=cwd, env=clean_env(),
                              capture_output=True, text=True, timeout=60, check=False)


def clean_env() -> dict[str, str]:
    """This process's environment without what would let the tree leak into the venv."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return {**env, "LANG": env.get("LANG") or "C.UTF-8"}


def pip(*args: str, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, "-m", "pip", *args], capture_output=True, text=True,
                          timeout=PIP_S, env=clean_env(), check=False)


def show(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"


def check_index_reachable(scratch: Path) -> None:
    """The build needs setuptools>=77 from the index: without it the test cannot run."""
    done = pip("download", "--no-deps", "--retries", "1", "--timeout", "15",
               "-d", str(scratch), "setuptools>=77")
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        unavailable(f"the package index cannot be reached (pip download setuptools: "
                    f"{tail[0]})")


def make_venv(where: Path) -> Path:
    done = subprocess.run([sys.executable, "-m", "venv", str(where)], capture_output=True,
                          text=True, timeout=120, check=False)
    if done.returncode != 0:
        unavailable(f"python -m venv cannot make a virtualenv here (on Debian: apt-get "
                    f"install python3-venv): {done.stderr.strip()[-200:]}")
    return where / "bin"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    work = tmp_path_factory.mktemp("install")
    check_index_reachable(work / "probe")
    src = work / "src"
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(source, src / name)
    # -v: pip passes the build backend's own output on, which is where setuptools warns.
    built = pip("wheel", "-v", "--no-deps", "-w", str(work / "dist"), str(src))
    assert built.returncode == 0, show(built)
    [wheel] = (work / "dist").glob("alarmtop-*.whl")
    bin_dir = make_venv(work / "venv")
    # With the extra for testing, so the pytest plugin can be run as a user runs it.
    done = pip("install", f"{wheel}[testing]", python=str(bin_dir / "python"))
    assert done.returncode == 0, show(done)
    yield Installed(bin_dir, "\n".join([built.stdout, built.stderr, done.stdout, done.stderr]))


def test_the_wheel_builds_and_installs_without_deprecation_warnings(
        installed: Installed, tmp_path: Path) -> None:
    """No setuptools (or pip) deprecation notice while building or installing, and the
    package is imported from the virtualenv, not from this tree."""
    noted = [line for line in installed.output.splitlines() if re.search(r"(?i)deprecat", line)]
    assert noted == [], "\n".join(noted)
    where = installed.run("python", "-c", "import alarmtop.tui.app as m; print(m.__file__)",
                          cwd=tmp_path)
    assert where.returncode == 0, show(where)
    assert Path(where.stdout.strip()).is_relative_to(installed.bin.parent), where.stdout


def test_the_wheel_builds_without_package_warnings_and_ships_the_templates(
        installed: Installed, tmp_path: Path) -> None:
    """setuptools warned that `alarmtop.tui.web.templates` is absent from `packages` (it
    says that will become an error); `alarmtop web`'s pages are in the wheel."""
    warned = [line for line in installed.output.splitlines()
              if re.search(r"BuildBackendWarning|SetuptoolsWarning|absent from the `packages`",
                           line)]
    assert warned == [], "\n".join(warned)
    pages = installed.run("python", "-c", "from importlib.resources import files; "
                          "t = files('alarmtop.tui.web') / 'templates'; "
                          "print(sorted(p.name for p in t.iterdir()))", cwd=tmp_path)
    assert pages.stdout.strip() == "['app_index.html', 'login.html']", show(pages)


def test_the_installed_command_answers_help(installed: Installed, tmp_path: Path) -> None:
    console = installed.run("alarmtop", "--help", cwd=tmp_path)
    assert console.returncode == 0, show(console)
    assert console.stdout.startswith("usage: alarmtop") and "--demo" in console.stdout
    serve = installed.run("alarmtop", "serve", "--help", cwd=tmp_path)
    assert serve.returncode == 0, show(serve)
    assert serve.stdout.startswith("usage: alarmtop serve") and "--app" in serve.stdout
    version = installed.run("alarmtop", "--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("alarmtop 0."), show(version)
    as_module = installed.run("python", "-m", "alarmtop", "--version", cwd=tmp_path)
    assert as_module.returncode == 0 and as_module.stdout == version.stdout, show(as_module)
    web = installed.run("alarmtop", "web", "--help", cwd=tmp_path)
    assert web.returncode == 0, show(web)
    assert web.stdout.startswith("usage: alarmtop web") and "--demo" in web.stdout
    # alarmtop web's pages are package data: without them it could not serve a page.
    pages = installed.run("python", "-c", "import alarmtop.tui.web as m, pathlib; print(sorted("
                          "p.name for p in (pathlib.Path(m.__file__).parent / 'templates')"
                          ".iterdir()))", cwd=tmp_path)
    assert pages.stdout.strip() == "['app_index.html', 'login.html']", show(pages)


def test_the_installed_demo_draws_in_tmux_and_quits_on_q(installed: Installed,
                                                         tmp_path: Path) -> None:
    """`alarmtop --demo` from the wheel draws its header, runs its runtime until the
    stuck festival needs a human, and exits with status 0 on `q`."""
    need_command("tmux", "apt-get install tmux")
    term = Terminal(socket=f"alarmtop-install-{os.getpid()}")
    rc_file = tmp_path / "exit-status"
    command = (f"cd {shlex.quote(str(tmp_path))} && "
               f"{shlex.quote(str(installed.bin / 'alarmtop'))} --demo --data-dir demo-data; "
               f"echo $? > {shlex.quote(str(rc_file))}")
    try:
        term.start(f"env -u PYTHONPATH -u VIRTUAL_ENV sh -c {shlex.quote(command)}")
        screen = term.wait_for(lambda s: "NEEDS-HUMAN 1" in s,
                               "a header counting the demo's stuck festival", DEMO_S)
        header = screen.splitlines()[0]
        assert "alarmtop" in header and "demo@127.0.0.1:" in header, screen
        assert "Traceback" not in screen
        term.press("q")
        deadline = time.monotonic() + QUIT_S
        while not rc_file.exists() and time.monotonic() < deadline:
            time.sleep(POLL_S)
        assert rc_file.exists(), f"alarmtop did not exit on q; the screen was:\n{term.screen()}"
        assert rc_file.read_text().strip() == "0"
    finally:
        term.tmux("kill-server")  # our private tmux server only


def test_the_installed_pytest_plugin_runs_a_users_tests(installed: Installed,
                                                        tmp_path: Path) -> None:
    """The wheel registers `alarmtop.testing.plugin` under pytest11, and the venv's own
    pytest finds it there: a user's test file passes with no conftest."""
    found = installed.run("python", "-c", "from importlib.metadata import entry_points; "
                          "print([e.value for e in entry_points(group='pytest11')])",
                          cwd=tmp_path)
    assert found.returncode == 0, show(found)
    assert "alarmtop.testing.plugin" in found.stdout, found.stdout
    shutil.copy(USER_FILE, tmp_path / "test_payments.py")
    done = installed.run("pytest", "-q", cwd=tmp_path)
    assert done.returncode == 0, show(done)
    assert "6 passed" in done.stdout, show(done)
