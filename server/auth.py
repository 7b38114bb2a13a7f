"""Tokens for the ops channel: a viewer token and an operator token.

Taken from `ALARMTOP_OPERATOR_TOKEN` / `ALARMTOP_VIEWER_TOKEN` when set;
otherwise read from `<role>.token` under the data dir, or made there (mode 0600)
on first start. Making one is two steps: `read_tokens` picks the token in
memory, `save_tokens` writes it, and `alarmtop serve` saves (and prints, once)
only after its port is bound and the runtime has started: a start that fails
creates nothing, and the next one that works creates and prints the tokens.

A token file that other users can read is refused with the command that fixes
it: it is a password. Comparison is constant-time.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROLES = ("operator", "viewer")


class TokenFileError(ValueError):
    """A token file that cannot be used; the message says how to fix it."""


@dataclass(frozen=True)
class Tokens:
    operator: str
    viewer: str

    def role_of(self, token: str) -> str | None:
        """The role a token grants, or None. Both are compared, whatever matches; no
        text (a lone surrogate, say) makes this raise."""
        given = token.encode("utf-8", "surrogatepass")
        is_operator = hmac.compare_digest(given, self.operator.encode())
        is_viewer = hmac.compare_digest(given, self.viewer.encode())
        if is_operator:
            return "operator"
        return "viewer" if is_viewer else None


def token_path(data_dir: Path, role: str) -> Path:
    return data_dir / f"{role}.token"


def read_token_file(path: Path) -> str:
    """The token in `path`; `TokenFileError` if it is missing, empty, not a file, or
    readable by anyone but its owner."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise TokenFileError(f"token file {path} does not exist") from None
    except OSError as exc:
        raise TokenFileError(f"cannot read token file {path}: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise TokenFileError(f"token file {path} is not a file")
    check_private(path, info.st_mode)
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFileError(f"cannot read token file {path}: {exc}") from None
    if not token:
        raise TokenFileError(f"token file {path} is empty")
    return token


def check_private(path: Path, mode: int) -> None:
    if mode & 0o077:
        raise TokenFileError(f"token file {path} can be read by other users (mode "
                             f"{stat.S_IMODE(mode):04o}): run `chmod 600 {path}`, then "
                             "start again")


def read_tokens(data_dir: Path, env: Mapping[str, str] | None = None
                ) -> tuple[Tokens, list[str]]:
    """The tokens, and the roles whose token is new (made now, in memory only: give
    them to `save_tokens`). Raises `TokenFileError` or `ValueError`."""
    env = os.environ if env is None else env
    new: list[str] = []
    values: dict[str, str] = {}
    for role in ROLES:
        from_env = env.get(f"ALARMTOP_{role.upper()}_TOKEN")
        if from_env:
            values[role] = from_env
            continue
        saved = _saved(token_path(data_dir, role))
        if saved is None:
            values[role] = secrets.token_urlsafe(24)
            new.append(role)
        else:
            values[role] = saved
    if values["operator"] == values["viewer"]:
        raise ValueError("the operator and viewer tokens must differ")
    return Tokens(values["operator"], values["viewer"]), new


def _saved(path: Path) -> str | None:
    """The token saved at `path`; None when there is none yet, or a blank file (say,
    truncated), which holds no secret to keep."""
    if not path.exists():
        return None
    if path.is_file() and not path.read_bytes().strip():
        return None
    return read_token_file(path)


def save_tokens(tokens: Tokens, roles: list[str], data_dir: Path) -> list[Path]:
    """Write the new tokens of `roles` under the data dir, owner-only; their paths."""
    data_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for role in roles:
        path = token_path(data_dir, role)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # a blank file replaced here may have had a wider mode
        with os.fdopen(fd, "w") as f:
            f.write(getattr(tokens, role) + "\n")
        paths.append(path)
    return paths


def load_tokens(data_dir: Path, env: Mapping[str, str] | None = None
                ) -> tuple[Tokens, list[str]]:
    """`read_tokens` then `save_tokens`: the tokens, and the roles created just now."""
    tokens, new = read_tokens(data_dir, env)
    save_tokens(tokens, new, data_dir)
    return tokens, new
