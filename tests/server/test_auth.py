"""Tokens for the ops channel: from the environment, or generated once under the data
dir with mode 0600; roles by constant-time comparison; equal tokens refused."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from alarmtop.server.auth import (
    TokenFileError,
    Tokens,
    load_tokens,
    read_token_file,
    read_tokens,
    save_tokens,
)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_generated_on_first_start_with_mode_0600(tmp_path: Path) -> None:
    """With no environment tokens, both are created under the data dir (made if missing),
    each file readable by its owner only, and both roles are reported as just created."""
    data = tmp_path / "fresh" / "data"
    tokens, created = load_tokens(data, env={})
    assert created == ["operator", "viewer"]
    for role in ("operator", "viewer"):
        path = data / f"{role}.token"
        assert path.read_text().strip() == getattr(tokens, role)
        assert mode(path) == 0o600
    assert tokens.operator != tokens.viewer
    assert len(tokens.operator) >= 24 and len(tokens.viewer) >= 24


def test_generated_tokens_are_reused_and_not_reported_again(tmp_path: Path) -> None:
    """A second start reads the same tokens and reports nothing new (printed once)."""
    first, created = load_tokens(tmp_path, env={})
    assert created == ["operator", "viewer"]
    again, created_again = load_tokens(tmp_path, env={})
    assert again == first
    assert created_again == []


def test_tokens_differ_between_data_dirs(tmp_path: Path) -> None:
    """Generated tokens are random, not derived from anything guessable."""
    a, _ = load_tokens(tmp_path / "a", env={})
    b, _ = load_tokens(tmp_path / "b", env={})
    assert {a.operator, a.viewer}.isdisjoint({b.operator, b.viewer})


def test_environment_tokens_win_and_create_no_files(tmp_path: Path) -> None:
    """ALARMTOP_OPERATOR_TOKEN / ALARMTOP_VIEWER_TOKEN are used as given; nothing is
    written and nothing is reported as created."""
    env = {"ALARMTOP_OPERATOR_TOKEN": "op-from-env", "ALARMTOP_VIEWER_TOKEN": "view-from-env"}
    tokens, created = load_tokens(tmp_path, env=env)
    assert tokens == Tokens("op-from-env", "view-from-env")
    assert created == []
    assert list(tmp_path.iterdir()) == []


def test_environment_overrides_a_saved_token(tmp_path: Path) -> None:
    """A token set in the environment takes precedence over one saved earlier."""
    saved, _ = load_tokens(tmp_path, env={})
    tokens, created = load_tokens(tmp_path, env={"ALARMTOP_OPERATOR_TOKEN": "rotated"})
    assert tokens == Tokens("rotated", saved.viewer)
    assert created == []


def test_only_one_role_from_the_environment(tmp_path: Path) -> None:
    """With only the operator token set, the viewer token alone is generated and reported."""
    tokens, created = load_tokens(tmp_path, env={"ALARMTOP_OPERATOR_TOKEN": "op-only"})
    assert tokens.operator == "op-only"
    assert created == ["viewer"]
    assert not (tmp_path / "operator.token").exists()
    assert mode(tmp_path / "viewer.token") == 0o600


def test_empty_environment_value_counts_as_unset(tmp_path: Path) -> None:
    """ALARMTOP_VIEWER_TOKEN="" does not make the empty string a valid token."""
    tokens, created = load_tokens(tmp_path, env={"ALARMTOP_VIEWER_TOKEN": ""})
    assert tokens.viewer and created == ["operator", "viewer"]


def test_empty_token_file_is_regenerated(tmp_path: Path) -> None:
    """A blank token file (say, truncated) is replaced by a new token, reported, 0600."""
    (tmp_path / "viewer.token").write_text("\n")
    (tmp_path / "viewer.token").chmod(0o644)
    tokens, created = load_tokens(tmp_path, env={})
    assert "viewer" in created and tokens.viewer
    assert (tmp_path / "viewer.token").read_text().strip() == tokens.viewer
    assert mode(tmp_path / "viewer.token") == 0o600


def test_equal_tokens_are_refused(tmp_path: Path) -> None:
    """An operator token equal to the viewer token would make every viewer an operator:
    refused at start."""
    env = {"ALARMTOP_OPERATOR_TOKEN": "same", "ALARMTOP_VIEWER_TOKEN": "same"}
    with pytest.raises(ValueError, match="differ"):
        load_tokens(tmp_path, env=env)


def test_role_of() -> None:
    """Each token grants its role; anything else (a prefix, a case change, empty,
    non-ASCII) grants none."""
    tokens = Tokens(operator="op-secret", viewer="view-secret")
    assert tokens.role_of("op-secret") == "operator"
    assert tokens.role_of("view-secret") == "viewer"
    for wrong in ("", "op", "op-secret ", "OP-SECRET", "view-secret\n", "op-sécret", "x" * 4096):
        assert tokens.role_of(wrong) is None, wrong


def test_read_tokens_writes_nothing_until_saved(tmp_path: Path) -> None:
    """New tokens live in memory until `save_tokens`: a start that fails after reading
    them (a port in use, say) leaves no file that nobody was shown."""
    data = tmp_path / "data"
    tokens, new = read_tokens(data, env={})
    assert new == ["operator", "viewer"] and not data.exists()
    paths = save_tokens(tokens, new, data)
    assert paths == [data / "operator.token", data / "viewer.token"]
    for role, path in zip(new, paths):
        assert path.read_text().strip() == getattr(tokens, role) and mode(path) == 0o600
    assert read_tokens(data, env={}) == (tokens, [])


@pytest.mark.parametrize("bits", [0o640, 0o604, 0o644, 0o666])
def test_a_token_file_others_can_read_is_refused_with_the_fix(tmp_path: Path,
                                                              bits: int) -> None:
    """A saved token readable by group or others is a leaked password: refused, naming
    the command that fixes it; after `chmod 600` it is used."""
    path = tmp_path / "operator.token"
    path.write_text("op-secret\n")
    path.chmod(bits)
    with pytest.raises(TokenFileError) as info:
        read_tokens(tmp_path, env={})
    assert f"chmod 600 {path}" in str(info.value) and f"{bits:04o}" in str(info.value)
    path.chmod(0o600)
    tokens, new = read_tokens(tmp_path, env={})
    assert tokens.operator == "op-secret" and new == ["viewer"]


def test_read_token_file_errors(tmp_path: Path) -> None:
    """The console's --token-file: missing, empty, a folder, or too open: each a clear
    error; a private file with the token (and a newline) gives the token."""
    with pytest.raises(TokenFileError, match="does not exist"):
        read_token_file(tmp_path / "nope")
    empty = tmp_path / "empty"
    empty.write_text("\n")
    empty.chmod(0o600)
    with pytest.raises(TokenFileError, match="is empty"):
        read_token_file(empty)
    with pytest.raises(TokenFileError, match="not a file"):
        read_token_file(tmp_path)
    good = tmp_path / "good"
    good.write_text("abc\n")
    good.chmod(0o600)
    assert read_token_file(good) == "abc"
    good.chmod(0o644)
    with pytest.raises(TokenFileError, match="chmod 600"):
        read_token_file(good)


def test_role_of_a_lone_surrogate_is_none_not_an_exception() -> None:
    assert Tokens("op", "view").role_of("\ud800") is None
