"""The plugin suite (10-1 to 10-7): handlers with lifecycle hook plugins.

Each plugin is written from the requirement's prose, as the AWS SDK's conformance
handlers write theirs: it captures the execution's identity from the
invocation-start hook and stamps it (`durableExecutionArn`) on every record it
emits; where those print JSON lines to stdout for CloudWatch, these append the same
JSON to the execution's `LOGS` (the runner feeds them to the suite's log
validator). The plugins are registered on the handler, as with the SDK's
`durable_execution(plugins=[...])`.
"""

from __future__ import annotations

from typing import Any

from alarmtop.core.durable import DurableContext, Duration
from alarmtop.core.kernel.hooks import Plugin
from tests.conformance.handlers import (
    NO_RETRY,
    fixed_retry,
    greet,
    log,
    log_record,
    requirement,
    runs,
)


def _is_step(info: Any) -> bool:
    return bool(info.operation_type.name == "STEP")


class _Recording(Plugin):
    """Emits `{"durableExecutionArn", "plugin", "hook", ...}` records."""

    label = "CONFPLUGIN"

    def __init__(self) -> None:
        self._arn: str | None = None

    def emit(self, at_ms: int, hook: str, **fields: Any) -> None:
        assert self._arn is not None, "no invocation-start hook came first"
        log_record(self._arn, {"durableExecutionArn": self._arn, "plugin": self.label,
                               "hook": hook, **fields}, at_ms)

    def on_invocation_start(self, info: Any) -> None:
        self._arn = info.execution_arn


class LifecyclePlugin(_Recording):
    def on_invocation_start(self, info: Any) -> None:
        super().on_invocation_start(info)
        self.emit(info.start_ms, "invocation-start", first=info.is_first_invocation)

    def on_invocation_end(self, info: Any) -> None:
        self.emit(info.end_ms, "invocation-end", status=info.status.name)


class OperationPlugin(_Recording):
    def on_operation_start(self, info: Any) -> None:
        if _is_step(info):
            self.emit(info.start_ms, "operation-start", op=info.operation_id)

    def on_operation_end(self, info: Any) -> None:
        if _is_step(info):
            self.emit(info.end_ms, "operation-end", op=info.operation_id,
                      status=info.status.name)


class AttemptPlugin(_Recording):
    def on_user_function_start(self, info: Any) -> None:
        if _is_step(info):
            self.emit(info.start_ms, "attempt-start", n=info.attempt, op=info.operation_id)

    def on_user_function_end(self, info: Any) -> None:
        if _is_step(info):
            self.emit(info.end_ms, "attempt-end", n=info.attempt, outcome=info.outcome.name,
                      op=info.operation_id)


class FaultyPlugin(_Recording):
    """Every hook logs its line, then raises."""

    label = "CONFPLUGIN-FAULTY"

    def _fail(self, at_ms: int, hook: str, info: Any = None) -> None:
        if info is not None and not _is_step(info):
            return
        self.emit(at_ms, hook)
        raise RuntimeError(f"faulty {hook}")

    def on_invocation_start(self, info: Any) -> None:
        super().on_invocation_start(info)  # captured before raising
        self._fail(info.start_ms, "invocation-start")

    def on_invocation_end(self, info: Any) -> None:
        self._fail(info.end_ms, "invocation-end")

    def on_operation_start(self, info: Any) -> None:
        self._fail(info.start_ms, "operation-start", info)

    def on_operation_end(self, info: Any) -> None:
        self._fail(info.end_ms, "operation-end", info)

    def on_user_function_start(self, info: Any) -> None:
        self._fail(info.start_ms, "attempt-start", info)

    def on_user_function_end(self, info: Any) -> None:
        self._fail(info.end_ms, "attempt-end", info)


class PluginA(LifecyclePlugin):
    label = "CONFPLUGIN-A"


class PluginB(LifecyclePlugin):
    label = "CONFPLUGIN-B"


@requirement("10-1", plugins=(LifecyclePlugin(),))
async def plugin_invocation_lifecycle(event: Any, ctx: DurableContext) -> Any:
    def greeting(name: Any) -> str:
        log(ctx, f"Greeting step running for: {name}")
        return greet(name)

    return await ctx.step(greeting, event)


@requirement("10-2", plugins=(OperationPlugin(),))
async def plugin_operation_lifecycle(event: Any, ctx: DurableContext) -> Any:
    return await ctx.step(greet, event)


@requirement("10-3", plugins=(AttemptPlugin(),))
async def plugin_attempt_hooks(event: Any, ctx: DurableContext) -> Any:
    def unreliable() -> str:
        if runs(ctx, "unreliable") == 1:
            raise RuntimeError("Attempt 1 failed")
        return "Operation succeeded"

    return await ctx.step(unreliable, config=fixed_retry(3))


@requirement("10-4", plugins=(FaultyPlugin(),))
async def plugin_error_isolation(event: Any, ctx: DurableContext) -> Any:
    return await ctx.step(greet, event)


@requirement("10-5", plugins=(PluginA(), PluginB()))
async def plugin_multiple(event: Any, ctx: DurableContext) -> Any:
    return await ctx.step(greet, event)


@requirement("10-6", plugins=(LifecyclePlugin(),))
async def plugin_first_invocation_flag(event: Any, ctx: DurableContext) -> Any:
    await ctx.wait(Duration.from_seconds(2))
    return None


@requirement("10-7", plugins=(LifecyclePlugin(),))
async def plugin_terminal_failure(event: Any, ctx: DurableContext) -> Any:
    def failing() -> Any:
        raise RuntimeError("this step always fails")

    return await ctx.step(failing, config=NO_RETRY)
