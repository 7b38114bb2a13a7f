"""Node-to-node calls in a fleet: an event for an object runs on its shard's owner.

Every `Runtime` on a shared backend listens on an address it records in the
database (127.0.0.1 and a free port by default; `wss://` when the node has a
certificate). A call, a socket event or an operator's action on an object whose
shard another node holds is sent there; the owner runs it as one of its own
events and answers. One event at a time per object holds across the fleet because
only the owner runs events. A connection is let in once the caller proves it
knows the cluster secret every node reads from the database (`handshake`: a fresh
challenge each time, the secret never on the wire); until then it waits in a
small lobby of its own (`admission`).

The wire: JSON messages (`frames`: one that does not fit in a frame goes in
parts). After the handshake, requests `{"id": n, "op": ..., ...}` are answered by
`{"id": n, "ok": true, "value": ...}` or `{"id": n, "ok": false, "error": {"type",
"message"}}`. Protocol 2 adds frames the owner pushes unasked on the same connection,
for the object sockets opened through it (`fleet/sockets.py`): `{"socket": ref,
"send": text}` and `{"socket": ref, "close": [code, reason]}`; the frames for one
socket arrive in the order the owner sent them, and before the answer to the request
during which it sent them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

from alarmtop.core.fleet import handshake
from alarmtop.core.fleet.admission import NodeAdmission
from alarmtop.core.fleet.frames import (
    MAX_FRAME,
    LinkWriter,
    PartsError,
    Receiver,
    encode,
)
from alarmtop.core.kernel.supervisor import Supervisor
from alarmtop.core.model.errors import (
    DiskFull,
    InvalidArgument,
    InvalidObjectName,
    LeaseLost,
    MessageTooLarge,
    NoAlarm,
    NodeUnreachable,
    NotSerializable,
    ObjectBusy,
    PeerDown,
    ReentrantCall,
    RemoteCallError,
    RuntimeNotRunning,
    ShardMoved,
    SqlError,
    StorageError,
    UnknownMethod,
    UnknownSocket,
)
from alarmtop.core.model.execution_errors import (
    CallbackAlreadyCompleted,
    InvalidExecutionState,
    UnknownCallback,
    UnknownExecution,
    ValidationError,
)

log = logging.getLogger("alarmtop.fleet")
# The transport's own chatter (connections opened and closed) is not the operator's
# business; its warnings and errors still show.
_wire_log = logging.getLogger("alarmtop.fleet.wire")
_wire_log.setLevel(logging.WARNING)
CALL_TIMEOUT_S = 60.0
HELLO_S = 5.0  # a connection proves the secret within this, or is closed
LOG_EVERY_S = 10.0  # refused handshakes: a line at most this often, with a count
# 1: calls, operator actions, events. 2: object sockets (frames pushed by the owner).
# A caller that says no protocol speaks 1.
PROTOCOL = 2
# A frame the owner pushed for one socket; None when the connection it came on ended.
Listener = Callable[[dict[str, Any] | None], None]


# Errors a caller sees as if the call had run on its own node.
_KNOWN: dict[str, type[BaseException]] = {
    cls.__name__: cls for cls in (
        UnknownMethod, NoAlarm, InvalidArgument, InvalidObjectName, NotSerializable,
        ReentrantCall, StorageError, SqlError, DiskFull, RuntimeNotRunning,
        ShardMoved, LeaseLost, ObjectBusy, UnknownSocket,
        UnknownExecution, UnknownCallback, CallbackAlreadyCompleted,
        InvalidExecutionState, ValidationError, ValueError, KeyError, LookupError,
        RuntimeError, TypeError, PermissionError, MessageTooLarge)}


class LinkLost(NodeUnreachable):
    """The connection to the owner ended while a call was in flight on it: the call may
    have run there (the router waits for the shard's next owner, then says so)."""

    def __init__(self, message: str, address: str) -> None:
        super().__init__(message)
        self.address = address


def error_payload(exc: BaseException) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": str(exc)}


def rebuild_error(payload: dict[str, Any], node: str) -> BaseException:
    """The caller's side of an owner's error: the same type when it can be rebuilt from
    its message alone, else a `RemoteCallError` naming it."""
    name, message = str(payload.get("type")), str(payload.get("message"))
    cls = _KNOWN.get(name)
    if cls is not None:
        try:
            exc = cls.__new__(cls)
            BaseException.__init__(exc, message)
            return exc
        except Exception:  # a constructor with fields: say what it was instead
            pass
    return RemoteCallError(name, message, node)


class NodeLink:
    """One authenticated connection from another node: its requests are answered on
    it, and the frames of the object sockets opened through it are pushed on it."""

    def __init__(self, conn: Any, node: str, protocol: int) -> None:
        self._writer = LinkWriter(conn)
        self.node = node
        self.protocol = protocol
        self.open = True

    async def send(self, text: str) -> None:
        await self._writer.send(text)

    async def push(self, frame: dict[str, Any]) -> bool:
        """Send a frame unasked; False when the connection is gone (the peer finds out
        on its side, and closes what it relayed through it) or the frame is too big."""
        if not self.open:
            return False
        try:
            await self._writer.send(encode(frame, "a frame for a relayed socket"))
        except MessageTooLarge as exc:
            log.warning("a frame for a socket relayed by node %s not sent: %s", self.node, exc)
            return False
        except Exception:
            return False
        return True

    def __repr__(self) -> str:
        return f"<NodeLink from {self.node}>"


Handler = Callable[[dict[str, Any], NodeLink], Awaitable[Any]]


class NodeServer:
    """Where other nodes reach this one: a WebSocket route, authenticated.

    `handle(request, link)` answers one request; `link_closed(link)` is told when a
    caller's connection ends (what was opened through it has nobody to talk to).
    With `tls` it serves `wss://`. Connections that have not proved the secret are
    held in a lobby of their own (`admission`), the links that did have a cap."""

    def __init__(self, node_id: str, secret: Callable[[], str], handle: Handler,
                 host: str = "127.0.0.1", port: int = 0,
                 link_closed: Callable[[NodeLink], None] | None = None,
                 tls: ssl.SSLContext | None = None,
                 admission: NodeAdmission | None = None) -> None:
        self.node_id = node_id
        self._secret = secret
        self._handle = handle
        self._link_closed = link_closed
        self.host, self.port = host, port
        self._tls = tls
        self.admission = admission or NodeAdmission()
        self._server: Any = None
        self._conns: set[Any] = set()
        self._refused = 0  # handshakes refused since the last line about them
        self._refused_logged = -LOG_EVERY_S

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'wss' if self._tls is not None else 'ws'}://{host}:{self.port}/node"

    async def start(self) -> None:
        from websockets.asyncio.server import serve

        # Until a connection proves the secret, it may send a handshake frame and no
        # more: anything bigger is refused unread.
        self._server = await serve(self._serve, self.host, self.port,
                                   max_size=handshake.HELLO_MAX_BYTES, compression=None,
                                   logger=_wire_log, ssl=self._tls,
                                   create_connection=self.admission.connection_class(),
                                   open_timeout=HELLO_S)
        self.port = next(iter(self._server.sockets)).getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for conn in list(self._conns):
                conn.transport.abort()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    async def _greet(self, conn: Any) -> handshake.Hello | None:
        """The caller, once it proved the secret; None (the connection closed, saying
        why) when it did not."""
        from websockets.exceptions import ConnectionClosed
        nonce = handshake.new_nonce()
        try:
            await conn.send(handshake.challenge(self.node_id, nonce))
            frame = await asyncio.wait_for(conn.recv(), HELLO_S)
            caller = handshake.check_hello(self._secret(), nonce, frame)
        except handshake.HandshakeRefused as exc:
            self._note_refusal(conn, str(exc))
            await _close(conn, 1008, str(exc))
            return None
        except TimeoutError:
            self._note_refusal(conn, f"no hello within {HELLO_S:g} s")
            await _close(conn, 1008, "hello expected")
            return None
        except ConnectionClosed as exc:
            # Gone, or a frame over the handshake's size (the transport said 1009).
            if exc.rcvd is None and exc.sent is not None and exc.sent.code == 1009:
                self._note_refusal(conn, "a handshake frame over "
                                   f"{handshake.HELLO_MAX_BYTES} bytes")
            return None
        protocol = 1 if caller.protocol is None else caller.protocol
        if not 1 <= protocol <= PROTOCOL:
            # A newer node's requests could mean what this one cannot do: say so at once
            # rather than misread them.
            log.warning("node connection from %s refused: it speaks node protocol %r, this "
                        "node 1 to %d", caller.node, protocol, PROTOCOL)
            await _close(conn, 1008, f"node protocol {protocol!r} not spoken here (1 to "
                                     f"{PROTOCOL}); upgrade this node")
            return None
        full = self.admission.welcome(conn)
        if full is not None:
            log.warning("node connection from %s refused: %s", caller.node, full)
            await _close(conn, 1013, full)
            return None
        conn.protocol.max_message_size = MAX_FRAME
        try:
            await conn.send(handshake.welcome(self._secret(), nonce, caller, self.node_id))
        except ConnectionClosed:
            self.admission.farewell()
            return None
        return caller._replace(protocol=protocol)

    def _note_refusal(self, conn: Any, why: str) -> None:
        """One line for a refused handshake, then at most one every `LOG_EVERY_S` with
        how many: a flood of bad hellos must not flood the log."""
        self._refused += 1
        now = time.monotonic()
        if now - self._refused_logged >= LOG_EVERY_S:
            more = f" ({self._refused - 1} more refused since the last line)" \
                if self._refused > 1 else ""
            log.warning("node connection from %s refused: %s%s",
                        _remote(conn), why, more)
            self._refused, self._refused_logged = 0, now

    async def _serve(self, conn: Any) -> None:
        caller = await self._greet(conn)
        if caller is None:
            return
        assert caller.protocol is not None
        link = NodeLink(conn, caller.node, caller.protocol)
        self._conns.add(conn)
        tasks: set[asyncio.Task[None]] = set()
        receiver = Receiver()
        try:
            async for frame in conn:
                request = _request_of(receiver, frame)
                if request is None:
                    continue  # a part of a message still coming
                task = asyncio.get_running_loop().create_task(self._answer(link, request))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        except Exception:  # the caller went away: its calls' answers have nowhere to go
            pass
        finally:
            link.open = False
            self._conns.discard(conn)
            self.admission.farewell()
            for task in tasks:
                task.cancel()
            if self._link_closed is not None:
                try:
                    self._link_closed(link)
                except Exception:
                    log.exception("cleaning up after the connection from node %s failed",
                                  link.node)

    async def _answer(self, link: NodeLink, request: dict[str, Any]) -> None:
        rid = request.get("id")
        try:
            if "invalid" in request:
                raise InvalidArgument(request["invalid"])
            value = await self._handle(request, link)
            reply = {"id": rid, "ok": True, "value": value}
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            reply = {"id": rid, "ok": False, "error": error_payload(exc)}
        try:
            text = encode(reply, f"the answer to node {link.node}'s {request.get('op')!r}")
        except MessageTooLarge as exc:
            # It ran here, and its answer cannot go back: the caller is told so, alone.
            text = encode({"id": rid, "ok": False, "error": error_payload(MessageTooLarge(
                f"{exc} (it ran on node {self.node_id})"))}, "an error")
        except (TypeError, ValueError) as exc:
            text = encode({"id": rid, "ok": False, "error": error_payload(exc)}, "an error")
        with contextlib.suppress(Exception):
            await link.send(text)


def _remote(conn: Any) -> str:
    peer = getattr(conn, "remote_address", None)
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


async def _close(conn: Any, code: int, reason: str) -> None:
    """Close with a reason that fits in a close frame (123 bytes)."""
    with contextlib.suppress(Exception):
        await conn.close(code, reason.encode("utf-8", "replace")[:123].decode("utf-8",
                                                                               "ignore"))


def _request_of(receiver: Receiver, frame: str | bytes) -> dict[str, Any] | None:
    """A request, None while its parts are still coming, or one marked invalid
    (answered with an error, nothing run)."""
    try:
        request = receiver.take(frame)
    except PartsError as exc:
        return {"id": None, "invalid": f"a node request in parts: {exc}"}
    except ValueError:
        return {"id": None, "invalid": "a node request is one JSON object"}
    if request is None:
        return None
    if not isinstance(request, dict):
        return {"id": None, "invalid": "a node request is one JSON object"}
    if not isinstance(request.get("op"), str):
        return {"id": request.get("id"), "invalid": "a node request names its op"}
    return request


class NodeClient:
    """One connection to a peer node, shared by the calls made to it, and by the
    object sockets relayed to it (each a stream of frames the peer pushes).

    `tls` checks a `wss://` peer's certificate (`fleet.tls.client_context`)."""

    def __init__(self, address: str, node_id: str, secret: str,
                 tls: ssl.SSLContext | None = None) -> None:
        self.address = address
        self._node_id = node_id
        self._secret = secret
        self._tls = tls
        self._conn: Any = None
        self._writer: LinkWriter | None = None
        # Call id -> (the connection it was sent on, its answer to come).
        self._pending: dict[int, tuple[Any, asyncio.Future[Any]]] = {}
        self._ids = itertools.count(1)
        self._tasks = Supervisor(None, f"link to {address}")  # its connection's reader
        self._reader: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        # Socket ref -> (the connection it was opened on, who takes its frames).
        self._streams: dict[str, tuple[Any, Listener]] = {}

    async def _connected(self) -> Any:
        if self._conn is not None:
            return self._conn
        async with self._lock:
            if self._conn is None:
                conn = await self._open()
                self._writer = LinkWriter(conn)
                self._conn = conn
                self._reader = self._tasks.spawn(self._read(conn), name="node-link-reader")
        return self._conn

    async def _open(self) -> Any:
        """A connection that passed the handshake; `PeerDown` (nothing was sent: ask
        again) or `NodeUnreachable` (refused: asking again would not help)."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed
        secure = self.address.startswith("wss://")
        try:
            conn = await asyncio.wait_for(connect(
                self.address, max_size=MAX_FRAME, compression=None, logger=_wire_log,
                ssl=(self._tls or True) if secure else None), HELLO_S)
        except Exception as exc:
            raise PeerDown(f"the node at {self.address} does not answer ({exc})") from exc
        try:
            node, nonce = handshake.read_challenge(await asyncio.wait_for(conn.recv(),
                                                                          HELLO_S))
            sent = handshake.hello(self._secret, nonce, self._node_id, PROTOCOL)
            await conn.send(sent)
            handshake.check_welcome(self._secret, nonce, sent,
                                    await asyncio.wait_for(conn.recv(), HELLO_S))
        except BaseException as exc:
            await _close(conn, 1008, "handshake failed")
            if isinstance(exc, handshake.HandshakeRefused):
                raise NodeUnreachable(f"the node at {self.address} failed the handshake: "
                                      f"{exc}") from exc
            if isinstance(exc, ConnectionClosed) and exc.rcvd is not None and \
                    exc.rcvd.code == 1008:
                raise NodeUnreachable(f"the node at {self.address} refused this node: "
                                      f"{exc.rcvd.reason}") from exc
            if isinstance(exc, TimeoutError):
                raise PeerDown(f"the node at {self.address} did not complete the handshake "
                               f"within {HELLO_S:g} s (an alarmtop older than this node "
                               "does not challenge its callers: upgrade it)") from exc
            if isinstance(exc, Exception):
                # The peer went away (or was full) as it was reached: no call was sent.
                raise PeerDown(f"the node at {self.address} went away as it was reached "
                               f"({exc})") from exc
            raise
        del node  # the listener's own name for itself: the address is what counts here
        return conn

    async def _read(self, conn: Any) -> None:
        from websockets.exceptions import ConnectionClosed
        receiver = Receiver()
        ended: str | None = None
        try:
            async for frame in conn:
                try:
                    reply = receiver.take(frame)
                except ValueError as exc:  # one bad frame must not end the link
                    log.warning("a frame from the node at %s was dropped: %s", self.address,
                                exc)
                    continue
                if not isinstance(reply, dict):
                    continue
                if "id" not in reply and "socket" in reply:
                    stream = self._streams.get(str(reply["socket"]))
                    if stream is not None and stream[0] is conn:
                        try:
                            stream[1](reply)
                        except Exception:  # one socket's fault must not end the link
                            log.exception("a frame relayed from %s was not delivered",
                                          self.address)
                    continue
                pending = self._pending.get(reply.get("id"))  # type: ignore[arg-type]
                if pending is not None and pending[0] is conn and not pending[1].done():
                    pending[1].set_result(reply)
        except ConnectionClosed as exc:
            ended = f"it closed ({exc})"
        except Exception as exc:
            ended = f"{type(exc).__name__}: {exc}"
            log.warning("the link to the node at %s ended: %s", self.address, ended)
        finally:
            if self._conn is conn:
                self._conn = None
            for ref, (on, listener) in list(self._streams.items()):
                if on is conn:
                    del self._streams[ref]
                    try:
                        listener(None)
                    except Exception:
                        log.exception("closing a socket relayed to %s failed", self.address)
            in_flight = [fut for on, fut in self._pending.values()
                         if on is conn and not fut.done()]
            if in_flight:
                log.warning("the link to the node at %s ended with %d call(s) in flight "
                            "(%s): they may have run there, and fail once the shards' next "
                            "owners hold them", self.address, len(in_flight),
                            ended or "it closed")
            for fut in in_flight:
                fut.set_exception(LinkLost(
                    f"the node at {self.address} went away during the call", self.address))

    async def request(self, op: str, timeout_s: float = CALL_TIMEOUT_S, **fields: Any) -> Any:
        return await self._request_on(await self._connected(), op, timeout_s, fields)

    async def open_stream(self, ref: str, listener: Listener, op: str,
                          timeout_s: float = CALL_TIMEOUT_S, **fields: Any) -> Any:
        """Send the request that opens stream `ref` (a relayed socket): the frames the
        peer pushes for it, from now on, go to `listener`, and `listener(None)` is
        told if the connection ends."""
        conn = await self._connected()
        if ref in self._streams:
            raise InvalidArgument(f"stream {ref!r} is open already")
        self._streams[ref] = (conn, listener)
        try:
            return await self._request_on(conn, op, timeout_s, fields)
        except BaseException:
            self.end_stream(ref)
            raise

    async def stream_request(self, ref: str, op: str, timeout_s: float = CALL_TIMEOUT_S,
                             **fields: Any) -> Any:
        """A request about stream `ref`, on the connection that opened it: the peer
        knows the stream only there."""
        stream = self._streams.get(ref)
        if stream is None or stream[0] is not self._conn:
            raise NodeUnreachable(f"the connection to the node at {self.address} that "
                                  "carried this socket is gone")
        return await self._request_on(stream[0], op, timeout_s, fields)

    def end_stream(self, ref: str) -> None:
        self._streams.pop(ref, None)

    async def _request_on(self, conn: Any, op: str, timeout_s: float,
                          fields: dict[str, Any]) -> Any:
        rid = next(self._ids)
        text = encode({"id": rid, "op": op, **fields}, f"this node's {op!r} request")
        writer = self._writer if self._conn is conn else None
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rid] = (conn, fut)
        from websockets.exceptions import ConnectionClosed
        try:
            try:
                if writer is None:
                    raise ConnectionClosed(None, None)
                await writer.send(text)
            except ConnectionClosed as exc:
                # The peer went away before the call left: nothing ran there, so the
                # router may ask again (the next owner, or this peer once back).
                if self._conn is conn:
                    self._conn = None
                raise PeerDown(f"the node at {self.address} went away before the call was "
                               f"sent ({exc})") from exc
            reply = await asyncio.wait_for(fut, timeout_s)
        except TimeoutError as exc:
            raise NodeUnreachable(f"the node at {self.address} did not answer within "
                                  f"{timeout_s:g} s") from exc
        finally:
            self._pending.pop(rid, None)
        if reply.get("ok"):
            return reply.get("value")
        raise rebuild_error(reply.get("error") or {}, self.address)

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 1.0)
        self._reader = None
        await self._tasks.close()
        self._tasks.reopen()  # a link is made again on the next call
