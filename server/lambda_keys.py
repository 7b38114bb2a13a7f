"""The key pair the Lambda API's requests are signed with (SigV4, `sigv4`).

Taken from `ALARMTOP_LAMBDA_ACCESS_KEY_ID` and `ALARMTOP_LAMBDA_SECRET_ACCESS_KEY`
when both are set; otherwise read from `lambda.credentials` under the data dir, or
made there (mode 0600) on the first start that serves the Lambda API, and printed
once, as the ops tokens are (`auth`): `read_keys` picks the pair in memory,
`save_keys` writes it once the port is bound and the runtime has started.

The file is an AWS shared-credentials file (a `[default]` profile with
`aws_access_key_id` and `aws_secret_access_key`): a client on this machine may point
`AWS_SHARED_CREDENTIALS_FILE` at it. A file other users can read is refused: it
holds a secret.
"""

from __future__ import annotations

import configparser
import os
import re
import secrets
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from alarmtop.server.auth import TokenFileError, check_private

FILE_NAME = "lambda.credentials"
ENV_KEY_ID = "ALARMTOP_LAMBDA_ACCESS_KEY_ID"
ENV_SECRET = "ALARMTOP_LAMBDA_SECRET_ACCESS_KEY"
_KEY_ID = re.compile(r"[A-Z0-9]{16,128}")
_KEY_ALPHABET = string.ascii_uppercase + string.digits


@dataclass(frozen=True)
class LambdaKeys:
    """One access key id and its secret."""

    access_key_id: str
    secret_access_key: str

    def secret_of(self, access_key_id: str) -> str | None:
        """The secret of a key id this server knows, None for any other."""
        return self.secret_access_key if secrets.compare_digest(
            access_key_id.encode("utf-8", "replace"), self.access_key_id.encode()) else None


def make_keys() -> LambdaKeys:
    """A new pair, shaped as AWS's (a 20-character id, a 40-character secret)."""
    key_id = "AKIA" + "".join(secrets.choice(_KEY_ALPHABET) for _ in range(16))
    return LambdaKeys(key_id, secrets.token_urlsafe(30)[:40])


def keys_path(data_dir: Path) -> Path:
    return data_dir / FILE_NAME


def _checked(key_id: str, secret: str, where: str) -> LambdaKeys:
    if _KEY_ID.fullmatch(key_id) is None:
        raise TokenFileError(f"{where}: the access key id is 16-128 upper-case letters and "
                             f"digits, not {key_id[:24]!r}")
    if not 16 <= len(secret) <= 128 or any(c.isspace() for c in secret):
        raise TokenFileError(f"{where}: the secret access key is 16-128 characters without "
                             "spaces")
    return LambdaKeys(key_id, secret)


def read_keys_file(path: Path) -> LambdaKeys:
    """The pair in `path`; `TokenFileError` if it is not a private, well-formed file."""
    try:
        info = path.stat()
    except OSError as exc:
        raise TokenFileError(f"cannot read the Lambda API's keys {path}: {exc.strerror}") \
            from None
    check_private(path, info.st_mode)
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(path.read_text(encoding="utf-8"))
        section = parser["default"]
        return _checked(section["aws_access_key_id"].strip(),
                        section["aws_secret_access_key"].strip(), str(path))
    except (configparser.Error, KeyError, UnicodeDecodeError) as exc:
        raise TokenFileError(f"{path} is not a credentials file with a [default] profile "
                             f"(aws_access_key_id, aws_secret_access_key): {exc}") from None


def read_keys(data_dir: Path, env: Mapping[str, str] | None = None
              ) -> tuple[LambdaKeys, bool]:
    """The pair, and whether it is new (made now, in memory only: give it to
    `save_keys`). Raises `TokenFileError` (a `ValueError`)."""
    env = os.environ if env is None else env
    key_id, secret = env.get(ENV_KEY_ID), env.get(ENV_SECRET)
    if key_id or secret:
        if not (key_id and secret):
            raise TokenFileError(f"set both {ENV_KEY_ID} and {ENV_SECRET}, or neither (then "
                                 f"the pair in {keys_path(data_dir)} is used, made if missing)")
        return _checked(key_id, secret, ENV_KEY_ID), False
    path = keys_path(data_dir)
    if not path.exists():
        return make_keys(), True
    return read_keys_file(path), False


def save_keys(keys: LambdaKeys, data_dir: Path) -> Path:
    """Write a new pair under the data dir, owner-only; its path."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = keys_path(data_dir)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"[default]\naws_access_key_id = {keys.access_key_id}\n"
                f"aws_secret_access_key = {keys.secret_access_key}\n")
    return path
