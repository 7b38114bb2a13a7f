"""`alarmtop serve --postgres`: the runtime as a node of a fleet on PostgreSQL.

The DSN comes from `--postgres` or `ALARMTOP_POSTGRES_DSN`, and its password
should come from `PGPASSFILE` (or `~/.pgpass`), libpq's own way: a password in
argv is visible to every local user in `ps`, so the server warns about one there,
as it does about `--token`.

Node links are refused in clear text off this machine: a `--node-host` that is
not loopback needs `--node-tls-cert`/`--node-tls-key` (its links are then
`wss://`), or `--insecure-no-tls`, as `--host` does.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from alarmtop.core.model.errors import InvalidArgument

DSN_ENV = "ALARMTOP_POSTGRES_DSN"
DSN_ARGV_WARNING = ("alarmtop serve: warning: the --postgres DSN holds a password, and argv "
                    "is visible to every local user; put the DSN in ALARMTOP_POSTGRES_DSN and "
                    "the password in a PGPASSFILE instead")
_KV_PASSWORD = re.compile(r"(^|\s)password\s*=", re.IGNORECASE)


def dsn_has_password(dsn: str) -> bool:
    """Whether a libpq DSN (URL or `key=value` form) carries a password."""
    if "://" in dsn:
        try:
            parts = urlsplit(dsn)
        except ValueError:
            return False
        return bool(parts.password) or "password=" in (parts.query or "").lower()
    return bool(_KV_PASSWORD.search(dsn))


def redact(dsn: str) -> str:
    """The DSN as it may be printed: any password replaced by `***`."""
    if "://" in dsn:
        try:
            parts = urlsplit(dsn)
        except ValueError:
            return "(unparsable DSN)"
        if parts.password:
            netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
            dsn = parts._replace(netloc=netloc).geturl()
        return re.sub(r"(password=)[^&]*", r"\1***", dsn, flags=re.IGNORECASE)
    return re.sub(r"(password\s*=\s*)(\S+)", r"\1***", dsn, flags=re.IGNORECASE)


def make_backend(dsn: str, node_id: str | None, node_host: str, shards: int,
                 lease_s: float, *, node_tls_cert: Path | None = None,
                 node_tls_key: Path | None = None, node_tls_ca: Path | None = None,
                 insecure_no_tls: bool = False) -> Any:
    """A `PostgresBackend`; `InvalidArgument` (with what to do) when asyncpg is missing,
    an option is out of range, or `node_host` is off loopback without TLS (and without
    `insecure_no_tls`)."""
    from alarmtop.core import PostgresBackend
    return PostgresBackend(dsn, node_id=node_id, shards=shards, lease_s=lease_s,
                           node_host=node_host, node_tls_cert=node_tls_cert,
                           node_tls_key=node_tls_key, node_tls_ca=node_tls_ca,
                           node_insecure_no_tls=insecure_no_tls)


def call_factory(factory: Any, data_dir: Any, backend: Any | None) -> Any:
    """`factory(data_dir)`, or `factory(data_dir, backend=...)` on a fleet: an app's
    factory that cannot take the backend is told how to."""
    if backend is None:
        return factory(data_dir)
    try:
        params = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):
        params = []
    takes = any(p.name == "backend" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    if not takes:
        raise InvalidArgument("--postgres: the --app factory must accept a backend= keyword "
                              "and pass it on, e.g. def build(data_dir, backend=None): return "
                              "Runtime(data_dir, backend=backend)")
    return factory(data_dir, backend=backend)
