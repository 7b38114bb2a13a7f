"""Node links and TLS: what a node's options say, and whether they may be served.

A node listens for other nodes' calls on `node_host`. Off this machine, what
crosses the wire (calls, answers, relayed sockets) is refused in clear text
unless told otherwise, as the ops server refuses `--host` without TLS: a node
either has a certificate and key (its links are `wss://`), or is told that
something else encrypts its traffic (`insecure_no_tls`, say a VPN). The cluster
secret itself never crosses the wire either way (the handshake proves it).

Pure: the options as a record and the checks; the TLS contexts are made where the
links are (`fleet.tls`).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from alarmtop.core.model.errors import InvalidArgument


@dataclass(frozen=True)
class NodeTls:
    """A node's TLS files: its certificate and key (PEM), and what it trusts when it
    calls another node (`ca`; None: the system's authorities and its own certificate,
    so one self-signed certificate shared by the fleet works as it is)."""

    cert: Path
    key: Path | None = None
    ca: Path | None = None

    @classmethod
    def of(cls, cert: str | os.PathLike[str] | None, key: str | os.PathLike[str] | None,
           ca: str | os.PathLike[str] | None) -> NodeTls | None:
        """The record of a node's options, or None without a certificate; a key or an
        authority without a certificate is refused."""
        if cert is None:
            if key is not None:
                raise InvalidArgument("a node's TLS key needs its certificate (alarmtop "
                                      "serve --node-tls-cert; PostgresBackend(node_tls_cert"
                                      "=...))")
            if ca is not None:
                raise InvalidArgument("the authority a node trusts for node links goes with "
                                      "its own certificate and key (--node-tls-cert and "
                                      "--node-tls-key; node_tls_cert=..., node_tls_key=...)")
            return None
        return cls(Path(cert), None if key is None else Path(key),
                   None if ca is None else Path(ca))


def is_loopback(host: str) -> bool:
    """Whether listening on `host` keeps the listener on this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve anywhere


def check_node_host(host: str, tls: NodeTls | None, insecure_no_tls: bool) -> None:
    """Refuse node links in clear text beyond this machine unless told to."""
    if tls is not None or insecure_no_tls or is_loopback(host):
        return
    raise InvalidArgument(
        f"node host {host} is reachable from other machines, and node calls would cross "
        "the network in clear text: give the node a certificate and key (alarmtop serve "
        "--node-tls-cert/--node-tls-key; PostgresBackend(node_tls_cert=..., "
        "node_tls_key=...)), or --insecure-no-tls (node_insecure_no_tls=True) if "
        "something else encrypts the traffic")
