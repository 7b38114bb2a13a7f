"""The `/ops` route: one console's connection, from its hello to its close.

A connection says hello with its token within HELLO_TIMEOUT_S, gets its welcome and
the snapshot, then the feed's deltas, and sends frames. The frames of one
connection are read in order and each runs in a task of its own, answered by id
when it ends: a query never waits behind a slow command, and a command on a busy
object fails alone, at its deadline (see `ops`). A connection has at most
`MAX_IN_FLIGHT` frames running; past that the next frame is read once one of them
ends (every one ends by its deadline). Commands and queries have budgets of their
own (`Pace`); a client that keeps going past them is closed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from alarmtop.core import Runtime
from alarmtop.core.model.errors import AlarmtopError
from alarmtop.core.ops import Supervisor
from alarmtop.server.admission import Admission
from alarmtop.server.auth import Tokens
from alarmtop.server.feed import ClientChannel, Feed, Frame
from alarmtop.server.guard import CLOSE_POLICY, RateLimit
from alarmtop.server.objects import refuse
from alarmtop.server.ops import OpsService, Session
from alarmtop.server.wire import (
    QUERY_OPS,
    Command,
    Hello,
    ProtocolError,
    close_reason,
    decode,
    encode,
    failure,
    result,
    welcome,
)

log = logging.getLogger("alarmtop.server")
HELLO_TIMEOUT_S = 3.0
# Commands change things and are audited: a person at a console sends a few a second.
RATE_PER_S = 50.0
RATE_BURST = 100.0
# Queries are what the console does on its own (pages and the ones around them, the
# detail of the row under the cursor): a key held down is 30 a second, each a query or
# two, so these leave the console ten times the room it needs.
QUERY_RATE_PER_S = 500.0
QUERY_BURST = 1000.0
MAX_REJECTED = 20  # rate-limited frames within one second that close the connection
MAX_IN_FLIGHT = 64  # frames of one connection running at once


class Pace:
    """A connection's two budgets: commands, and queries (which page fast)."""

    def __init__(self, commands_per_s: float, queries_per_s: float) -> None:
        self.commands = RateLimit(commands_per_s, RATE_BURST)
        self.queries = RateLimit(queries_per_s, max(QUERY_BURST, queries_per_s * 2))
        # When frames were refused in the last second, whichever budget refused. Not
        # "in a row": a flood only a little faster than the budget gets a frame through
        # now and then, which would reset such a count for ever; a console at its own
        # pace is never refused at all (the budgets are ten times it).
        self._refused: collections.deque[float] = collections.deque()

    @property
    def rejected(self) -> int:
        """Frames refused in the last second."""
        return len(self._refused)

    def allow(self, query: bool) -> bool:
        ok = (self.queries if query else self.commands).allow()
        now = time.monotonic()
        if not ok:
            self._refused.append(now)
        while self._refused and self._refused[0] < now - 1.0:
            self._refused.popleft()
        return ok



class OpsChannel:
    """The `/ops` connections of a server: `serve` each one; `viewers` are open now.

    Each frame's answer is a task of `tasks` (the server's, which ends them at its
    stop); `admission` holds the place of each welcomed connection."""

    def __init__(self, runtime: Runtime, tokens: Tokens, ops: OpsService, feed: Feed,
                 admission: Admission, tasks: Supervisor, *, rate_per_s: float = RATE_PER_S,
                 query_rate_per_s: float = QUERY_RATE_PER_S) -> None:
        self.rt = runtime
        self.tokens = tokens
        self.ops = ops
        self.feed = feed
        self.admission = admission
        self.tasks = tasks
        self.rate_per_s, self.query_rate_per_s = rate_per_s, query_rate_per_s
        self.viewers = 0

    async def serve(self, conn: ServerConnection, address: str) -> None:
        """One console's connection, from its hello to its close."""
        role = await self._hello(conn, address)
        if role is None:
            return
        full = self.admission.welcome(conn)
        if full is not None:
            await refuse(conn, full, f"ops client ({role})", address)
            return
        try:
            await self._welcomed(conn, Session(role, address))
        finally:
            self.admission.farewell()

    async def _hello(self, conn: ServerConnection, address: str) -> str | None:
        try:
            async with asyncio.timeout(HELLO_TIMEOUT_S):
                frame = await conn.recv()
        except TimeoutError:
            await close_quietly(conn, CLOSE_POLICY, "send hello first")
            return None
        except ConnectionClosed:
            return None  # left before saying hello: nothing to answer
        try:
            msg = decode(frame)
        except ProtocolError as exc:
            await self._no_hello(conn, address, exc.message, "hello expected")
            return None
        if not isinstance(msg, Hello):
            await self._no_hello(conn, address, 'the first message must be {"op": "hello", '
                                 '"token": "..."}', "hello expected")
            return None
        role = self.tokens.role_of(msg.token)
        if role is None:
            await self._no_hello(conn, address, "invalid token", "invalid token")
        return role

    async def _no_hello(self, conn: ServerConnection, address: str, error: str,
                        reason: str) -> None:
        log.warning("ops client %s refused (%s): %.200s", address, reason, error)
        with contextlib.suppress(ConnectionClosed):
            await conn.send(encode(failure(None, error)))
        await close_quietly(conn, CLOSE_POLICY, reason)

    async def _welcomed(self, conn: ServerConnection, session: Session) -> None:
        role = session.role

        async def send(frame: Frame) -> None:
            await conn.send(frame, text=True)  # bytes are UTF-8 JSON already

        try:
            await conn.send(encode(welcome(role)))
            await send(await self.feed.snapshot_frame())
        except ConnectionClosed:
            return  # left right after hello: normal, nothing to clean up
        channel = ClientChannel(send, self.feed.snapshot_frame)
        writer = asyncio.get_running_loop().create_task(channel.run())
        self.feed.clients.add(channel)
        self.viewers += 1
        self.rt.events.emit("viewer.connected", {"address": session.address, "role": role})
        try:
            await self._serve_commands(conn, channel, session)
        except ConnectionClosed:
            pass
        finally:
            self.feed.clients.discard(channel)
            self.viewers -= 1
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                await writer
            self.rt.events.emit("viewer.disconnected", {"address": session.address})

    async def _serve_commands(self, conn: ServerConnection, channel: ClientChannel,
                              session: Session) -> None:
        """Read frames in order and pace them as they come; each is answered from a task
        of its own, by id, when it ends."""
        pace = Pace(self.rate_per_s, self.query_rate_per_s)
        running: set[asyncio.Task[None]] = set()
        async for frame in conn:
            msg, refusal = self._admit(frame, pace)
            task = self.tasks.spawn(self._reply(msg, refusal, session, channel),
                                    name="ops frame")
            running.add(task)
            task.add_done_callback(running.discard)
            if pace.rejected >= MAX_REJECTED:
                # The refusals are answered first, then the close (bounded: a flood).
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await asyncio.wait(set(running))
                await channel.flush()
                # A flooding client's unread frames would hold a polite close for the
                # whole close timeout: send the close frame, then cut the connection.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.2):
                        await close_quietly(conn, CLOSE_POLICY, "too many requests")
                log.warning("ops client %s closed: too many requests", session.address)
                conn.transport.abort()
                return
            if pace.rejected:
                await asyncio.sleep(0)  # let the refusal be answered before reading on
            if len(running) >= MAX_IN_FLIGHT:
                await asyncio.wait(set(running), return_when=asyncio.FIRST_COMPLETED)

    def _admit(self, frame: str | bytes, pace: Pace
               ) -> tuple[Hello | Command | ProtocolError, str | None]:
        """Decode a frame and spend its pace, in the order frames came: (the message,
        why it is refused before it runs, or None)."""
        try:
            msg: Hello | Command | ProtocolError = decode(frame)
        except ProtocolError as exc:
            msg = exc
        is_query = isinstance(msg, Command) and msg.op in QUERY_OPS
        if not pace.allow(is_query):
            limit = self.query_rate_per_s if is_query else self.rate_per_s
            return msg, (f"rate limited: at most {limit:g} "
                         f"{'queries' if is_query else 'commands'} per second")
        return msg, None

    async def _reply(self, msg: Hello | Command | ProtocolError, refusal: str | None,
                     session: Session, channel: ClientChannel) -> None:
        channel.send_result(encode(await self._answer(msg, refusal, session)))

    async def _answer(self, msg: Hello | Command | ProtocolError, refusal: str | None,
                      session: Session) -> dict[str, Any]:
        """The answer to one frame; every frame that names a command is audited, here
        (refused before it runs) or by `OpsService.run` (refused, failed or done)."""
        if refusal is not None:
            await self._audit_refusal(session, msg, refusal)
            return failure(msg.id if not isinstance(msg, Hello) else None, refusal)
        if isinstance(msg, ProtocolError):
            await self._audit_refusal(session, msg, msg.message)
            return failure(msg.id, msg.message)
        if isinstance(msg, Hello):
            return failure(None, "already said hello")
        return await self._command(msg, session)

    async def _audit_refusal(self, session: Session, msg: Hello | Command | ProtocolError,
                             error: str) -> None:
        try:
            await self.ops.refused(session, msg, error)
        except Exception:  # the database going away (a stop) must not end the connection
            log.exception("could not audit a refused frame from %s", session.address)

    async def _command(self, msg: Command, session: Session) -> dict[str, Any]:
        try:
            return result(msg.id, await self.ops.run(msg, session))
        except (AlarmtopError, ProtocolError, PermissionError, ValueError, LookupError) as exc:
            return failure(msg.id, str(exc))
        except Exception as exc:  # a bug must not take the server down: say so and log it
            log.exception("command %s failed", msg.op)
            return failure(msg.id, f"internal error: {type(exc).__name__}: {exc}")


async def close_quietly(conn: ServerConnection, code: int, reason: str) -> None:
    """Close `conn` with `code` and `reason`, whether or not it is still open."""
    with contextlib.suppress(ConnectionClosed):
        await conn.close(code, close_reason(reason))
