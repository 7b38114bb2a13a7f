"""`runtime.executions`: start, inspect and steer durable executions.

Also the handler registry (`@durable_execution`, pinned versions), the audit log
of operator actions, and the idempotency ledger for keyed side effects.
"""

from __future__ import annotations

import functools
import itertools
import json
import random
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, overload

from alarmtop.core.kernel.executions.context import current_step, decode_callback_id
from alarmtop.core.kernel.hooks import NO_HOOKS, Hooks
from alarmtop.core.model.execution_errors import (
    InvalidExecutionState,
    UnknownCallback,
    UnknownExecution,
    ValidationError,
)
from alarmtop.core.model.log_records import log_execution
from alarmtop.core.model.operations import ExecutionRecord, OpType
from alarmtop.core.model.serialization import to_json
from alarmtop.core.ops.execution_tools import OperatorTools

if TYPE_CHECKING:
    from alarmtop.core.kernel.clock import Clock
    from alarmtop.core.kernel.events import EventBus
    from alarmtop.core.kernel.executions.context import DurableContext
    from alarmtop.core.kernel.faults import FaultRegistry
    from alarmtop.core.ports import AuditRows, ExecutionLog

# Starts an execution for an invoke: (handler name, execution id, parent, input text).
StartExecution = Callable[[str, str, str, str], Awaitable[Any]]
# Calls a method of another execution's object: (execution id, method, *args).
CallExecution = Callable[..., Awaitable[Any]]

Handler = Callable[[Any, "DurableContext"], Awaitable[Any]]
F = TypeVar("F", bound=Handler)
EXECUTION_CLASS = "Execution"
MAX_ID = 128


@dataclass(frozen=True)
class DurableFunction:
    """A registered durable handler: `name` and `version` pin what executions replay."""

    fn: Handler
    name: str
    version: str
    timeout_s: int | None = None
    plugins: tuple[Any, ...] = ()  # this handler's own lifecycle hook plugins

    async def __call__(self, event: Any, ctx: DurableContext) -> Any:
        return await self.fn(event, ctx)


@overload
def durable_execution(fn: Handler, /) -> DurableFunction: ...


@overload
def durable_execution(*, name: str | None = None, version: str = "1",
                      timeout: int | None = None, plugins: Iterable[Any] = ()
                      ) -> Callable[[Handler], DurableFunction]: ...


def durable_execution(fn: Handler | None = None, /, *, name: str | None = None,
                      version: str = "1", timeout: int | None = None,
                      plugins: Iterable[Any] = ()
                      ) -> DurableFunction | Callable[[Handler], DurableFunction]:
    """Mark `async def handler(event, ctx)` as a durable execution handler.

    `name` defaults to the function name; `version` pins running executions to
    this code (register several versions side by side while old ones finish);
    `timeout` (seconds) fails the execution as timed out; `plugins` are lifecycle
    hook plugins of this handler alone (as in the AWS SDK; see `alarmtop.core.kernel.hooks`):
    they hear its invocation, operation and step-attempt hooks, after the runtime's.
    """
    own = tuple(plugins)

    def wrap(f: Handler) -> DurableFunction:
        return DurableFunction(f, name or f.__name__, str(version), timeout, own)
    return wrap(fn) if fn is not None else wrap


class ExecutionEngine:
    """What execution objects share: handlers, their log store, faults, events, clock.

    Built by the runtime and handed what it needs (no component reaches into the
    runtime): `store` is the backend's `ExecutionLog`; `start_execution` and
    `call_execution` reach other executions (an invoke's child, its parent)."""

    def __init__(self, store: ExecutionLog, events: EventBus, faults: FaultRegistry,
                 clock: Clock, rng: random.Random | None = None, *,
                 start_execution: StartExecution, call_execution: CallExecution,
                 hooks: Hooks = NO_HOOKS) -> None:
        self.store = store
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
        if _version_key(version) < _version_key(pinned):
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


def _check_id(execution_id: Any) -> str:
    if not isinstance(execution_id, str) or not execution_id or len(execution_id) > MAX_ID \
            or any(ord(c) < 33 for c in execution_id) or "#" in execution_id:
        raise ValidationError(f"execution ids are 1-{MAX_ID} printable characters without "
                              f"spaces or '#', not {execution_id!r}")
    return execution_id


class Executions(OperatorTools):
    """`runtime.executions` (operator tools: see `durable.tools`)."""

    def __init__(self, engine: ExecutionEngine, stub_for: Callable[[str], Any],
                 audit: AuditLog) -> None:
        self.engine = engine
        self._stub_for = stub_for  # the RPC stub of an execution's object
        self._audit = audit
        self._ids = itertools.count(1)

    def _stub(self, execution_id: str) -> Any:
        return self._stub_for(_check_id(execution_id))

    def _check_id(self, execution_id: str) -> str:
        return _check_id(execution_id)

    async def start(self, name: str, event: Any = None, execution_id: str | None = None, *,
                    version: str | None = None, timeout_s: int | None = None,
                    parent: str | None = None, input_text: str | None = None) -> str:
        """Start an execution of handler `name` with input `event`; returns its id.

        Starting again with the same id and name returns the existing execution.
        """
        versions = self.engine.handlers.get(name)
        if not versions:
            raise UnknownExecution(f"handler {name!r}", "register it with "
                                   f"runtime.register_execution() (registered: "
                                   f"{sorted(self.engine.handlers) or 'none'})")
        version = version or max(versions, key=_version_key)
        fn = self.engine.handler(name, version)
        if input_text is None:  # an invoke passes its own serialized payload
            input_text = to_json(event, f"the input of execution {name!r}")
        if execution_id is None:
            execution_id = f"{name}-{self.engine.clock.now_ms():x}-{next(self._ids)}"
        out = await self._stub(execution_id).begin(name, version, input_text,
                                                   timeout_s or fn.timeout_s, parent)
        return str(out["execution_id"])

    async def _record(self, execution_id: str) -> ExecutionRecord:
        rec = await self.engine.store.get(_check_id(execution_id))
        if rec is None:
            raise UnknownExecution(repr(execution_id), "see runtime.executions.list()")
        return rec

    async def describe(self, execution_id: str) -> dict[str, Any]:
        """Status, result, error, history, saga stack and callbacks as a JSON-ready dict."""
        rec = await self._record(execution_id)
        store = self.engine.store
        ops = await store.operations(rec.id)
        callbacks = [{"name": op.name, "callback_id": op.callback_id,
                      "status": op.status.value.lower(), "kind": op.sub_type}
                     for op in sorted(ops, key=lambda o: o.started_ms or 0)
                     if op.type is OpType.CALLBACK]
        return {
            "execution_id": rec.id, "name": rec.name, "version": rec.version,
            "status": rec.status.value,
            "result": None if rec.result is None else json.loads(rec.result),
            "error": rec.error, "input": json.loads(rec.input),
            "created_ms": rec.created_ms, "updated_ms": rec.updated_ms,
            "ended_ms": rec.ended_ms, "invocations": rec.invocations,
            "blocked_on": rec.blocked_on, "human_hold": rec.human_hold,
            "history": await store.history(rec.id),
            "saga": rec.saga, "callbacks": callbacks,
            "paused": rec.paused is not None, "paused_reason": rec.paused,
            "paused_ms": rec.paused_ms, "redrives": rec.redrives,
            "forked_from": rec.forked_from,
        }

    async def history(self, execution_id: str) -> list[dict[str, Any]]:
        """The AWS-style history events, ready for `json.dumps`."""
        rec = await self._record(execution_id)
        return await self.engine.store.history(rec.id)

    async def list(self, status: str | None = None, limit: int = 100,
                   offset: int = 0) -> list[dict[str, Any]]:
        recs = await self.engine.store.list(status, limit, offset)
        return [{"execution_id": r.id, "name": r.name, "status": r.status.value,
                 "blocked_on": r.blocked_on, "updated_ms": r.updated_ms, "saga": r.saga,
                 "paused": r.paused is not None}
                for r in recs]

    async def counts(self) -> dict[str, int]:
        return await self.engine.store.counts()

    # -- callbacks from the outside -------------------------------------------------------

    async def _callback(self, callback_id: str, kind: str, result: str | None = None,
                        error: dict[str, Any] | None = None) -> dict[str, Any]:
        pair = decode_callback_id(callback_id)
        if pair is None:
            raise UnknownCallback(str(callback_id))
        execution_id, op_id = pair
        if await self.engine.store.get(execution_id) is None:
            raise UnknownCallback(callback_id)
        out: dict[str, Any] = await self._stub(execution_id).callback(
            op_id, callback_id, kind, result, error)
        return out

    async def send_callback_success(self, callback_id: str, payload: Any = None) -> None:
        """Complete a callback; a string is stored as sent, other values as JSON."""
        text = payload if isinstance(payload, str) or payload is None else to_json(
            payload, "the callback payload")
        await self._callback(callback_id, "success", result=text)

    async def send_callback_failure(self, callback_id: str, error_type: str = "CallbackError",
                                    message: str = "", data: Any = None) -> None:
        err: dict[str, Any] = {"ErrorType": str(error_type), "ErrorMessage": str(message)}
        if data is not None:
            err["ErrorData"] = data
        await self._callback(callback_id, "failure", error=err)

    async def send_callback_heartbeat(self, callback_id: str) -> None:
        await self._callback(callback_id, "heartbeat")

    # -- operators ------------------------------------------------------------------------

    async def _operate(self, execution_id: str, action: str, text: str | None,
                       actor: str, role: str | None, reason: str | None = None
                       ) -> dict[str, Any]:
        """Apply an operator action; audited with its reason (or its text), ok or not."""
        audit = self._audit
        why = reason if reason is not None else text
        detail: dict[str, Any] = {} if text is None or text == why else {"note": text}
        try:
            if action == "resolve" and not text:
                raise ValidationError("resolve() needs a note saying what was done by hand")
            await self._record(execution_id)
            out: dict[str, Any] = await self._stub(execution_id).operate(action, text, actor)
        except Exception as exc:
            await audit.record(actor, action, execution_id, why, ok=False, role=role,
                               detail={**detail, "error": str(exc)})
            raise
        await audit.record(actor, action, execution_id, why, ok=True, role=role,
                           detail={**detail, **out})
        return out

    async def retry_compensation(self, execution_id: str, *, actor: str = "api",
                                 role: str | None = None,
                                 reason: str | None = None) -> dict[str, Any]:
        """Re-run the compensation that failed for good, then carry on rolling back."""
        return await self._operate(execution_id, "retry_compensation", None, actor, role,
                                   reason)

    async def resolve(self, execution_id: str, note: str, *, actor: str = "api",
                      role: str | None = None, reason: str | None = None) -> dict[str, Any]:
        """Record the failed compensation as done by hand (with `note`) and carry on."""
        return await self._operate(execution_id, "resolve", note, actor, role, reason)

    async def abort(self, execution_id: str, reason: str = "", *, actor: str = "api",
                    role: str | None = None) -> dict[str, Any]:
        """End the execution as aborted (a failure), running nothing more."""
        return await self._operate(execution_id, "abort", reason, actor, role)

    async def hand_to_human(self, execution_id: str, reason: str = "", *, actor: str = "api",
                            role: str | None = None) -> dict[str, Any]:
        """Hold the execution for a human: timers still complete, nothing runs until
        an operator resolves (carry on) or aborts it."""
        return await self._operate(execution_id, "hand_to_human", reason, actor, role)


def _version_key(version: str) -> tuple[int, ...] | tuple[float, str]:
    try:
        return tuple(int(p) for p in version.split("."))
    except ValueError:
        return (float("inf"), version)


class AuditLog:
    """Every operator action: who, when, what, why, and whether it worked.

    Text is made safe to store before it is written: an odd character (a lone
    surrogate, say) must never let an action skip its row."""

    def __init__(self, store: AuditRows, events: EventBus, clock: Clock) -> None:
        self._store = store
        self._events = events
        self._clock = clock

    async def record(self, actor: str, action: str, target: str | None = None,
                     reason: str | None = None, ok: bool = True, role: str | None = None,
                     detail: Any = None) -> None:
        entry = {"at_ms": self._clock.now_ms(), "actor": safe_text(actor),
                 "role": safe_text(role), "action": safe_text(action),
                 "target": safe_text(target), "reason": safe_text(reason), "ok": ok,
                 "detail": safe_value(detail)}
        await self._store.audit_append(entry)
        self._events.emit(f"operator.{entry['action']}",
                          {k: v for k, v in entry.items() if k != "detail"})

    async def list(self, limit: int = 100, offset: int = 0) -> list[dict[str, Any]]:
        return await self._store.audit_list(limit, offset)


class Ledger:
    """Keyed deliveries for side effects that must happen once.

    Exactly-once *effect* needs the receiver's help: it must remember keys it has
    seen. This ledger plays that receiver: `deliver(key, value)` returns True the
    first time a key is seen and False after, and counts every attempt, so a step
    that re-runs after a crash can be seen to have tried twice but delivered once.
    """

    def __init__(self, store: ExecutionLog, events: EventBus, faults: FaultRegistry,
                 clock: Clock) -> None:
        self._store = store
        self._events = events
        self._faults = faults
        self._clock = clock

    async def deliver(self, key: str, value: Any = None) -> bool:
        to_json(value, "the ledger value")
        step = current_step.get()
        honour = step is None or self._faults.find(step[0], "idempotency_off",
                                                   step[2]) is None
        first = await self._store.ledger_deliver(
            key, value, self._clock.now_ms(), honour_key=honour)
        self._events.emit("ledger.delivered" if first else "ledger.duplicate",
                          {"key": key, "honoured": honour})
        return first

    async def get(self, key: str) -> dict[str, Any] | None:
        """`{"value", "at_ms", "deliveries"}` for a key, or None."""
        return await self._store.ledger_get(key)


def safe_text(text: Any) -> str | None:
    """`text` as a string that can always be stored: lone surrogates become U+FFFD."""
    if text is None:
        return None
    out = str(text)
    try:
        out.encode("utf-8")
    except UnicodeEncodeError:
        out = out.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return out


def safe_value(value: Any) -> Any:
    """A JSON-ready copy of `value` with every string made safe to store."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {safe_text(k): safe_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [safe_value(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return safe_text(repr(value))

