"""Lifecycle hooks: plugins told when events, alarm attempts, invocations, steps and
operator commands start and end.

A plugin is any object with some of `Plugin`'s methods (subclass `Plugin` and
override what you need). Give them to the runtime, `Runtime(plugins=[...])` or
`rt.add_plugin(p)`, to hear everything; or to one execution handler,
`@durable_execution(plugins=[...])` as in the AWS SDK, to hear that handler's
invocation, operation and step-attempt hooks. Several plugins each receive every
hook they define, in registration order (the runtime's first, then the
handler's). See `hook_info` for what each hook is told, and the README for when
each fires.

Hooks are plain synchronous calls on the event loop, made in the task of the thing
they report (a start and its end run in the same task, so a plugin may set a
context variable at the start and reset it at the end). Keep them cheap: do I/O
elsewhere. A plugin that raises is logged (once with its traceback, then at most a
line a minute with how many more) and otherwise ignored: nothing it does changes
the event, the alarm or the execution.

No hook runs inside an event's commit: start hooks run before the work, end hooks
once its outcome is durable (after the commit of the event that holds it).

With no plugin, every hook site costs one attribute test: `Hooks` keeps, per hook,
the tuple of the plugins' bound methods, empty when none defines it.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from alarmtop.core.model import hook_info

log = logging.getLogger("alarmtop.plugins")
REPEAT_LOG_EVERY_S = 60.0

Target = Callable[[Any], None]

# What another node sent with a call it forwarded here, for that call's event (the
# event reads it, and clears it for the calls it makes in turn).
INCOMING: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "alarmtop_incoming_propagation", default=None)


class Plugin:
    """Base class of a plugin: every hook does nothing; override the ones you need."""

    # executions: the AWS durable execution SDK's hook names
    def on_invocation_start(self, info: hook_info.InvocationStartInfo) -> None:
        """Before the handler runs, in the invocation's task."""

    def on_invocation_end(self, info: hook_info.InvocationEndInfo) -> None:
        """After the invocation's outcome is durable: SUCCEEDED, FAILED, PENDING, RETRY."""

    def on_operation_start(self, info: hook_info.OperationStartInfo) -> None:
        """When the handler first reaches an operation (a replay does not start it)."""

    def on_operation_end(self, info: hook_info.OperationEndInfo) -> None:
        """When an operation's terminal status is durable (once per operation)."""

    def on_user_function_start(self, info: hook_info.UserFunctionStartInfo) -> None:
        """Before each attempt of a step's body (a replayed step runs no attempt)."""

    def on_user_function_end(self, info: hook_info.UserFunctionEndInfo) -> None:
        """After each attempt's body returned or raised, in the same task."""

    # objects, alarms, operators
    def on_object_event_start(self, info: hook_info.ObjectEventInfo) -> None:
        """Before an event (call, alarm attempt, socket event) runs, in its task."""

    def on_object_event_end(self, info: hook_info.ObjectEventEndInfo) -> None:
        """After the event's commit landed (or failed: outcome ABANDONED)."""

    def on_alarm_attempt_start(self, info: hook_info.AlarmAttemptInfo) -> None:
        """Once the attempt's start is durable, before its event."""

    def on_alarm_attempt_end(self, info: hook_info.AlarmAttemptEndInfo) -> None:
        """Once the attempt's end is recorded: ok, retry scheduled, dead, abandoned."""

    def on_command_start(self, info: hook_info.CommandInfo) -> None:
        """An ops-channel command or query starts."""

    def on_command_end(self, info: hook_info.CommandEndInfo) -> None:
        """It was answered."""

    def propagation_metadata(self) -> Mapping[str, str] | None:
        """Text to carry with work that leaves this task: a call forwarded to another
        node (its event is told it as `propagation`), an execution's start (its
        invocations are told it). Called in the task that hands the work on."""
        return None


HOOKS = tuple(name for name in vars(Plugin) if name.startswith("on_"))


class FailureLog:
    """When to log a plugin's failure: the first of each (plugin, hook) in full, then
    one line per `every_s` with how many were not logged. Pure: time is given."""

    def __init__(self, every_s: float = REPEAT_LOG_EVERY_S) -> None:
        self.every_s = every_s
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}  # key: (logged at, since)
        self.count = 0

    def decide(self, key: tuple[str, str], now_s: float) -> tuple[bool, int]:
        """(log this one?, failures not logged before it)."""
        self.count += 1
        last = self._seen.get(key)
        if last is None or now_s - last[0] >= self.every_s:
            self._seen[key] = (now_s, 0)
            return True, 0 if last is None else last[1]
        self._seen[key] = (last[0], last[1] + 1)
        return False, 0


class Hooks:
    """The plugins of a runtime (or of a handler with its own), by hook.

    Call sites test the hook's tuple and build the info only when it is not empty:
    `if hooks.on_object_event_start: hooks.fire(hooks.on_object_event_start, info)`.
    """

    # One tuple per hook, named after it (see HOOKS).
    on_invocation_start: tuple[Target, ...]
    on_invocation_end: tuple[Target, ...]
    on_operation_start: tuple[Target, ...]
    on_operation_end: tuple[Target, ...]
    on_user_function_start: tuple[Target, ...]
    on_user_function_end: tuple[Target, ...]
    on_object_event_start: tuple[Target, ...]
    on_object_event_end: tuple[Target, ...]
    on_alarm_attempt_start: tuple[Target, ...]
    on_alarm_attempt_end: tuple[Target, ...]
    on_command_start: tuple[Target, ...]
    on_command_end: tuple[Target, ...]

    def __init__(self, plugins: Iterable[Any] = (), failures: FailureLog | None = None) -> None:
        self.plugins: tuple[Any, ...] = ()
        self.failures = failures or FailureLog()
        self.version = 0  # bumped by add(): handlers' combined hooks are rebuilt
        self._propagators: tuple[Callable[[], Mapping[str, str] | None], ...] = ()
        self._build(tuple(plugins))

    def add(self, plugin: Any) -> None:
        self._build((*self.plugins, plugin))

    def with_plugins(self, extra: Iterable[Any]) -> Hooks:
        """These hooks plus `extra` (a handler's own plugins), after these."""
        extra = tuple(extra)
        if not extra:
            return self
        return Hooks((*self.plugins, *extra), self.failures)

    def _build(self, plugins: tuple[Any, ...]) -> None:
        self.plugins = plugins
        self.version += 1
        for name in HOOKS:
            setattr(self, name, tuple(_bound(p, name) for p in plugins if _defines(p, name)))
        self._propagators = tuple(p.propagation_metadata for p in plugins
                                  if _defines(p, "propagation_metadata"))

    @property
    def active(self) -> bool:
        return bool(self.plugins)

    def fire(self, targets: tuple[Target, ...], info: Any) -> None:
        """Call each target with `info`; a raise is logged and goes no further."""
        for target in targets:
            try:
                target(info)
            except Exception as exc:
                self._failed(target, exc)

    def propagation(self) -> dict[str, str] | None:
        """What the plugins want carried with work handed on from this task (None:
        nothing; the common case, checked without a call)."""
        if not self._propagators:
            return None
        out: dict[str, str] = {}
        for provide in self._propagators:
            try:
                got = provide()
            except Exception as exc:
                self._failed(provide, exc)
                continue
            if got:
                out.update({str(k): str(v) for k, v in got.items()})
        return out or None

    def _failed(self, target: Callable[..., Any], exc: Exception) -> None:
        owner = getattr(target, "__self__", target)
        plugin = type(owner).__qualname__
        hook = getattr(target, "__name__", "hook")
        show, missed = self.failures.decide((plugin, hook), time.monotonic())
        if not show:
            return
        more = f" ({missed} more failures of this hook since the last line)" if missed else ""
        log.warning("plugin %s raised in %s: %s: %s; ignored, the runtime goes on%s", plugin,
                    hook, type(exc).__name__, exc, more, exc_info=exc if not missed else None)


def _defines(plugin: Any, name: str) -> bool:
    """Whether `plugin` has hook `name` of its own (the base class's does nothing)."""
    method = getattr(type(plugin), name, None)
    if method is None:
        return callable(getattr(plugin, name, None))  # set on the instance
    return method is not getattr(Plugin, name, None)


def _bound(plugin: Any, name: str) -> Target:
    method: Target = getattr(plugin, name)
    return method


NO_HOOKS = Hooks()
