"""What user code sees: `DurableObject`, its `ctx`, and `AlarmInfo`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from alarmtop.core.kernel.objects.sockets import HibernatableWebSocket, SocketRegistry
from alarmtop.core.kernel.objects.storage import Storage
from alarmtop.core.kernel.supervisor import Blocker, Supervisor

if TYPE_CHECKING:
    from alarmtop.core.ports import Clock


class AlarmInfo(NamedTuple):
    """Passed to `alarm()`: which attempt this is (a named tuple: one per firing)."""

    retry_count: int
    scheduled_ms: int

    @property
    def is_retry(self) -> bool:
        return self.retry_count > 0


class ObjectContext:
    """`self.ctx` of a durable object: its name, clock and storage."""

    # Slots: one is made at every wake of an object.
    __slots__ = ("_blockers", "_clock", "_sockets", "_tasks", "class_name", "id", "storage")

    def __init__(self, class_name: str, name: str, storage: Storage, clock: Clock,
                 sockets: SocketRegistry, tasks: Supervisor) -> None:
        self.class_name = class_name
        self.id = name
        self.storage = storage
        self._clock = clock
        self._sockets = sockets
        self._tasks = tasks
        # Made on first use: most objects never block, and whatever a wake allocates
        # lives until the object hibernates, feeding the cyclic GC's older generations.
        self._blockers: list[asyncio.Task[Any]] | None = None

    # -- hibernatable WebSockets ------------------------------------------------------------

    def accept_web_socket(self, ws: HibernatableWebSocket, tags: list[str] | None = None) -> None:
        """Take ownership of a connection; it stays open while this object hibernates."""
        self._sockets.accept((self.class_name, self.id), ws, list(tags or []))

    def get_web_sockets(self, tag: str | None = None) -> list[HibernatableWebSocket]:
        """This object's open connections (with `tag`, when given)."""
        return self._sockets.get((self.class_name, self.id), tag)

    def set_web_socket_auto_response(self, pair: tuple[str, str] | None) -> None:
        """Answer `pair[0]` with `pair[1]` without waking the object (None: stop)."""
        self._sockets.set_auto_response((self.class_name, self.id), pair)

    def get_web_socket_auto_response_timestamp(self, ws: HibernatableWebSocket) -> int | None:
        """Epoch ms of the last auto-response on `ws`: the client was alive then."""
        return self._sockets.auto_response_timestamp(ws.id)

    def now_ms(self) -> int:
        """The runtime clock in epoch milliseconds (use it instead of time.time())."""
        return self._clock.now_ms()

    async def sleep(self, seconds: float) -> None:
        """Sleep on the runtime clock (a virtual clock in tests)."""
        await self._clock.sleep(seconds)

    def block_concurrency_while(self, fn: Callable[[], Awaitable[Any]]) -> Blocker:
        """Run `fn` while no event is delivered to this object, wherever it is called
        from (`__init__`, a call, an alarm): the event that called it ends, and the
        next one starts, only once `fn` has finished. Await the result for `fn`'s value."""
        task = self._tasks.spawn(_await(fn), name=f"block:{self.class_name}/{self.id}",
                                 report=False)
        if self._blockers is None:
            self._blockers = []
        self._blockers.append(task)
        return Blocker(task, self._tasks.tracker)

    @property
    def blocked(self) -> bool:
        """Whether a blocker started by this object may still hold its events."""
        return bool(self._blockers)

    async def drain_blockers(self) -> None:
        """Wait for every blocker started so far (the runtime calls this before an event
        counts as done); the first one that raised raises here."""
        while self._blockers:
            task = self._blockers.pop(0)
            await self._tasks.idle_wait(task)


async def _await(fn: Callable[[], Awaitable[Any]]) -> Any:
    try:
        return await fn()
    except (Exception, asyncio.CancelledError):
        raise
    except BaseException as exc:
        # A task that raises SystemExit or KeyboardInterrupt ends the event loop: the
        # blocker fails instead, and the event that waits for it with it.
        raise RuntimeError(f"a block_concurrency_while() function raised "
                           f"{type(exc).__name__}: {exc}") from exc


class DurableObject:
    """Base class of durable objects.

    Subclasses define async methods (called through stubs), and optionally
    `alarm(self, info)`. `__init__(ctx, env)` runs on every wake, before any event.

    WebSockets are opt-in: the server's `/objects/<Class>/<name>` route takes
    connections only for a class that defines
    `async def web_socket_connect(self, ws, request)` (and calls
    `self.ctx.accept_web_socket(ws)` there to keep one). This base class defines
    none, so that registering a class opens no route by accident. A class may also
    set `web_socket_token_env = "NAME"`: its sockets then need the token held in
    the environment variable NAME (see the README's ops server section).
    """

    def __init__(self, ctx: ObjectContext, env: Any) -> None:
        self.ctx = ctx
        self.env = env

    async def alarm(self, info: AlarmInfo) -> None:
        raise NotImplementedError(
            f"{type(self).__name__} set an alarm but defines no "
            "'async def alarm(self, info)' handler")

    async def web_socket_message(self, ws: HibernatableWebSocket, message: str) -> None:
        """A message from an accepted connection (wakes a hibernated object)."""

    async def web_socket_close(self, ws: HibernatableWebSocket, code: int, reason: str,
                               was_clean: bool) -> None:
        """The client closed the connection."""

    async def web_socket_error(self, ws: HibernatableWebSocket, error: str) -> None:
        """The connection failed."""
