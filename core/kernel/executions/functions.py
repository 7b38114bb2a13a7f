"""Durable handlers: `@durable_execution`, and the versions executions are pinned to."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:
    from alarmtop.core.kernel.executions.context import DurableContext

Handler = Callable[[Any, "DurableContext"], Awaitable[Any]]


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
    hook plugins of this handler alone (as in the AWS SDK; see `alarmtop.core.hooks`):
    they hear its invocation, operation and step-attempt hooks, after the runtime's.
    """
    own = tuple(plugins)

    def wrap(f: Handler) -> DurableFunction:
        return DurableFunction(f, name or f.__name__, str(version), timeout, own)
    return wrap(fn) if fn is not None else wrap


def version_key(version: str) -> tuple[int, ...] | tuple[float, str]:
    try:
        return tuple(int(p) for p in version.split("."))
    except ValueError:
        return (float("inf"), version)
