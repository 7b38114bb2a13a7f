"""The TLS contexts of node links, from a node's options (`model.node_tls.NodeTls`).

A node with a certificate listens on `wss://`; when it calls another node on
`wss://` it checks that node's certificate against the authority it was given,
else against the system's authorities and its own certificate (one self-signed
certificate shared by the fleet then works without more), and checks that the
certificate names the address it called.
"""

from __future__ import annotations

import ssl

from alarmtop.core.model.errors import InvalidArgument
from alarmtop.core.model.node_tls import NodeTls


def server_context(tls: NodeTls) -> ssl.SSLContext:
    """The listener's context; `InvalidArgument` saying which file cannot be used."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(tls.cert, tls.key)
    except FileNotFoundError as exc:
        raise InvalidArgument(f"node TLS: {exc.filename or tls.cert} does not exist") from None
    except (ssl.SSLError, OSError) as exc:
        files = f"{tls.cert}{' and ' + str(tls.key) if tls.key else ''}"
        raise InvalidArgument(f"node TLS: cannot load {files}: "
                              f"{getattr(exc, 'reason', None) or exc} (a PEM certificate and "
                              "its private key expected)") from None
    return ctx


def client_context(tls: NodeTls | None) -> ssl.SSLContext:
    """What a node checks another node's certificate with, when it calls it on wss://."""
    try:
        if tls is not None and tls.ca is not None:
            return ssl.create_default_context(cafile=tls.ca)
        ctx = ssl.create_default_context()
        if tls is not None:
            ctx.load_verify_locations(tls.cert)
    except FileNotFoundError as exc:
        raise InvalidArgument(f"node TLS: {exc.filename} does not exist") from None
    except (ssl.SSLError, OSError) as exc:
        where = tls.ca or tls.cert if tls is not None else "the system's authorities"
        raise InvalidArgument(f"node TLS: cannot load {where}: "
                              f"{getattr(exc, 'reason', None) or exc} (PEM certificates "
                              "expected)") from None
    return ctx
