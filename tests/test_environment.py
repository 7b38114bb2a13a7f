"""A missing tool skips a test on a developer's machine and fails it in CI."""

from __future__ import annotations

import pytest

from tests.environment import REQUIRE_ALL, need_command, required, unavailable


@pytest.mark.parametrize("value", ["", "0"])
def test_without_the_flag_a_missing_tool_skips(monkeypatch: pytest.MonkeyPatch,
                                               value: str) -> None:
    monkeypatch.setenv(REQUIRE_ALL, value)
    assert not required()
    with pytest.raises(pytest.skip.Exception, match="no frobnicator here"):
        unavailable("no frobnicator here")


def test_with_the_flag_a_missing_tool_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REQUIRE_ALL, "1")
    assert required()
    with pytest.raises(pytest.fail.Exception, match=f"no frobnicator here; {REQUIRE_ALL}"):
        unavailable("no frobnicator here")


def test_need_command_finds_a_command_or_says_how_to_install_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REQUIRE_ALL, raising=False)
    assert need_command("sh", "it is always there").endswith("/sh")
    with pytest.raises(pytest.skip.Exception,
                       match=r"alarmtop-no-such-tool is not installed \(apt-get install it\)"):
        need_command("alarmtop-no-such-tool", "apt-get install it")
    monkeypatch.setenv(REQUIRE_ALL, "1")
    with pytest.raises(pytest.fail.Exception, match="alarmtop-no-such-tool is not installed"):
        need_command("alarmtop-no-such-tool", "apt-get install it")
