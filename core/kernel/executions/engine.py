"""What execution objects share: handlers, their log, faults, events, clock (`ExecutionEngine`)."""

from __future__ import annotations

import functools
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from alarmtop.core.kernel.executions.functions import DurableFunction, version_key
from alarmtop.core.kernel.hooks import NO_HOOKS, Hooks
from alarmtop.core.model.errors import InvalidArgument
from alarmtop.core.model.execution_errors import InvalidExecutionState, ValidationError
from alarmtop.core.model.log_records import log_execution
from alarmtop.core.model.operations import ExecutionRecord

if TYPE_CHECKING:
    from alarmtop.core.kernel.events import EventBus
    from alarmtop.core.kernel.executions.aws.service import AwsService
    from alarmtop.core.kernel.faults import FaultRegistry
    from alarmtop.core.ports import Clock, ExecutionLog

# Starts an execution for an invoke: (handler name, execution id, parent, input text).
StartExecution = Callable[[str, str, str, str], Awaitable[Any]]
# Calls a method of another execution's object: (execution id, method, *args).
CallExecution = Callable[..., Awaitable[Any]]


class ExecutionEngine:
    """What execution objects share: handlers, their log store, faults, events, clock.

    Built by the runtime and handed what it needs (no component reaches into the
    runtime): `store` is the backend's `ExecutionLog`; `start_execution` and
    `call_execution` reach other executions (an invoke's child, its parent); `aws` is
    the service side of the AWS SDK, for the executions of Lambda-style functions."""

    def __init__(self, store: ExecutionLog, events: EventBus, faults: FaultRegistry,
                 clock: Clock, rng: random.Random | None = None, *,
                 start_execution: StartExecution, call_execution: CallExecution,
                 aws: AwsService, hooks: Hooks = NO_HOOKS) -> None:
        self.store = store
        self.aws = aws
        self.hooks = hooks
        # A handler's hooks: the runtime's plugins and its own, as of the runtime's
        # hooks version and that registration of the handler.
        self._handler_hooks: dict[tuple[str, str], tuple[int, Any, Hooks]] = {}
        self.events = events
        self.faults = faults
        self.clock = clock
        self.rng = rng or random.Random()
        self.handlers: dict[str, dict[str, DurableFunction]] = {}
        self._start_execution = start_execution
        self._call_execution = call_execution

    def register(self, fn: DurableFunction) -> None:
        """Add a handler version (several versions of one name may coexist)."""
        versions = self.handlers.setdefault(fn.name, {})
        if fn.version in versions and versions[fn.version].fn is not fn.fn:
            raise InvalidArgument(f"execution handler {fn.name!r} version {fn.version!r} is "
                                  "already registered; give the new code a new version")
        versions[fn.version] = fn

    def handler(self, name: str, version: str) -> DurableFunction:
        versions = self.handlers.get(name, {})
        if version not in versions:
            raise InvalidExecutionState(
                f"execution handler {name!r} version {version!r} is not registered; running "
                f"executions stay pinned to the version they started with (registered: "
                f"{sorted(versions) or 'none'}); register it again to let them finish")
        return versions[version]

    def hooks_of(self, name: str, version: str) -> Hooks:
        """The hooks an execution of handler `name`/`version` reports to."""
        fn = self.handlers.get(name, {}).get(version)
        cached = self._handler_hooks.get((name, version))
        if cached is not None and cached[0] == self.hooks.version and cached[1] is fn:
            return cached[2]
        hooks = self.hooks.with_plugins(fn.plugins if fn is not None else ())
        self._handler_hooks[(name, version)] = (self.hooks.version, fn, hooks)
        return hooks

    def pick_version(self, name: str, pinned: str, version: str | None) -> DurableFunction:
        """The handler a redrive or fork runs: the pinned version, or a newer registered
        one named explicitly (never an older one: its code predates the log)."""
        if version is None:
            return self.handler(name, pinned)
        if not isinstance(version, str) or not version:
            raise ValidationError(f"version names a registered version, not {version!r}")
        fn = self.handler(name, version)
        if version_key(version) < version_key(pinned):
            raise ValidationError(f"version {version!r} of {name!r} is older than the pinned "
                                  f"{pinned!r}; name the pinned version or a newer one")
        return fn

    def announce(self, rec: ExecutionRecord, type_: str, **data: Any) -> None:
        log_execution(type_, rec.id, rec.name, rec.error, data.get("reason"))
        self.events.emit(type_, {"execution_id": rec.id, "name": rec.name,
                                 "status": rec.status.value, **data})

    def announce_history(self, rec: ExecutionRecord, ev: dict[str, Any]) -> None:
        if not self.events.active:
            return
        self.events.emit("operation." + _snake(ev["EventType"]), {
            "execution_id": rec.id, "event_id": ev["EventId"], "id": ev.get("Id"),
            "name": ev.get("Name"), "sub_type": ev.get("SubType")})

    def deliver_history(self, rec: ExecutionRecord, events: Sequence[dict[str, Any]]) -> None:
        """Announce history events whose checkpoint has landed (mid-invocation: not held
        for the end of the invocation's event)."""
        if not self.events.active:
            return
        for ev in events:
            self.events.deliver("operation." + _snake(ev["EventType"]), {
                "execution_id": rec.id, "event_id": ev["EventId"], "id": ev.get("Id"),
                "name": ev.get("Name"), "sub_type": ev.get("SubType")})

    async def start_child(self, function_name: str, input_text: str, child_id: str,
                          parent: str) -> str:
        """Start (or find, on replay after a crash) the execution an invoke waits for."""
        await self._start_execution(function_name, child_id, parent, input_text)
        rec = await self.store.get(child_id)
        return rec.version if rec is not None else "?"

    async def child_finished(self, rec: ExecutionRecord) -> None:
        parent, _, op_id = (rec.parent or "").partition("#")
        if parent and op_id:
            await self._call_execution(parent, "child_done", op_id, rec.status.value,
                                       rec.result, rec.error)


@functools.cache
def _snake(name: str) -> str:
    # Cached: a handful of event types, converted for every history event.
    return "".join("_" + c.lower() if c.isupper() and i else c.lower()
                   for i, c in enumerate(name))
