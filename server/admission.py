"""Who holds a socket of the ops server, from the moment it is accepted.

Two budgets, each with its own cap, both reserved in the runtime's descriptor
budget: the lobby (connections not yet welcomed: in the HTTP handshake, sending
no hello, refused and closing) and the welcomed `/ops` clients. A connection
enters the lobby when accepted, however far it gets; it leaves it when welcomed
(then it counts among the clients), when routed to the object sockets (which
have caps of their own), or when it is gone. So no socket that never showed a
token can take a place a console needs, nor a descriptor an object needs.

The lobby's policy (who makes room for a newcomer) is `lobby.Lobby`; this module
applies it: an evicted connection that finished its WebSocket handshake gets a
1013 close frame saying why; one still in its handshake is cut off. Evictions
are logged in a line at most every `LOG_EVERY_S`, with how many since the last.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.protocol import State

from alarmtop.server.guard import CLOSE_TRY_AGAIN, Refusal
from alarmtop.server.lobby import Lobby
from alarmtop.server.wire import close_reason

log = logging.getLogger("alarmtop.server")
LOG_EVERY_S = 10.0


def peer_host(transport: asyncio.BaseTransport) -> str:
    """The client's address, without its port: what the lobby shares fairly."""
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and peer:
        return str(peer[0])
    return str(peer)


class Admission:
    """The lobby and the welcomed clients of one ops server.

    Args:
        max_clients: welcomed `/ops` clients at once.
        max_pending: connections not yet welcomed, at once (the lobby).
    """

    def __init__(self, max_clients: int, max_pending: int) -> None:
        self.lobby: Lobby[ServerConnection] = Lobby(max_pending)
        self.max_clients = max_clients
        self.clients = 0  # welcomed /ops connections open
        self.evicted = 0  # connections pushed out of the lobby, since the start
        self._unlogged = 0
        self._logged_at = -LOG_EVERY_S

    @property
    def max_pending(self) -> int:
        return self.lobby.max_total

    def connection_class(self) -> type[ServerConnection]:
        """The connection type the server makes for each accepted socket: it enters the
        lobby when made and leaves it when lost."""
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
        for victim, refusal in self.lobby.enter(conn, host):
            _evict(victim, refusal)
            self._note_eviction(host)

    def routed(self, conn: ServerConnection) -> None:
        """`conn` goes to a route with caps of its own (object sockets)."""
        self.lobby.leave(conn)

    def welcome(self, conn: ServerConnection) -> Refusal | None:
        """Move `conn`, which showed a good token, from the lobby to the clients; or say
        why not (the clients are at their cap)."""
        if self.clients >= self.max_clients:
            return Refusal(CLOSE_TRY_AGAIN, f"server full: {self.max_clients} ops clients "
                                            "connected; try again later")
        self.lobby.leave(conn)
        self.clients += 1
        return None

    def farewell(self) -> None:
        """A welcomed client is gone."""
        self.clients -= 1

    def _note_eviction(self, newcomer: str) -> None:
        self.evicted += 1
        self._unlogged += 1
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_S:
            log.warning("ops server: %d connection(s) that never said hello closed to make "
                        "room for newer ones (%d may wait at once; the latest came from %s)",
                        self._unlogged, self.max_pending, newcomer)
            self._unlogged, self._logged_at = 0, now


def _evict(conn: ServerConnection, refusal: Refusal) -> None:
    """Close `conn` now: its place is someone else's. A close frame says why when the
    WebSocket is open; the socket is closed at once either way (not after the client's
    answer, which a flood would never send)."""
    transport: Any = conn.transport
    if conn.protocol.state is State.OPEN:
        conn.protocol.send_close(refusal.code, close_reason(refusal.reason))
        conn.send_data()
        if transport.get_write_buffer_size() == 0:
            transport.close()  # the close frame is out: a FIN after it
            return
    transport.abort()


__all__ = ["Admission", "peer_host"]
