"""The edge's side of an object socket whose object runs on another node.

The client stays connected here, where it was admitted (Origin, token, caps, pace:
`objects.py`); its messages go to the owner over the node connection, and what the
owner pushes for it (sends, a close) comes back to it in order. The protocol and
the close codes are in `core/fleet_sockets.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from alarmtop.core.model.errors import NodeUnreachable, UnknownSocket
from alarmtop.core.ops import CLOSE_MOVED, NODE_GONE, NodeClient
from alarmtop.server.guard import CLOSE_POLICY
from alarmtop.server.wire import close_reason

log = logging.getLogger("alarmtop.server")
# Frames waiting for a client that reads slower than its object sends: past this the
# socket is closed rather than the edge's memory filled (the node connection, shared by
# every socket relayed to that owner, cannot be held up for one client).
MAX_QUEUED = 4096
CLOSE_REQUEST_S = 2.0  # the server's stop waits for it: short
_refs = itertools.count(1)


class RelayedSocket:
    """One client's socket, relayed to the node that holds its object."""

    def __init__(self, conn: ServerConnection, cls: str, name: str,
                 request: dict[str, Any]) -> None:
        self._conn = conn
        self._cls, self._name, self._request = cls, name, request
        self.ref = f"s{next(_refs)}"
        self.peer: NodeClient | None = None
        self._frames: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._writer: asyncio.Task[None] | None = None
        self._ended = False  # the owner forgot the socket, or the link to it is gone
        self._closing = False  # a close is queued for the client: nothing after it goes

    async def open(self, peer: NodeClient) -> dict[str, Any]:
        """Open the socket on `peer` (its web_socket_connect runs there): the owner's
        answer, {"accepted": bool}. Raises what the object's handler raised."""
        self.peer, self._frames, self._closing = peer, asyncio.Queue(), False
        answer = await peer.open_stream(self.ref, self._take, "socket_open", cls=self._cls,
                                        name=self._name, socket=self.ref,
                                        request=self._request)
        if not isinstance(answer, dict) or not isinstance(answer.get("accepted"), bool):
            raise UnknownSocket(f"the owner answered socket_open with {answer!r:.80}")
        if answer["accepted"]:
            self._writer = asyncio.get_running_loop().create_task(self._write(),
                                                                  name="relayed-socket")
        else:
            peer.end_stream(self.ref)
        return answer

    def _take(self, frame: dict[str, Any] | None) -> None:
        """A frame the owner pushed (None: the node connection ended). Called by the
        node connection's reader, which must never wait: queued for the writer."""
        if frame is None:
            self._ended = True
            self._close(CLOSE_MOVED, NODE_GONE)
        elif self._closing:
            return
        elif self._frames.qsize() >= MAX_QUEUED:
            self._close(CLOSE_POLICY, f"the client reads too slowly ({MAX_QUEUED} messages "
                                      "waiting)")
        elif isinstance(frame.get("send"), str):
            self._frames.put_nowait(("send", frame["send"]))
        elif isinstance(frame.get("close"), list) and len(frame["close"]) == 2:
            code, reason = frame["close"]
            self._close(_code(code), str(reason))
        else:
            log.warning("a frame the owner of %s/%s pushed was not understood: %.80r",
                        self._cls, self._name, frame)

    def _close(self, code: int, reason: str) -> None:
        if not self._closing:
            self._closing = True
            self._frames.put_nowait(("close", (code, reason)))

    async def _write(self) -> None:
        """The owner's output, to the client, in order; ends with the first close."""
        while True:
            kind, value = await self._frames.get()
            if kind == "send":
                with contextlib.suppress(ConnectionClosed):
                    await self._conn.send(value)
                continue
            code, reason = value
            with contextlib.suppress(ConnectionClosed):
                await self._conn.close(code, close_reason(reason))
            return

    async def message(self, text: str) -> None:
        """A message from the client, to the object on its owner (or answered there
        from the auto-response, without waking it)."""
        if self._ended or self.peer is None:
            return  # the close is on its way to the client
        reply = await self.peer.stream_request(self.ref, "socket_message", socket=self.ref,
                                               text=text)
        reply = reply if isinstance(reply, dict) else {}
        if isinstance(reply.get("auto"), str):
            if not self._closing:
                self._frames.put_nowait(("send", reply["auto"]))
        elif isinstance(reply.get("closed"), list) and len(reply["closed"]) == 2:
            self._ended = True  # the owner ended it (the handler failed, or it moved)
            code, reason = reply["closed"]
            self._close(_code(code), str(reason))

    async def fail(self, exc: Exception) -> tuple[int, str]:
        """Relaying a message failed here (the owner went away, forgot the socket):
        the client is closed so it reconnects."""
        if isinstance(exc, NodeUnreachable | UnknownSocket):
            self._ended = True  # the owner holds nothing of it any more
            code, reason = CLOSE_MOVED, NODE_GONE
        else:  # the owner may still hold it: `end` tells it
            log.warning("relaying a message to %s/%s failed: %s", self._cls, self._name, exc)
            code, reason = 1011, str(exc)
        self._close(code, reason)
        return code, reason

    async def end(self, code: int, reason: str, clean: bool) -> None:
        """The client's socket ended: tell the owner (its web_socket_close runs there),
        unless the owner ended it first; stop relaying."""
        peer = self.peer
        if peer is not None and not self._ended:
            try:
                await peer.stream_request(self.ref, "socket_close", CLOSE_REQUEST_S,
                                          socket=self.ref, code=code, reason=reason,
                                          clean=clean)
            except Exception as exc:  # gone with the owner: its side is closed already
                log.debug("telling the owner of %s/%s its socket closed failed: %s",
                          self._cls, self._name, exc)
        if peer is not None:
            peer.end_stream(self.ref)
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)


def _code(value: Any) -> int:
    """A close code as a client may be sent one (1005 and 1006 are never sent)."""
    if isinstance(value, int) and (1000 <= value <= 1014 or 3000 <= value <= 4999) and \
            value not in (1004, 1005, 1006):
        return value
    return 1011
