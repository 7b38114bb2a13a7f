"""Tokens for the ops channel: a viewer token and an operator token.

Taken from `ALARMTOP_OPERATOR_TOKEN` / `ALARMTOP_VIEWER_TOKEN` when set;
otherwise created on first start under the data dir (mode 0600) and printed
once. Comparison is constant-time.
"""

from __future__ import annotations

import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

ROLES = ("operator", "viewer")


@dataclass(frozen=True)
class Tokens:
    operator: str
    viewer: str

    def role_of(self, token: str) -> str | None:
        """The role a token grants, or None. Both are compared, whatever matches."""
        given = token.encode()
        is_operator = hmac.compare_digest(given, self.operator.encode())
        is_viewer = hmac.compare_digest(given, self.viewer.encode())
        if is_operator:
            return "operator"
        return "viewer" if is_viewer else None


def _read_or_create(path: Path) -> tuple[str, bool]:
    if path.exists():
        token = path.read_text().strip()
        if token:
            return token, False
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)
    return token, True


def load_tokens(data_dir: Path, env: dict[str, str] | None = None) -> tuple[Tokens, list[str]]:
    """The tokens, and the roles whose token was created just now (to print once)."""
    env = dict(os.environ) if env is None else env
    created: list[str] = []
    values: dict[str, str] = {}
    for role in ROLES:
        from_env = env.get(f"ALARMTOP_{role.upper()}_TOKEN")
        if from_env:
            values[role] = from_env
            continue
        token, new = _read_or_create(data_dir / f"{role}.token")
        values[role] = token
        if new:
            created.append(role)
    if values["operator"] == values["viewer"]:
        raise ValueError("the operator and viewer tokens must differ")
    return Tokens(values["operator"], values["viewer"]), created
