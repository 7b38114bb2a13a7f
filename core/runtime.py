"""`Runtime`: registers object classes, routes calls to them, owns every component."""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
from collections.abc import Callable, Coroutine, Iterable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from alarmtop.core.fleet.events import EventRing, FleetEvents
from alarmtop.core.fleet.links import NodeClient, NodeLink, NodeServer
from alarmtop.core.fleet.routing import FleetBackend, FleetRouter, Router
from alarmtop.core.fleet.sockets import SOCKET_OPS, OwnedSockets
from alarmtop.core.kernel import descriptors
from alarmtop.core.kernel.alarms.attempt import AlarmDispatcher
from alarmtop.core.kernel.alarms.scheduler import AlarmScheduler
from alarmtop.core.kernel.clock import Clock, SystemClock
from alarmtop.core.kernel.cron import CronFn, CronJob, CronRunner
from alarmtop.core.kernel.events import EventBus
from alarmtop.core.kernel.faults import FaultRegistry
from alarmtop.core.kernel.hooks import INCOMING, Hooks
from alarmtop.core.kernel.objects.durable_object import DurableObject
from alarmtop.core.kernel.objects.host import Call, EventKind, ObjectHost
from alarmtop.core.kernel.supervisor import Supervisor, tracker_of
from alarmtop.core.model import alarm_policy
from alarmtop.core.model.alarm_pause import check_snooze
from alarmtop.core.model.alarm_policy import (
    DEFAULT_KEEP,
    AlarmRecord,
    AlarmState,
    Attempt,
    RetryPolicy,
)
from alarmtop.core.model.alarm_status import AlarmStatus
from alarmtop.core.model.errors import (
    InvalidArgument,
    InvalidObjectName,
    NoAlarm,
    NodeUnreachable,
    RuntimeNotRunning,
    ShardMoved,
    UnknownClass,
    UnknownMethod,
)
from alarmtop.core.model.keys import Cursor
from alarmtop.core.model.serialization import alarm_time_ms, json_copy
from alarmtop.core.model.storage_values import Counts, ObjectEntry
from alarmtop.core.ports import StorageBackend
from alarmtop.core.storage.sqlite.backend import SqliteBackend

if TYPE_CHECKING:
    from alarmtop.core.model.operations import ExecutionRecord

# Methods the runtime calls itself; RPC cannot reach them.
_RESERVED = frozenset({"alarm", "web_socket_connect", "web_socket_message", "web_socket_close",
                       "web_socket_error"})
MAX_NAME_LENGTH = 256
HELD_ACTIONS = frozenset({"pause", "resume", "snooze"})  # taken with the object's turn
EXECUTION_OBJECTS = "Execution"  # durable.service.EXECUTION_CLASS, without importing it
STOP_GRACE_S = 10.0  # how long stop() waits for work that ignores being cancelled
log = logging.getLogger("alarmtop.runtime")
T = TypeVar("T")


def check_object_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidObjectName(f"object names are non-empty strings, not {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidObjectName(f"object name is {len(name)} characters long; the limit is "
                                f"{MAX_NAME_LENGTH}")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidObjectName(f"object name {name!r} contains control characters")
    if any(0xD800 <= ord(c) <= 0xDFFF for c in name):
        raise InvalidObjectName(f"object name {name!r} contains a lone surrogate (not valid "
                                "text); names are UTF-8 text")
    return name


def _retrieve(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


class Stub:
    """A handle on one object; attribute access gives async RPC callables."""

    __slots__ = ("_class_name", "_name", "_runtime")

    def __init__(self, runtime: Runtime, class_name: str, name: str) -> None:
        self._runtime = runtime
        self._class_name = class_name
        self._name = name

    @property
    def id(self) -> str:
        return self._name

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_"):
            raise AttributeError(method)
        runtime, class_name, name = self._runtime, self._class_name, self._name

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await runtime._call(class_name, name, method, args, kwargs)

        call.__name__ = method
        return call

    def __repr__(self) -> str:
        return f"<Stub {self._class_name}/{self._name}>"


class Runtime:
    """Hosts durable objects and their alarms on one storage backend.

    Args:
        data_dir: where the SQLite files live (ignored when `backend` is given).
        clock: the time source; `SystemClock()` when omitted, `VirtualClock` in tests.
        env: passed to every object's constructor.
        hibernate_after: seconds of idleness before an object is evicted from memory.
        max_resident: how many objects may be live at once (least recently used go first).
        alarm_timeout: seconds an alarm handler may run before it is cancelled (a failure).
        retry_policy: default `RetryPolicy` for alarm handlers that raise.
        delete_all_preserves_alarm: keep the alarm on `storage.delete_all()`.
        max_concurrent_alarms: bound on alarm handlers running at once.
        window_size: how many soonest-due alarms are kept in memory.
        sweep_interval: seconds between sweeps for overdue work and dead letters.
        keep_attempts: how many of an alarm's latest failed attempts are kept (beside the
            first few); `AlarmStatus.attempt_count` counts them all.
        plugins: lifecycle hook plugins (see `alarmtop.core.kernel.hooks`), told of every object
            event, alarm attempt, execution invocation, operation and step attempt, and
            operator command; `add_plugin()` adds more.

    `start()` checks that `max_resident` open databases (3 file descriptors each) and
    the sockets a server reserved (`reserve_descriptors`) fit under the process's
    descriptor limit, raising the soft limit to the hard one if need be; otherwise it
    raises `DescriptorBudget`, which says what to change.
    """

    def __init__(self, data_dir: str | Path = "./data", clock: Clock | None = None, *,
                 env: Any = None, hibernate_after: float = 10.0, max_resident: int = 1000,
                 alarm_timeout: float = 900.0, retry_policy: RetryPolicy | None = None,
                 delete_all_preserves_alarm: bool = False, max_concurrent_alarms: int = 256,
                 window_size: int = 10_000, sweep_interval: float = 60.0,
                 backend: StorageBackend | None = None, rng: random.Random | None = None,
                 keep_attempts: int = DEFAULT_KEEP, node_host: str | None = None,
                 plugins: Iterable[Any] = ()) -> None:
        self.clock: Clock = clock or SystemClock()
        # Owns every background task; its busy accounting is the clock's, when the clock
        # keeps one (a virtual clock waits for the runtime to be idle).
        self.tasks = Supervisor(tracker_of(self.clock))
        self.data_dir = Path(data_dir)
        self.env = env
        self.retry_policy = retry_policy or RetryPolicy()
        self.events = EventBus(self.clock)
        self.hooks = Hooks(plugins)
        self.faults = FaultRegistry(self.events, self.clock.now_ms)
        self.backend: StorageBackend = backend or SqliteBackend(self.data_dir)
        self._classes: dict[str, type[DurableObject]] = {}
        self._policies: dict[str, RetryPolicy] = {}
        # The operator tools' reads and writes of the runtime database (pauses, the
        # timers board, bulk batches), riding its commits.
        self.operator_rows = self.backend.operator_rows
        self.scheduler = AlarmScheduler(
            self.backend.database, self.backend.alarm_rows, self.clock, self.events,
            self.policy_for, self.tasks,
            max_concurrent=max_concurrent_alarms, window_size=window_size,
            sweep_interval_s=sweep_interval, rng=rng, keep_attempts=keep_attempts,
            paused_of=self.operator_rows.paused)
        self.host = ObjectHost(self._classes, self.backend, self.scheduler, self.clock,
                               self.events, env, self.tasks, hibernate_after_s=hibernate_after,
                               max_resident=max_resident,
                               delete_all_preserves_alarm=delete_all_preserves_alarm)
        self._dispatcher = AlarmDispatcher(self.host, self.scheduler, self.faults, self.clock,
                                           alarm_timeout)
        self.host.hooks = self._dispatcher.hooks = self.hooks
        self._cron = CronRunner(self.clock, self.events, self.tasks)
        self.sockets = self.host.sockets
        self.host.alarm_started = self.scheduler.running.get
        self.scheduler.exclusive = lambda key: self.host.exclusive(
            key, "recovering an alarm attempt cut short")
        self.max_resident = max_resident
        self._reserved: dict[str, int] = {}  # who reserved descriptors: how many
        self.descriptor_limit: int | None = None  # the soft limit checked at start
        self.abandoned: list[str] = []  # what the last stop() left behind
        # One event kind per method, made once: a stuck object's callers are told what
        # holds it ("busy handling a call to grant()").
        self._call_kinds: dict[str, EventKind] = {}
        self.running = False
        self._stopping = False  # stop() under way: a second call returns at once
        self._router: Router = Router()
        self._node_server: NodeServer | None = None
        self._owned_sockets: OwnedSockets | None = None  # relayed here by other nodes
        self._event_ring: EventRing | None = None
        self._ring_keeper: asyncio.Task[None] | None = None
        self._node_host = node_host
        # Durable executions: execution objects share one engine and the backend's log store.
        from alarmtop.core.kernel.executions.service import (
            EXECUTION_CLASS,
            AuditLog,
            ExecutionEngine,
            Executions,
            Ledger,
        )
        store = self.backend.execution_log
        self.audit = AuditLog(self.backend.audit_rows, self.events, self.clock)
        self.ledger = Ledger(store, self.events, self.faults, self.clock)

        def execution_stub(execution_id: str) -> Stub:
            return self.get(EXECUTION_CLASS, execution_id)

        async def start_execution(name: str, execution_id: str, parent: str,
                                  input_text: str) -> Any:
            return await self.executions.start(name, None, execution_id, parent=parent,
                                               input_text=input_text)

        async def call_execution(execution_id: str, method: str, *args: Any) -> Any:
            return await getattr(execution_stub(execution_id), method)(*args)

        engine = ExecutionEngine(store, self.events, self.faults, self.clock, rng,
                                 start_execution=start_execution,
                                 call_execution=call_execution, hooks=self.hooks)
        self.executions = Executions(engine, execution_stub, self.audit)
        from alarmtop.core.ops.bulk import BulkService
        self.bulk = BulkService(self)  # bulk actions, durable batches (core/bulk)

    # -- set-up ---------------------------------------------------------------------------

    def register(self, cls: type[DurableObject], *,
                 retry_policy: RetryPolicy | None = None) -> type[DurableObject]:
        """Make `cls` addressable by its class name; optionally with its own retry policy."""
        if not (isinstance(cls, type) and issubclass(cls, DurableObject)):
            raise InvalidArgument(f"register() takes a DurableObject subclass, not {cls!r}")
        name = cls.__name__
        if not name.isidentifier():
            # The class name is a folder under the data dir: '..' or 'a/b' would escape it.
            raise InvalidArgument(f"object class names must be Python identifiers, not "
                                  f"{name!r}; rename the class")
        existing = self._classes.get(name)
        if existing is not None and existing is not cls:
            raise InvalidArgument(f"another class named {name!r} is already registered")
        self._classes[name] = cls
        if retry_policy is not None:
            self._policies[name] = retry_policy
        return cls

    def register_execution(self, fn: Any) -> Any:
        """Register a `@durable_execution` handler (several versions of one name may coexist)."""
        from alarmtop.core.kernel.executions.engine import make_execution_class
        from alarmtop.core.kernel.executions.service import EXECUTION_CLASS, DurableFunction
        if not isinstance(fn, DurableFunction):
            raise InvalidArgument("register_execution() takes a function decorated with "
                                  "@durable_execution")
        engine = self.executions.engine
        versions = engine.handlers.setdefault(fn.name, {})
        if fn.version in versions and versions[fn.version].fn is not fn.fn:
            raise InvalidArgument(f"execution handler {fn.name!r} version {fn.version!r} is "
                                  "already registered; give the new code a new version")
        versions[fn.version] = fn
        if EXECUTION_CLASS not in self._classes:
            # A crashed invocation is retried by the execution's alarm, 1 s later, doubling
            # up to a minute; a long ladder, since each retry usually gets further.
            self.register(make_execution_class(engine),
                          retry_policy=RetryPolicy(max_retries=20, initial_delay_s=1.0,
                                                   max_delay_s=60.0))
        return fn

    def add_plugin(self, plugin: Any) -> Any:
        """Add a lifecycle hook plugin (see `alarmtop.core.kernel.hooks`), after those there are;
        it hears what starts from now on. Returns it."""
        self.hooks.add(plugin)
        return plugin

    def registered_class(self, class_name: str) -> type[DurableObject] | None:
        """The class registered under `class_name` (None: none is), waking nothing."""
        return self._classes.get(class_name)

    def policy_for(self, class_name: str) -> RetryPolicy:
        return self._policies.get(class_name, self.retry_policy)

    def cron(self, expression: str, fn: CronFn, *, name: str | None = None,
             timezone: str = "UTC") -> CronJob:
        """Run `fn` (sync or async) on a five-field cron schedule, on the runtime clock."""
        return self._cron.add(expression, fn, name, timezone)

    def reserve_descriptors(self, what: str, count: int) -> None:
        """Count `count` descriptors for `what` (a server's socket caps) in the budget
        `start()` checks; checked again now if the runtime is running already."""
        if count < 0:
            raise InvalidArgument(f"reserve_descriptors: count is >= 0, not {count}")
        self._reserved[what] = count
        if self.running:
            self.check_descriptors()

    def check_descriptors(self) -> int:
        """Fit the descriptor budget (see the class docs); the soft limit in force, -1
        for none. Raises `DescriptorBudget` when it cannot fit."""
        open_now = descriptors.in_use()
        if self.running:
            # Open already: the runtime database, the objects resident now.
            open_now = max(0, open_now - descriptors.FDS_PER_DATABASE * (1 + self.host.live_count))
        need = descriptors.Need(databases=self.max_resident + 1,
                                sockets=sum(self._reserved.values()),
                           in_use=open_now, max_resident=self.max_resident,
                           sockets_what=" and ".join(self._reserved))
        self.descriptor_limit = descriptors.fit(need)
        return self.descriptor_limit

    async def start(self) -> None:
        """Check the descriptor budget, open storage, recover attempts cut short by a
        crash, start firing alarms.

        On a shared backend the runtime is a node of a fleet: it listens for other
        nodes' calls first, then takes its share of the shards."""
        if self.running:
            return
        self.check_descriptors()
        backend = self.backend
        if isinstance(backend, FleetBackend):
            host = self._node_host or getattr(backend, "node_host", None) or "127.0.0.1"
            self._owned_sockets = OwnedSockets(self)
            self._node_server = NodeServer(backend.node_id, lambda: backend.cluster_secret,
                                           self._serve_node, host=host,
                                           link_closed=self._owned_sockets.link_lost)
            await self._node_server.start()
            backend.bind(self._shards_changed, self._node_server.address, self._drain_shards)
        try:
            await backend.open()
        except BaseException:
            if self._node_server is not None:
                await self._node_server.stop()
                self._node_server = None
            raise
        if isinstance(backend, FleetBackend):
            self._router = FleetRouter(backend)
            self.host.may_run = backend.may_run
            self._cron.gate = self.scheduler.once = backend.claim_once
            await backend.share_faults(self.faults)
            loop = asyncio.get_running_loop()
            self._event_ring = EventRing(self.events, loop.time)
            # Wall time, outside the supervisor: a test's virtual clock must not wait on it.
            self._ring_keeper = loop.create_task(self._keep_ring(self._event_ring),
                                                 name="event-ring")
        self.tasks.reopen()
        self.running = True
        await self.scheduler.start(self._dispatcher.fire, self._dispatcher.intent_of)
        self.host.start()
        self._cron.start()
        await self.bulk.resume_open()  # batches a stop or a crash left open run on

    async def stop(self, grace_s: float | None = STOP_GRACE_S) -> None:
        """Stop firing, hibernate every object, close storage: within `grace_s` seconds
        (None: however long it takes).

        Handlers still running are cancelled, and one that does not end within the
        grace is abandoned, as a crash would abandon it: its row stays 'running' and
        the next start counts it as a crashed attempt. What was abandoned is named in
        `abandoned` (empty after a clean stop): a task that ignores its cancellation
        keeps its event loop from closing, so a process that must end then ends
        without waiting for it (`alarmtop serve` does).

        A node of a fleet hands its shards over as it stops: it first starts no new
        attempt and lets those in flight end (for the backend's `drain_s`, at most half
        the grace, so that the hand-over still fits in it) while it still runs, so
        their next owner does not retry them as cut off."""
        if not self.running or self._stopping:
            return
        self._stopping = True
        try:
            await self._stop(grace_s)
        finally:
            self._stopping = False

    async def _stop(self, grace_s: float | None) -> None:
        self.abandoned = []
        loop = asyncio.get_running_loop()
        end = None if grace_s is None else loop.time() + grace_s

        def left() -> float | None:
            return None if end is None else max(0.0, end - loop.time())

        await self._bounded("cron jobs", self._cron.stop(), left())
        backend = self.backend
        if isinstance(backend, FleetBackend):
            # At most half of what is left of the grace: the hand-over of the shards,
            # at the end of the stop, must still fit in it.
            within = left()
            await self._bounded("alarm handlers' drain", self.scheduler.drain(
                backend.drain_s if within is None else min(backend.drain_s, within / 2)),
                left())
        self.running = False
        await self._bounded("alarm handlers", self.scheduler.stop(), left())
        await self._bounded("objects", self.host.stop(), left())
        if await self.tasks.close(grace_s=left()):
            self.abandoned.append("tasks")
        await self._bounded("node calls", self._stop_node(), left())
        await self._bounded("storage", self.backend.close(), left())

    async def _bounded(self, what: str, step: Coroutine[Any, Any, None],
                       within: float | None) -> None:
        """Run one step of the stop for at most `within` seconds. Not under a timeout
        that awaits the step's end: a step gathering a task that ignores cancellation
        would never end, timeout or not. Left behind, it is cancelled, not awaited."""
        task = asyncio.ensure_future(step)
        done, _ = await asyncio.wait({task}, timeout=within)
        if done:
            task.result()
            return
        task.cancel()
        task.add_done_callback(_retrieve)  # if it ever ends, its error is not reported twice
        self.abandoned.append(what)
        log.warning("stopping the runtime: %s did not stop within the grace; left behind "
                    "(as after a crash, the next start recovers them)", what)

    async def _stop_node(self) -> None:
        """No more calls to or from other nodes. The objects' sockets are closed first,
        while the node connections still carry the closes of those relayed here: their
        clients reconnect to the shards' next owners."""
        owned = self._owned_sockets
        if owned is not None:
            await owned.close_moved(lambda key: True)
            await owned.stop()
        keeper, self._ring_keeper = self._ring_keeper, None
        if keeper is not None:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
        router, self._router = self._router, Router()
        await router.close()
        if self._node_server is not None:
            server, self._node_server = self._node_server, None
            await server.stop()

    async def __aenter__(self) -> Runtime:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    # -- objects --------------------------------------------------------------------------

    def _class_name(self, cls: type[DurableObject] | str) -> str:
        name = cls if isinstance(cls, str) else getattr(cls, "__name__", repr(cls))
        if name not in self._classes:
            raise UnknownClass(name, list(self._classes))
        return name

    def get(self, cls: type[DurableObject] | str, name: str) -> Stub:
        """A stub for the object `name` of class `cls` (a class or its registered name)."""
        return Stub(self, self._class_name(cls), check_object_name(name))

    def _check_running(self) -> None:
        if not self.running:
            raise RuntimeNotRunning("the runtime is not running; await runtime.start() first")

    async def _call(self, class_name: str, name: str, method: str, args: tuple[Any, ...],
                    kwargs: dict[str, Any]) -> Any:
        self._check_running()
        fn = getattr(self._classes[class_name], method, None)
        if method in _RESERVED or fn is None or not inspect.iscoroutinefunction(fn):
            raise UnknownMethod(class_name, method)
        args = tuple(json_copy(list(args), f"arguments of {class_name}.{method}"))
        kwargs = json_copy(kwargs, f"keyword arguments of {class_name}.{method}")

        # Another node may hold the object's shard: then it runs the call, told what the
        # plugins carry (say, the caller's trace) for its event.
        extra: dict[str, Any] = {}
        if self.hooks.plugins:
            carried = self.hooks.propagation()
            if carried is not None:
                extra["propagation"] = carried
        return await self._router.route(
            (class_name, name), lambda: self._call_here(class_name, name, method, args, kwargs),
            "call", cls=class_name, name=name, method=method, args=list(args), kwargs=kwargs,
            **extra)

    async def _call_here(self, class_name: str, name: str, method: str,
                         args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        async def body(instance: DurableObject) -> Any:
            return await getattr(instance, method)(*args, **kwargs)

        value, error, _ = await self.host.run_event((class_name, name), body,
                                                    self._kind(method, "a call to {}()"))
        if error is not None:
            raise error  # its writes are kept: the event committed
        return json_copy(value, f"the result of {class_name}.{method}")

    # -- the fleet ------------------------------------------------------------------------

    async def _serve_node(self, request: dict[str, Any], link: NodeLink | None = None) -> Any:
        """Another node forwards an object's event here, where its shard is held
        (`link`: the connection it came on, which a socket's frames go back over)."""
        op = request.get("op")
        if op in SOCKET_OPS and self._owned_sockets is not None and link is not None:
            return await self._owned_sockets.serve(str(op), request, link)
        if not self.running and op in ("call", "operate"):
            # Listening already (start) or still (stop), but not running events: nothing
            # ran, so the caller asks again, here once started or at the next owner.
            raise ShardMoved(f"the node {getattr(self.backend, 'node_id', '?')} is not "
                             "running events yet (starting) or any more (stopping); nothing "
                             "ran here")
        self._check_running()
        if op == "call":
            cls, name, method = str(request["cls"]), str(request["name"]), str(request["method"])
            self._class_name(cls)
            fn = getattr(self._classes[cls], method, None)
            if method in _RESERVED or fn is None or not inspect.iscoroutinefunction(fn):
                raise UnknownMethod(cls, method)
            await self._check_held(cls, name)
            carried = request.get("propagation")
            if isinstance(carried, dict) and self.hooks.plugins:
                INCOMING.set({str(k): str(v) for k, v in carried.items()})
            return await self._call_here(cls, name, method, tuple(request.get("args") or ()),
                                         dict(request.get("kwargs") or {}))
        if op == "operate":
            cls, name, action = str(request["cls"]), str(request["name"]), str(request["action"])
            await self._check_held(self._class_name(cls), name)
            by_ms = request.get("by_ms")
            status = await self._operate_here(
                cls, name, action, request.get("at_ms"), reason=request.get("reason"),
                by_ms=None if by_ms is None else int(by_ms))
            return status.to_dict()
        if op == "events":
            if self._event_ring is None:
                return {"events": [], "last": 0, "missed": 0}
            return self._event_ring.pull(int(request.get("after") or 0))
        raise InvalidArgument(f"unknown node operation {op!r}")

    @staticmethod
    async def _keep_ring(ring: EventRing) -> None:
        while True:
            await asyncio.sleep(5.0)
            ring.idle_check()

    def fleet_events(self) -> FleetEvents | None:
        """A puller of the other nodes' events (None when this runtime is no fleet's
        node): `start()` it while someone watches, `drain()` what it got."""
        backend = self.backend
        if not isinstance(backend, FleetBackend):
            return None

        async def peers() -> list[tuple[str, str]]:
            return [(str(n["node_id"]), str(n["address"])) for n in await backend.nodes()
                    if n["up"] and n["address"] and n["node_id"] != backend.node_id]

        async def ask(address: str, op: str, fields: dict[str, Any]) -> Any:
            router = self._router
            if not isinstance(router, FleetRouter):
                raise NodeUnreachable("this node is stopping")
            return await router.client(address).request(op, **fields)
        return FleetEvents(peers, ask)

    async def _drain_shards(self, shards: set[int]) -> None:
        """Until no event of an object of these shards runs here (the backend stops
        new ones first): a shard handed over cleanly cuts nothing off."""
        backend = self.backend
        assert isinstance(backend, FleetBackend)

        def busy() -> bool:
            return any(backend.shard_of(k) in shards for k in self.host.busy_keys()) or \
                any(backend.shard_of(k) in shards for k in self.scheduler.running)
        # Polled: events end in the host and attempts in the scheduler, with no one
        # signal for both; the backend bounds the wait.
        while busy():  # noqa: ASYNC110
            await asyncio.sleep(0.01)

    async def _check_held(self, cls: str, name: str) -> None:
        """A forwarded event runs only where the shard is held (the caller asks again)."""
        if await self._router.peer((cls, check_object_name(name))) is not None:
            raise ShardMoved(f"{cls}/{name} moved to another node; nothing ran here")

    def _shards_changed(self, gained: set[int], lost: set[int]) -> None:
        """The backend gained or lost shard leases: the scheduler and the host follow."""
        if not self.running:
            return  # start() loads what is held when it starts the scheduler
        backend = self.backend
        assert isinstance(backend, FleetBackend)

        def in_lost(key: tuple[str, str]) -> bool:
            return backend.shard_of(key) in lost

        self.tasks.spawn(self._follow_shards(bool(gained), in_lost if lost else None),
                         name="shards")

    async def _follow_shards(self, gained: bool,
                             lost: Callable[[tuple[str, str]], bool] | None) -> None:
        if lost is not None:
            if self._owned_sockets is not None:
                await self._owned_sockets.close_moved(lost)
            self.scheduler.forget(lost)
            await self.host.release(lost)
        if gained:
            await self.scheduler.reload()

    async def nodes(self) -> list[dict[str, Any]]:
        """The fleet's nodes (one, on a backend that is not shared)."""
        if isinstance(self.backend, FleetBackend):
            return await self.backend.nodes()
        return [{"node_id": getattr(self.backend, "node_id", "local"), "address": None,
                 "shards": None, "up": True}]

    async def socket_route(self, class_name: str, name: str,
                           there: Callable[[NodeClient], Coroutine[Any, Any, T]]) -> T | None:
        """Where an object socket's events run: None when on this node, else what
        `there(owner)` answered (it opens the socket on the node holding the object's
        shard, `core/fleet_sockets.py`). Asked again, as calls are, while nothing ran:
        the owner was down or the shard moved."""
        self._check_running()
        key = (self._class_name(class_name), check_object_name(name))

        async def here() -> None:
            return None
        result: T | None = await self._router.route_with(key, here, there)
        return result

    async def socket_event(self, class_name: str, name: str, method: str,
                           *args: Any) -> None:
        """Deliver a WebSocket event to an object (waking it), like any other event."""
        self._check_running()
        class_name = self._class_name(class_name)

        async def body(instance: DurableObject) -> Any:
            return await getattr(instance, method)(*args)

        _, error, _ = await self.host.run_event((class_name, check_object_name(name)), body,
                                                self._kind(method, "its {}"))
        if error is not None:
            raise error

    def _kind(self, method: str, what: str) -> EventKind:
        kind = self._call_kinds.get(method)
        if kind is None:
            event = "socket" if method in _RESERVED else "call"
            kind = self._call_kinds[method] = Call("handling " + what.format(method), method,
                                                   event)
        return kind

    # -- alarms ---------------------------------------------------------------------------

    def _status(self, rec: AlarmRecord) -> AlarmStatus:
        return AlarmStatus.of(rec, self.policy_for(rec.object_class))

    async def alarms(self, limit: int | None = None, offset: int = 0, *,
                     state: str | None = None, contains: str | None = None,
                     after: Cursor | None = None, order: str = "urgency",
                     desc: bool = False) -> list[AlarmStatus]:
        """Alarms, most urgent first: dead, retrying, running, then by due time.

        `state` keeps one state; `contains` keeps objects whose `Class/name` contains it.
        Pages by key: `after` is the cursor of the last alarm of the page before (see
        `AlarmRows.alarm_page`; `order="object"` lists by class and name, `desc`
        reverses), and `offset` skips that many more. Without `after`, `offset` counts
        from the start, which costs a walk over the rows skipped.
        """
        recs = await self.alarm_records(limit, offset, state=state, contains=contains,
                                        after=after, order=order, desc=desc)
        return [self._status(r) for r in recs]

    async def alarm_records(self, limit: int | None = None, offset: int = 0, *,
                            state: str | None = None, contains: str | None = None,
                            after: Cursor | None = None, order: str = "urgency",
                            desc: bool = False) -> list[AlarmRecord]:
        """`alarms()` as the index's records (for a listing that builds its own rows:
        `AlarmStatus` costs a dataclass per row)."""
        self._check_running()
        return await self.backend.alarm_rows.alarm_page(
            after, -1 if limit is None else limit, offset=offset, state=state,
            contains=contains, order=order, desc=desc)

    async def count_alarms(self, state: str | None = None, contains: str | None = None) -> int:
        """How many alarms `alarms()` lists with these filters (counters without a text)."""
        self._check_running()
        return await self.backend.alarm_rows.count(state, contains)

    async def alarm(self, cls: type[DurableObject] | str, name: str) -> AlarmStatus | None:
        self._check_running()
        rec = await self.scheduler.lookup((self._class_name(cls), check_object_name(name)))
        return None if rec is None else self._status(rec)

    async def dead_letters(self, limit: int | None = None, offset: int = 0) -> list[AlarmStatus]:
        """Dead letters by class and name (a listing: on the read connection, by the
        state index)."""
        self._check_running()
        recs = await self.backend.alarm_rows.alarm_page(
            None, -1 if limit is None else limit, offset=offset, state=AlarmState.DEAD.value,
            order="object")
        return [self._status(r) for r in recs]

    def counters(self) -> Counts:
        """Alarms by state, retries, executions by status and objects, as of the last
        commit: kept by storage with the writes, so this costs no I/O however many
        alarms there are (the header, /metrics and the fleet view share it)."""
        return self.backend.alarm_rows.counters()

    async def alarm_counts(self) -> dict[str, int]:
        """Alarms by state (every state, zeros included), from the counters."""
        self._check_running()
        counts = {s.value: 0 for s in AlarmState}
        counts.update(self.counters().alarms)
        return counts

    async def near_exhaustion_count(self) -> int:
        """Alarms whose next failure makes them dead letters (each class's own policy)."""
        self._check_running()
        return self.near_exhaustion(self.counters())

    def near_exhaustion(self, counts: Counts) -> int:
        """Near exhaustion in `counts`, under each class's retry policy."""
        return counts.near_exhaustion(lambda cls: self.policy_for(cls).max_retries)

    async def _operate(self, cls: type[DurableObject] | str, name: str, action: str,
                       apply: Callable[[AlarmRecord], Any]) -> AlarmStatus:
        """Apply an operator's decision to the alarm record, without waking the object:
        the record is the runtime's own. An attempt in flight ends first (its end would
        overwrite the decision)."""
        self._check_running()
        key = (self._class_name(cls), check_object_name(name))
        rec = await self.scheduler.lookup(key)
        if rec is not None and rec.state is AlarmState.RUNNING:
            # Under an operator's patience (tasks.patience) this wait gives up with
            # ObjectBusy, naming what holds the object; nothing is applied then.
            async with self.host.exclusive(key, f"with an operator's {action}"):
                rec = await self.scheduler.lookup(key)
                if rec is None:
                    raise NoAlarm(*key, action)
                new = await apply(rec)
            return self._status(new if new is not None else rec)
        if rec is None:
            raise NoAlarm(*key, action)
        new = await apply(rec)
        return self._status(new if new is not None else rec)

    async def rearm(self, cls: type[DurableObject] | str, name: str,
                    at_ms: Any = None) -> AlarmStatus:
        """Give an alarm (typically a dead letter) a fresh ladder at `at_ms` (None: now)."""
        at = self.clock.now_ms() if at_ms is None else alarm_time_ms(at_ms)
        return await self._operate_routed(cls, name, "re-arm", at)

    async def fire_now(self, cls: type[DurableObject] | str, name: str) -> AlarmStatus:
        """Run the alarm's next attempt now (a dead letter is re-armed for now)."""
        return await self._operate_routed(cls, name, "fire", None)

    async def clear_dead_letter(self, cls: type[DurableObject] | str, name: str) -> AlarmStatus:
        """Drop a dead letter for good (it stays in the event log)."""
        return await self._operate_routed(cls, name, "clear", None)

    async def pause_alarm(self, cls: type[DurableObject] | str, name: str,
                          reason: str | None = None) -> AlarmStatus:
        """Hold an alarm: it keeps its time, retry count and attempts and fires nothing
        until `resume_alarm` (see `alarms.pause`). Pausing a paused alarm changes
        nothing. An object that sets a new alarm meanwhile replaces the time and stays
        paused; one that deletes its alarm removes the pause with it."""
        return await self._operate_routed(cls, name, "pause", None, reason=reason)

    async def resume_alarm(self, cls: type[DurableObject] | str, name: str,
                           reason: str | None = None) -> AlarmStatus:
        """Release a paused alarm; one that fell due while paused fires at once, with
        the retry count it had."""
        return await self._operate_routed(cls, name, "resume", None, reason=reason)

    async def snooze_alarm(self, cls: type[DurableObject] | str, name: str, by_ms: int,
                           reason: str | None = None) -> AlarmStatus:
        """Move a pending or retrying alarm's next attempt `by_ms` later (from now, if it
        is overdue), keeping its retries and attempts."""
        return await self._operate_routed(cls, name, "snooze", None, reason=reason,
                                          by_ms=check_snooze(by_ms))

    async def _operate_routed(self, cls: type[DurableObject] | str, name: str, action: str,
                              at_ms: int | None, **more: Any) -> AlarmStatus:
        """An operator's action runs where the alarm runs: on the node holding its shard."""
        self._check_running()
        key = (self._class_name(cls), check_object_name(name))
        data = await self._router.route(
            key, lambda: self._operate_here(key[0], key[1], action, at_ms, **more), "operate",
            cls=key[0], name=key[1], action=action, at_ms=at_ms, **more)
        if isinstance(data, AlarmStatus):
            return data
        data["attempts"] = [Attempt.from_dict(a) for a in data.get("attempts") or []]
        return AlarmStatus(**data)

    async def _operate_here(self, cls: str, name: str, action: str,
                            at_ms: int | None, reason: str | None = None,
                            by_ms: int | None = None) -> AlarmStatus:
        if action in HELD_ACTIONS:
            return await self._operate_held(cls, name, action, reason, by_ms)
        if action == "re-arm":
            at = self.clock.now_ms() if at_ms is None else at_ms
            return await self._operate(cls, name, action,
                                       lambda rec: self.scheduler.rearm(rec, at))
        if action == "fire":
            return await self._operate(cls, name, action, self.scheduler.fire_now)
        if action == "clear":
            async def clear(rec: AlarmRecord) -> None:
                if rec.state is not AlarmState.DEAD:
                    raise InvalidArgument(f"{rec.object_class}/{rec.object_name}'s alarm is "
                                          f"{rec.state.value}, not a dead letter; nothing "
                                          "cleared")
                await self.scheduler.commit(rec.key, alarm_policy.delete_alarm(rec))
            return await self._operate(cls, name, action, clear)
        raise InvalidArgument(f"unknown alarm action {action!r}")

    async def _operate_held(self, cls: str, name: str, action: str, reason: str | None,
                            by_ms: int | None) -> AlarmStatus:
        """Pause, resume or snooze, holding the object's turn (it is not woken): no event
        of the object commits an alarm change in between the read and the write."""
        self._check_running()
        key = (self._class_name(cls), check_object_name(name))
        if key[0] == EXECUTION_OBJECTS:
            raise InvalidArgument(f"{key[0]}/{key[1]} is an execution: pause it with "
                                  "rt.executions.pause(id), move its timers with "
                                  "rt.executions.move_timer(...)")
        sched = self.scheduler
        async with self.host.exclusive(key, f"with an operator's {action}"):
            rec = await sched.lookup(key)
            if rec is None:
                raise NoAlarm(*key, action)
            if action == "pause":
                new = await sched.pause(rec, reason)
            elif action == "resume":
                new = await sched.resume(rec, reason)
            else:
                assert by_ms is not None
                new = await sched.snooze(rec, by_ms, reason)
        return self._status(new if new is not None else rec)

    async def timers(self, limit: int = 100, after: Any = None) -> dict[str, Any]:
        """The timers board: every pending alarm (paused ones too), execution wait,
        callback deadline and retry, soonest first, overdue ones flagged; `rows`,
        `next` (pass it as `after` for the next page) and `now_ms` (see `core.board`)."""
        self._check_running()
        from alarmtop.core.ops.timers_board import timers
        return await timers(self, limit, after)

    async def sweep(self) -> int:
        """Run the sweeper now; returns how many overdue alarms it re-queued."""
        self._check_running()
        return await self.scheduler.sweep()

    def resident_objects(self) -> list[tuple[str, str]]:
        return self.host.resident_keys()

    async def objects(self, after: Cursor | None = None, limit: int = 50, *, offset: int = 0,
                      contains: str | None = None, desc: bool = False) -> list[ObjectEntry]:
        """Every object known to storage (a database, an alarm or an execution), by
        class and name, paged by key (`after`: the (class, name) of the last one)."""
        self._check_running()
        return await self.backend.alarm_rows.object_page(after, limit, offset=offset,
                                                          contains=contains, desc=desc)

    async def count_objects(self, contains: str | None = None) -> int:
        """How many `objects()` lists (the counter without a text)."""
        self._check_running()
        return await self.backend.alarm_rows.count_known(contains)

    async def execution_page(self, after: Cursor | None = None, limit: int = 50, *,
                             offset: int = 0, status: str | None = None,
                             contains: str | None = None,
                             desc: bool = False) -> list[ExecutionRecord]:
        """Executions most in need of a person first, paged by key (see
        `ExecutionLog.page`); `contains` keeps those whose `name/id` contains it."""
        self._check_running()
        return await self.backend.execution_log.page(after, limit, offset=offset,
                                                       status=status, contains=contains,
                                                       desc=desc)

    async def count_executions(self, status: str | None = None,
                               contains: str | None = None) -> int:
        self._check_running()
        return await self.backend.execution_log.count(status, contains)

