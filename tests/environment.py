"""What a test needs from the machine, and what happens when the machine lacks it.

Some tests need more than Python: tmux, a browser, PostgreSQL, the package index.
On a developer's machine such a test skips, saying what is missing and how to get
it. CI sets `ALARMTOP_REQUIRE_ALL=1` and installs all of it (`.ci/run`), so there a
missing tool is a failure: a skip would hide that CI stopped testing the thing.

    tmux = need_command("tmux", "apt-get install tmux")
    if not server_answers():
        unavailable("no PostgreSQL on 127.0.0.1:5432 (apt-get install postgresql)")
"""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest

REQUIRE_ALL = "ALARMTOP_REQUIRE_ALL"


def required() -> bool:
    """Whether this run must not skip for a missing tool (CI sets the flag)."""
    return os.environ.get(REQUIRE_ALL, "") not in ("", "0")


def unavailable(reason: str) -> NoReturn:
    """Skip the test for `reason`; with `ALARMTOP_REQUIRE_ALL` set, fail it instead."""
    if required():
        pytest.fail(f"{reason}; {REQUIRE_ALL} is set, so this is a failure, not a skip",
                    pytrace=False)
    pytest.skip(reason)


def need_command(name: str, how_to_install: str) -> str:
    """The path of the command `name`, or `unavailable()` saying how to install it."""
    path = shutil.which(name)
    if path is None:
        unavailable(f"{name} is not installed ({how_to_install})")
    return path
