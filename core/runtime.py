"""`Runtime`, the composition root: it builds every part, hands each what it needs,
and forwards the public API to the part that implements it. Nothing in core
imports this module (see docs/architecture.md for the rooms and their direction)."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Coroutine, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

from alarmtop.core.fleet.events import FleetEvents
from alarmtop.core.fleet.node import NODE_SOCKETS, FleetNode
from alarmtop.core.fleet.routing import FleetBackend, Routing
from alarmtop.core.fleet.sockets import OwnedSockets
from alarmtop.core.kernel.alarms.attempt import AlarmDispatcher
from alarmtop.core.kernel.alarms.scheduler import AlarmScheduler
from alarmtop.core.kernel.clock import SystemClock
from alarmtop.core.kernel.cron import CronFn, CronJob, CronRunner
from alarmtop.core.kernel.descriptors import Reservations
from alarmtop.core.kernel.events import EventBus
from alarmtop.core.kernel.executions.aws.service import AwsOptions, AwsService
from alarmtop.core.kernel.executions.engine import ExecutionEngine
from alarmtop.core.kernel.executions.execution_object import make_execution_class
from alarmtop.core.kernel.executions.functions import DurableFunction
from alarmtop.core.kernel.executions.ledger import Ledger
from alarmtop.core.kernel.faults import FaultRegistry
from alarmtop.core.kernel.hooks import Hooks
from alarmtop.core.kernel.objects.calls import ObjectCalls, Stub
from alarmtop.core.kernel.objects.classes import ObjectClasses
from alarmtop.core.kernel.objects.durable_object import DurableObject
from alarmtop.core.kernel.objects.host import ObjectHost
from alarmtop.core.kernel.run_state import RunState
from alarmtop.core.kernel.supervisor import Supervisor, bounded, tracker_of
from alarmtop.core.kernel.watchdog import DEFAULT_THRESHOLD_S, LoopWatchdog
from alarmtop.core.model.alarm_policy import DEFAULT_KEEP, RetryPolicy
from alarmtop.core.model.audit_retention import DEFAULT_DAYS, DEFAULT_ROWS, AuditRetention
from alarmtop.core.model.errors import InvalidArgument
from alarmtop.core.model.operations import EXECUTION_CLASS
from alarmtop.core.ops.alarm_actions import AlarmActions
from alarmtop.core.ops.audit import AuditLog
from alarmtop.core.ops.bulk import BulkParts, BulkService
from alarmtop.core.ops.execution_access import Callbacks, ExecutionAccess
from alarmtop.core.ops.execution_tools import ExecutionTools
from alarmtop.core.ops.executions import Executions
from alarmtop.core.ops.forwarded import AuditedCalls
from alarmtop.core.ops.lambda_api import LambdaApi
from alarmtop.core.ops.queries import Queries
from alarmtop.core.ops.timers_board import TimersBoard
from alarmtop.core.ops.tools import OperatorTools
from alarmtop.core.ports import Clock, StorageBackend
from alarmtop.core.storage.sqlite.backend import SqliteBackend

log = logging.getLogger("alarmtop.runtime")
STOP_GRACE_S = 10.0  # how long stop() waits for work that ignores being cancelled
LEFT_BEHIND = ("stopping the runtime: %s did not stop within the grace; left behind (as "
               "after a crash, the next start recovers them)")
# A crashed invocation is retried by the execution's alarm, 1 s later, doubling up to
# a minute; a long ladder, since each retry usually gets further.
EXECUTION_RETRIES = RetryPolicy(max_retries=20, initial_delay_s=1.0, max_delay_s=60.0)

__all__ = ["Runtime", "Stub"]


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
        plugins: lifecycle hook plugins (see `alarmtop.core.hooks`), told of every object
            event, alarm attempt, execution invocation, operation and step attempt, and
            operator command; `add_plugin()` adds more.
        aws: how the AWS SDK's handlers are served (`AwsOptions`: limits, ARNs, workers).
        audit_retention_days: audit rows older than this are pruned (None: kept).
        audit_max_rows: at most this many audit rows are kept, the newest (None: no cap).
        blocked_loop_s: a handler that holds the event loop this long is named in the log
            (a watchdog thread; None: no watchdog).

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
                 plugins: Iterable[Any] = (), aws: AwsOptions | None = None,
                 audit_retention_days: float | None = DEFAULT_DAYS,
                 audit_max_rows: int | None = DEFAULT_ROWS,
                 blocked_loop_s: float | None = DEFAULT_THRESHOLD_S) -> None:
        self.clock: Clock = clock or SystemClock()
        # Owns every background task; its busy accounting is the clock's, when the clock
        # keeps one (a virtual clock waits for the runtime to be idle).
        self.tasks = Supervisor(tracker_of(self.clock))
        self.data_dir = Path(data_dir)
        self.env = env
        self.max_resident = max_resident
        self.abandoned: list[str] = []  # what the last stop() left behind
        self.watchdog = LoopWatchdog(blocked_loop_s)  # names a handler that blocks the loop
        self._state = RunState()
        self.events = EventBus(self.clock)
        self.hooks = Hooks(plugins)
        self.faults = FaultRegistry(self.events, self.clock.now_ms)
        self.backend: StorageBackend = backend or SqliteBackend(self.data_dir)
        fleet = self.backend if isinstance(self.backend, FleetBackend) else None
        self._classes = ObjectClasses(retry_policy or RetryPolicy())
        self._descriptors = Reservations(max_resident)
        self.operator_rows = self.backend.operator_rows

        # -- the kernel: alarms, objects, calls, cron -------------------------------------
        self.scheduler = AlarmScheduler(
            self.backend.database, self.backend.alarm_rows, self.clock, self.events,
            self._classes.policy_for, self.tasks, max_concurrent=max_concurrent_alarms,
            window_size=window_size, sweep_interval_s=sweep_interval, rng=rng,
            keep_attempts=keep_attempts, paused_of=self.operator_rows.paused,
            once=fleet.claim_once if fleet else None)
        self.host = ObjectHost(
            self._classes.by_name, self.backend, self.scheduler, self.clock, self.events, env,
            self.tasks, hibernate_after_s=hibernate_after, max_resident=max_resident,
            delete_all_preserves_alarm=delete_all_preserves_alarm, hooks=self.hooks,
            alarm_started=self.scheduler.running.get,
            may_run=fleet.may_run if fleet else None, tenure=fleet.tenure if fleet else None)
        self.sockets = self.host.sockets
        self._dispatcher = AlarmDispatcher(self.host, self.scheduler, self.faults, self.clock,
                                           alarm_timeout, self.hooks)
        self._cron = CronRunner(self.clock, self.events, self.tasks,
                                gate=fleet.claim_once if fleet else None)
        routing = Routing()
        self.calls = ObjectCalls(self._classes, self.host, self.hooks, routing, self._state)

        # -- durable executions: execution objects share one engine ----------------------
        self.audit = AuditLog(self.backend.audit_rows, self.events, self.clock, self.tasks,
                              AuditRetention(audit_retention_days, audit_max_rows))
        self.ledger = Ledger(self.backend.execution_log, self.events, self.faults, self.clock)
        # The service side of the AWS SDK: the executions of register_lambda's functions.
        self.aws = AwsService(self.clock, self.faults, self.tasks, self._execution_stub, aws)
        self._engine = ExecutionEngine(
            self.backend.execution_log, self.events, self.faults, self.clock, rng,
            start_execution=self._start_child, call_execution=self._call_execution,
            aws=self.aws, hooks=self.hooks)
        access = ExecutionAccess(self._engine, self._execution_stub)
        callbacks = Callbacks(access)
        self.executions = Executions(access, self.audit, callbacks,
                                     ExecutionTools(access, self.audit, callbacks))

        # -- the operator's tools ----------------------------------------------------------
        alarms = AlarmActions(self._classes, self.scheduler, self.host, routing, self.clock,
                              self._state, self.audit)
        queries = Queries(self.backend, self._classes, self.scheduler, self.host, self._state)
        board = TimersBoard(self.operator_rows, self.backend.execution_log, self.clock,
                            self._state)
        self.bulk = BulkService(BulkParts(
            self.operator_rows, self.backend.execution_log, self.audit, self.clock,
            self.events, self.tasks, self.scheduler, routing, alarms, self.executions,
            self.faults, queries.nodes, fleet.node_id if fleet else "local",
            max(0.05, fleet.lease_s / 3) if fleet else None, self._state))
        self.ops = OperatorTools(alarms, queries, self.executions, self.bulk, board,
                                 self.audit, self.faults)
        self.lambda_api = LambdaApi(self.aws, self.executions, self.events)  # AWS's shapes

        # -- a fleet's node ---------------------------------------------------------------
        self.node: FleetNode | None = None  # on a shared backend: this runtime's node
        if fleet is not None:
            owned = OwnedSockets(self._classes, self.calls, self.sockets, self._state,
                                 self.clock, fleet.node_id, routing.held)
            self.node = FleetNode(fleet, routing, owned, self.host, self.scheduler,
                                   self.events, self.faults, self.tasks, self._state,
                                   {"call": AuditedCalls(self.calls.serve, self.audit).serve,
                                    "operate": alarms.serve},
                                   node_host=node_host)
            self._descriptors.reserve("the node listener's sockets", NODE_SOCKETS)

        # -- the public API, forwarded to the parts that implement it ----------------------
        self.get = self.calls.get
        self.socket_route, self.socket_event = self.calls.socket_route, self.calls.socket_event
        self.registered_class, self.policy_for = self._classes.registered, self._classes.policy_for
        self.rearm, self.fire_now = alarms.rearm, alarms.fire_now
        self.clear_dead_letter, self.snooze_alarm = alarms.clear_dead_letter, alarms.snooze_alarm
        self.pause_alarm, self.resume_alarm = alarms.pause_alarm, alarms.resume_alarm
        self.alarms, self.alarm_records = queries.alarms, queries.alarm_records
        self.count_alarms, self.alarm = queries.count_alarms, queries.alarm
        self.dead_letters, self.counters = queries.dead_letters, queries.counters
        self.alarm_counts, self.near_exhaustion_count = \
            queries.alarm_counts, queries.near_exhaustion_count
        self.near_exhaustion, self.nodes = queries.near_exhaustion, queries.nodes
        self.resident_objects, self.timers = queries.resident_objects, board.timers
        self.objects, self.count_objects = queries.objects, queries.count_objects
        self.execution_page = queries.execution_page
        self.count_executions = queries.count_executions

    # -- set-up ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._state.running

    @property
    def retry_policy(self) -> RetryPolicy:
        return self._classes.default_policy

    @property
    def descriptor_limit(self) -> int | None:
        """The soft descriptor limit checked last (None: not checked yet)."""
        return self._descriptors.limit

    def register(self, cls: type[DurableObject], *,
                 retry_policy: RetryPolicy | None = None) -> type[DurableObject]:
        """Make `cls` addressable by its class name; optionally with its own retry policy."""
        return self._classes.register(cls, retry_policy=retry_policy)

    def register_execution(self, fn: Any) -> Any:
        """Register a `@durable_execution` handler (several versions of one name may coexist)."""
        if not isinstance(fn, DurableFunction):
            raise InvalidArgument("register_execution() takes a function decorated with "
                                  "@durable_execution")
        self._engine.register(fn)
        self._execution_class()
        return fn

    def register_lambda(self, function_name: str, handler: Any, *, isolation: str = "thread",
                        endpoint: str | None = None, durable: bool | None = None,
                        version: str | None = None, timeout: int | None = None,
                        retries: RetryPolicy | None = None, paths: Iterable[str] = ()) -> Any:
        """Run a handler of the AWS SDK (`@durable_execution`, or "module:attr") as the
        Lambda-style function `function_name`, unchanged: in worker threads, processes
        (`isolation="process"`, imported after `paths`), or behind `endpoint` (handler
        None: the Lambda runtime-emulator contract, any language). A handler not the SDK's
        is a plain function (`durable=False`), called once per invoke. `timeout`: the
        execution timeout (s); `retries`: failed invocations' retries."""
        fn = self.aws.functions.add(function_name, handler, isolation=isolation,
                                    endpoint=endpoint, durable=durable, version=version,
                                    timeout_s=timeout, retries=retries, paths=tuple(paths))
        self._execution_class()
        return fn

    def _execution_class(self) -> None:
        if EXECUTION_CLASS not in self._classes:
            self._classes.register(make_execution_class(self._engine),
                                   retry_policy=EXECUTION_RETRIES)

    def add_plugin(self, plugin: Any) -> Any:
        """Add a lifecycle hook plugin (see `alarmtop.core.hooks`), after those there are;
        it hears what starts from now on. Returns it."""
        self.hooks.add(plugin)
        return plugin

    def cron(self, expression: str, fn: CronFn, *, name: str | None = None,
             timezone: str = "UTC") -> CronJob:
        """Run `fn` (sync or async) on a five-field cron schedule, on the runtime clock."""
        return self._cron.add(expression, fn, name, timezone)

    def reserve_descriptors(self, what: str, count: int) -> None:
        """Count `count` descriptors for `what` (a server's socket caps) in the budget
        `start()` checks; checked again now if the runtime is running already."""
        self._descriptors.reserve(what, count)
        if self.running:
            self.check_descriptors()

    def check_descriptors(self) -> int:
        """Fit the descriptor budget (see the class docs); the soft limit in force, -1
        for none. Raises `DescriptorBudget` when it cannot fit."""
        # Running: the runtime database and the objects resident now are open already.
        return self._descriptors.check(1 + self.host.live_count if self.running else None)

    async def sweep(self) -> int:
        """Run the sweeper now; how many overdue alarms it re-queued."""
        self._state.check()
        return await self.scheduler.sweep()

    def fleet_events(self) -> FleetEvents | None:
        """A puller of the other nodes' events (None when this runtime is no fleet's
        node): `start()` it while someone watches, `drain()` what it got."""
        return None if self.node is None else self.node.fleet_events()

    # -- executions reach each other through their objects --------------------------------

    def _execution_stub(self, execution_id: str) -> Stub:
        return self.calls.get(EXECUTION_CLASS, execution_id)

    async def _start_child(self, name: str, execution_id: str, parent: str,
                           input_text: str) -> Any:
        return await self.executions.start(name, None, execution_id, parent=parent,
                                           input_text=input_text)

    async def _call_execution(self, execution_id: str, method: str, *args: Any) -> Any:
        return await getattr(self._execution_stub(execution_id), method)(*args)

    # -- start and stop -------------------------------------------------------------------

    async def start(self) -> None:
        """Check the descriptor budget, open storage, recover attempts cut short by a
        crash, start firing alarms.

        On a shared backend the runtime is a node of a fleet: it listens for other
        nodes' calls first, then takes its share of the shards."""
        if self.running:
            return
        self.check_descriptors()
        node = self.node
        if node is not None:
            await node.listen()
        try:
            await self.backend.open()
        except BaseException:
            if node is not None:
                await node.stop_listening()
            raise
        if node is not None:
            await node.join()
        self.tasks.reopen()
        self.aws.reopen()
        self._state.running = True
        self.watchdog.start()
        await self.scheduler.start(self._dispatcher)
        self.host.start()
        self._cron.start()
        self.audit.start()
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
        if not self.running or self._state.stopping:
            return
        self._state.stopping = True
        try:
            await self._stop(grace_s)
        finally:
            self._state.stopping = False

    async def _stop(self, grace_s: float | None) -> None:
        self.abandoned = []
        loop = asyncio.get_running_loop()
        end = None if grace_s is None else loop.time() + grace_s

        def left() -> float | None:
            return None if end is None else max(0.0, end - loop.time())

        async def step(what: str, coro: Coroutine[Any, Any, None]) -> None:
            if not await bounded(coro, left()):
                self.abandoned.append(what)
                log.warning(LEFT_BEHIND, what)

        await step("cron jobs", self._cron.stop())
        await step("lambda invocations", self.aws.stop())
        if self.node is not None:
            # At most half of what is left of the grace: the hand-over of the shards,
            # at the end of the stop, must still fit in it.
            within, drain_s = left(), self.node.backend.drain_s
            await step("alarm handlers' drain", self.scheduler.drain(
                drain_s if within is None else min(drain_s, within / 2)))
        self._state.running = False
        await step("alarm handlers", self.scheduler.stop())
        await step("objects", self.host.stop())
        if await self.tasks.close(grace_s=left()):
            self.abandoned.append("tasks")
        if self.node is not None:
            await step("node calls", self.node.leave())
        await step("storage", self.backend.close())
        self.watchdog.stop()

    async def __aenter__(self) -> Runtime:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()
