"""Node-to-node calls in a fleet: an event for an object runs on its shard's owner.

Every `Runtime` on a shared backend listens on an address it records in the
database (127.0.0.1 and a free port by default). A call, a socket event or an
operator's action on an object whose shard another node holds is sent there; the
owner runs it as one of its own events and answers. One event at a time per
object holds across the fleet because only the owner runs events. Connections are
authenticated with the cluster secret every node reads from the database.

The wire: JSON text frames. The caller's first frame is `{"op": "hello", "secret":
..., "node": ..., "protocol": n}`; then requests `{"id": n, "op": ..., ...}` answered
by `{"id": n, "ok": true, "value": ...}` or `{"id": n, "ok": false, "error": {"type",
"message"}}`. Protocol 2 adds frames the owner pushes unasked on the same connection,
for the object sockets opened through it (`core/fleet_sockets.py`): `{"socket": ref,
"send": text}` and `{"socket": ref, "close": [code, reason]}`; the frames for one
socket arrive in the order the owner sent them, and before the answer to the request
during which it sent them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from alarmtop.core.kernel.supervisor import Supervisor
from alarmtop.core.model.errors import (
    DiskFull,
    InvalidArgument,
    InvalidObjectName,
    LeaseLost,
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
MAX_FRAME = 4 * 1024 * 1024
CALL_TIMEOUT_S = 60.0
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
        RuntimeError, TypeError, PermissionError)}


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
        self._conn = conn
        self.node = node
        self.protocol = protocol
        self.open = True

    async def push(self, frame: dict[str, Any]) -> bool:
        """Send a frame unasked; False when the connection is gone (the peer finds out
        on its side, and closes what it relayed through it)."""
        if not self.open:
            return False
        try:
            await self._conn.send(json.dumps(frame))
        except Exception:
            return False
        return True

    def __repr__(self) -> str:
        return f"<NodeLink from {self.node}>"


Handler = Callable[[dict[str, Any], NodeLink], Awaitable[Any]]


class NodeServer:
    """Where other nodes reach this one: a WebSocket route, authenticated.

    `handle(request, link)` answers one request; `link_closed(link)` is told when a
    caller's connection ends (what was opened through it has nobody to talk to)."""

    def __init__(self, node_id: str, secret: Callable[[], str], handle: Handler,
                 host: str = "127.0.0.1", port: int = 0,
                 link_closed: Callable[[NodeLink], None] | None = None) -> None:
        self.node_id = node_id
        self._secret = secret
        self._handle = handle
        self._link_closed = link_closed
        self.host, self.port = host, port
        self._server: Any = None
        self._conns: set[Any] = set()

    @property
    def address(self) -> str:
        return f"ws://{self.host}:{self.port}/node"

    async def start(self) -> None:
        from websockets.asyncio.server import serve
        self._server = await serve(self._serve, self.host, self.port, max_size=MAX_FRAME,
                                   compression=None, logger=_wire_log)
        self.port = next(iter(self._server.sockets)).getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for conn in list(self._conns):
                conn.transport.abort()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    async def _serve(self, conn: Any) -> None:
        try:
            hello = json.loads(await asyncio.wait_for(conn.recv(), 10.0))
        except Exception:
            await conn.close(1008, "hello expected")
            return
        secret = self._secret()
        if not (isinstance(hello, dict) and hello.get("op") == "hello" and secret and
                hmac.compare_digest(str(hello.get("secret", "")), secret)):
            log.warning("node connection from %s refused: wrong cluster secret",
                        conn.remote_address)
            await conn.close(1008, "wrong cluster secret")
            return
        protocol = hello.get("protocol", 1)
        if not (isinstance(protocol, int) and 1 <= protocol <= PROTOCOL):
            # A newer node's requests could mean what this one cannot do: say so at once
            # rather than misread them.
            log.warning("node connection from %s refused: it speaks node protocol %r, this "
                        "node 1 to %d", hello.get("node"), protocol, PROTOCOL)
            await conn.close(1008, f"node protocol {protocol!r} not spoken here (1 to "
                                   f"{PROTOCOL}); upgrade this node")
            return
        link = NodeLink(conn, str(hello.get("node") or "?")[:200], protocol)
        self._conns.add(conn)
        tasks: set[asyncio.Task[None]] = set()
        try:
            async for frame in conn:
                request = _request_of(frame)
                task = asyncio.get_running_loop().create_task(self._answer(conn, link,
                                                                           request))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        except Exception:  # the caller went away: its calls' answers have nowhere to go
            pass
        finally:
            link.open = False
            self._conns.discard(conn)
            for task in tasks:
                task.cancel()
            if self._link_closed is not None:
                try:
                    self._link_closed(link)
                except Exception:
                    log.exception("cleaning up after the connection from node %s failed",
                                  link.node)

    async def _answer(self, conn: Any, link: NodeLink, request: dict[str, Any]) -> None:
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
        with contextlib.suppress(Exception):
            await conn.send(json.dumps(reply))


def _request_of(frame: str | bytes) -> dict[str, Any]:
    """A request frame, or one marked invalid (answered with an error, nothing run)."""
    try:
        request = json.loads(frame)
    except ValueError:
        return {"id": None, "invalid": "a node request is one JSON object"}
    if not isinstance(request, dict):
        return {"id": None, "invalid": "a node request is one JSON object"}
    if not isinstance(request.get("op"), str):
        return {"id": request.get("id"), "invalid": "a node request names its op"}
    return request


class NodeClient:
    """One connection to a peer node, shared by the calls made to it, and by the
    object sockets relayed to it (each a stream of frames the peer pushes)."""

    def __init__(self, address: str, node_id: str, secret: str) -> None:
        self.address = address
        self._node_id = node_id
        self._secret = secret
        self._conn: Any = None
        self._pending: dict[int, asyncio.Future[Any]] = {}
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
                from websockets.asyncio.client import connect
                try:
                    conn = await asyncio.wait_for(connect(self.address, max_size=MAX_FRAME,
                                                          compression=None, logger=_wire_log),
                                                  5.0)
                except Exception as exc:
                    raise PeerDown(f"the node at {self.address} does not answer ({exc})"
                                   ) from exc
                try:
                    await conn.send(json.dumps({"op": "hello", "secret": self._secret,
                                                "node": self._node_id, "protocol": PROTOCOL}))
                except Exception as exc:
                    # The peer went away right after the handshake: no call was sent.
                    await conn.close()
                    raise PeerDown(f"the node at {self.address} went away as it was "
                                   f"reached ({exc})") from exc
                self._conn = conn
                self._reader = self._tasks.spawn(self._read(conn), name="node-link-reader",
                                                 report=False)
        return self._conn

    async def _read(self, conn: Any) -> None:
        try:
            async for frame in conn:
                reply = json.loads(frame)
                if "id" not in reply and "socket" in reply:
                    stream = self._streams.get(str(reply["socket"]))
                    if stream is not None and stream[0] is conn:
                        try:
                            stream[1](reply)
                        except Exception:  # one socket's fault must not end the link
                            log.exception("a frame relayed from %s was not delivered",
                                          self.address)
                    continue
                fut = self._pending.pop(reply.get("id"), None)
                if fut is not None and not fut.done():
                    fut.set_result(reply)
        except Exception:
            pass
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
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(NodeUnreachable(
                        f"the node at {self.address} went away during the call"))
            self._pending.clear()

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
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        from websockets.exceptions import ConnectionClosed
        try:
            try:
                await conn.send(json.dumps({"id": rid, "op": op, **fields}))
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
