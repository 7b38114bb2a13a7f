"""Who holds a socket of a node's listener for other nodes, from the moment it is
accepted.

Two budgets, both counted in the runtime's descriptor budget (`NODE_SOCKETS`): the
lobby, connections that have not proved the cluster secret yet (in the HTTP or
TLS handshake, sending no hello, refused and closing), and the links, other nodes
that did. A connection enters the lobby when accepted and leaves it when it
proves the secret (then it counts among the links) or when it is gone; the lobby's
policy is `model.lobby.Lobby` (a newcomer always gets in; the address holding the
most gives up its oldest). So silent sockets, however many, hold at most
`MAX_PENDING` descriptors, and never a place a node needs.

An evicted connection that finished its WebSocket handshake gets a 1013 close
frame saying why; one still in its handshake is cut off. Evictions are logged in
a line at most every `LOG_EVERY_S`, with how many since the last.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from alarmtop.core.model.lobby import Lobby

if TYPE_CHECKING:
    from websockets.asyncio.server import ServerConnection

log = logging.getLogger("alarmtop.fleet")
MAX_PENDING = 16  # connections not yet authenticated, at once
MAX_LINKS = 64  # other nodes' links at once: a fleet of up to 65 nodes
NODE_SOCKETS = MAX_PENDING + MAX_LINKS
CLOSE_TRY_AGAIN = 1013
FULL = "node listener full for unauthenticated connections; retry"
LOG_EVERY_S = 10.0


def peer_host(transport: asyncio.BaseTransport) -> str:
    """The peer's address without its port: what the lobby shares fairly."""
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and peer:
        return str(peer[0])
    return str(peer)


class NodeAdmission:
    """The lobby and the links of one node listener."""

    def __init__(self, max_pending: int = MAX_PENDING, max_links: int = MAX_LINKS) -> None:
        self.lobby: Lobby[ServerConnection] = Lobby(max_pending)
        self.max_links = max_links
        self.links = 0  # authenticated connections open
        self.evicted = 0  # connections pushed out of the lobby, since the start
        self._unlogged = 0
        self._logged_at = -LOG_EVERY_S

    def connection_class(self) -> type[ServerConnection]:
        """The connection type the listener makes for each accepted socket: it enters
        the lobby when made and leaves it when lost."""
        from websockets.asyncio.server import ServerConnection
        admission = self

        class Counted(ServerConnection):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                super().connection_made(transport)
                admission.arrived(self, peer_host(transport))

            def connection_lost(self, exc: Exception | None) -> None:
                admission.lobby.leave(self)
                super().connection_lost(exc)

        return Counted

    def arrived(self, conn: ServerConnection, host: str) -> None:
        for victim in self.lobby.admit(conn, host):
            _evict(victim)
            self._note_eviction(host)

    def welcome(self, conn: ServerConnection) -> str | None:
        """Move `conn`, which proved the secret, from the lobby to the links; or say why
        not (the links are at their cap)."""
        if self.links >= self.max_links:
            return (f"node listener full: {self.max_links} node links open; try again "
                    "later")
        self.lobby.leave(conn)
        self.links += 1
        return None

    def farewell(self) -> None:
        """A welcomed link is gone."""
        self.links -= 1

    def _note_eviction(self, newcomer: str) -> None:
        self.evicted += 1
        self._unlogged += 1
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_S:
            log.warning("node listener: %d connection(s) that never proved the cluster secret "
                        "closed to make room for newer ones (%d may wait at once; the latest "
                        "came from %s)", self._unlogged, self.lobby.max_total, newcomer)
            self._unlogged, self._logged_at = 0, now


def _evict(conn: ServerConnection) -> None:
    """Close `conn` now: its place is someone else's. A close frame says why when the
    WebSocket is open; the socket is closed at once either way."""
    from websockets.protocol import State
    transport: Any = conn.transport
    if conn.protocol.state is State.OPEN:
        conn.protocol.send_close(CLOSE_TRY_AGAIN, FULL)
        conn.send_data()
        if transport.get_write_buffer_size() == 0:
            transport.close()
            return
    transport.abort()
