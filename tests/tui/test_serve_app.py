"""`alarmtop serve --app MODULE:FACTORY` as a user runs it: the installed `alarmtop`
command, in a folder of their own that holds `myapp.py`, nothing on PYTHONPATH.

The module is found in the current folder, as `python -m` and uvicorn find it (it
said "No module named 'myapp'" and worked only with `PYTHONPATH=.`). A mistake in
the module or its factory is one line that starts with `alarmtop serve:`, never a
traceback; an unknown flag is said as such, not as a missing --app.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.tui.test_cli_mistakes import RUN_S, SERVING, env_without_tokens

ALARMTOP = shutil.which("alarmtop", path=str(Path(sys.executable).parent))
pytestmark = pytest.mark.skipif(ALARMTOP is None, reason="the alarmtop console script is not "
                                "installed (pip install -e '.[dev]')")

APP = """\
from alarmtop.core import DurableObject, Runtime


class Hello(DurableObject):
    async def greet(self, name: str) -> str:
        return f"hello {name}"


def build(data_dir):
    rt = Runtime(data_dir)
    rt.register(Hello)
    return rt
"""


def user_env() -> dict[str, str]:
    env = env_without_tokens()
    env.pop("PYTHONPATH", None)  # nothing but the current folder may find myapp.py
    return env


def serve(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`alarmtop serve` in `folder` until it exits by itself (a mistake)."""
    assert ALARMTOP is not None
    return subprocess.run([ALARMTOP, "serve", *args], cwd=folder, env=user_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=RUN_S, check=False)


def one_clear_line(done: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == code, done
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert len(lines) == 1 and lines[0].startswith("alarmtop serve: "), done.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def test_an_app_in_the_current_folder_is_served(tmp_path: Path) -> None:
    """myapp.py next to the user, `--app myapp:build`: served, then stopped by SIGINT."""
    assert ALARMTOP is not None
    (tmp_path / "myapp.py").write_text(APP)
    log = tmp_path / "serve.log"
    with log.open("w") as err:
        proc = subprocess.Popen([ALARMTOP, "serve", "--app", "myapp:build", "--port", "0",
                                 "--data-dir", "data"], cwd=tmp_path, env=user_env(),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=err, text=True)
    try:
        deadline = time.monotonic() + RUN_S
        while not SERVING.search(log.read_text()) and proc.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert SERVING.search(log.read_text()), log.read_text()
        assert (tmp_path / "data" / "operator.token").exists()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=RUN_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, log.read_text()


@pytest.mark.parametrize(("source", "spec", "code", "words"), [
    (APP, "nosuchmodule:build", 2, ["no module 'nosuchmodule'", "run from the folder"]),
    (APP, "myapp:nosuch", 2, ["myapp has no callable 'nosuch'"]),
    (APP.replace("def build(data_dir):", "def build(data_dir, backend, other):"),
     "myapp:build", 1, ["build(data_dir)", "build(data_dir, backend, other)"]),
    (APP.replace("return rt", "return rt +"), "myapp:build", 1,
     ["myapp.py, line", "invalid syntax"]),
    ("import no_such_dependency_for_alarmtop\n", "myapp:build", 1,
     ["importing myapp failed", "no_such_dependency_for_alarmtop"]),
    ("raise RuntimeError('settings missing')\n", "myapp:build", 1,
     ["importing myapp raised RuntimeError: settings missing"]),
    (APP.replace("    return rt", "    raise KeyError('DSN')"), "myapp:build", 1,
     ["the factory raised KeyError", "DSN"]),
    (APP.replace("    return rt", "    return 42"), "myapp:build", 1,
     ["must return an alarmtop Runtime", "not int"]),
], ids=["no-module", "no-factory", "signature", "syntax", "dependency", "import-raises",
        "factory-raises", "not-a-runtime"])
def test_a_mistake_in_the_app_is_one_line(tmp_path: Path, source: str, spec: str, code: int,
                                          words: list[str]) -> None:
    (tmp_path / "myapp.py").write_text(textwrap.dedent(source))
    done = serve(tmp_path, "--app", spec, "--port", "0", "--data-dir", "data")
    one_clear_line(done, code, *words)


def test_an_unknown_flag_is_said_before_a_missing_app(tmp_path: Path) -> None:
    one_clear_line(serve(tmp_path, "--frob"), 2, "unrecognized arguments: --frob")
    one_clear_line(serve(tmp_path), 2, "--app --demo is required")

