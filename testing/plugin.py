"""The pytest plugin of alarmtop (entry point `pytest11`: `alarmtop`).

pytest loads it in every run of an environment where alarmtop is installed, so at
load it imports pytest alone (and pytest-asyncio when that is installed): the
runtime is imported by the fixtures that use it. Turn it off with `-p no:alarmtop`.

Fixtures (see `alarmtop.testing` for the whole story):

* `virtual_clock`: a fresh `VirtualClock` at `START_MS`.
* `alarmtop_data_dir`: the temporary data dir the runtimes use (override it in a
  conftest to put them elsewhere).
* `alarmtop_runtime_factory`: `await make(*classes_and_handlers, policies=None,
  **runtime_options)` starts a `Runtime` on the test's clock and data dir.
* `alarmtop_runtime`: one started runtime, built from the `alarmtop` markers
  (`@pytest.mark.alarmtop(register=[MyObject, my_handler], **runtime_options)`).
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import pytest

if TYPE_CHECKING:
    from alarmtop.core import RetryPolicy, Runtime, VirtualClock

try:
    import pytest_asyncio
except ImportError:  # the async fixtures then fail saying what to install
    pytest_asyncio = None  # type: ignore[assignment]

F = TypeVar("F", bound=Callable[..., Any])
RuntimeFactory = Callable[..., Awaitable["Runtime"]]

MARKER = "alarmtop"
NEEDS_ASYNCIO = ("{name} is an async fixture: it needs pytest-asyncio "
                 "(pip install 'alarmtop[testing]', or pip install pytest-asyncio)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(register=[...], **runtime_options): what the "
        "alarmtop_runtime fixture registers (DurableObject classes, @durable_execution "
        "handlers) and passes to Runtime (policies={'Class': RetryPolicy(...)} too)")


def _async_fixture(fn: F) -> F:
    """A pytest-asyncio fixture (it then works in auto and in strict mode), or, without
    pytest-asyncio, a fixture that fails saying what to install."""
    if pytest_asyncio is not None:
        return cast(F, pytest_asyncio.fixture(fn))

    def missing(request: pytest.FixtureRequest) -> None:
        pytest.fail(NEEDS_ASYNCIO.format(name=fn.__name__), pytrace=False)

    missing.__name__ = fn.__name__
    missing.__doc__ = fn.__doc__
    return cast(F, pytest.fixture(missing))


@pytest.fixture
def virtual_clock() -> VirtualClock:
    """A fresh `VirtualClock` at `alarmtop.testing.START_MS`: time moves only when the
    test says (`await virtual_clock.advance(seconds)`)."""
    from alarmtop.core import VirtualClock
    from alarmtop.testing import START_MS
    return VirtualClock(start_ms=START_MS)


@pytest.fixture
def alarmtop_data_dir(tmp_path: Path) -> Path:
    """Where the test's runtimes keep their data: a folder of the test's own."""
    return tmp_path / "alarmtop-data"


def _register(rt: Runtime, things: tuple[Any, ...],
              policies: dict[Any, RetryPolicy]) -> None:
    from alarmtop.core import DurableObject
    from alarmtop.core.durable import DurableFunction

    names = {k if isinstance(k, str) else k.__name__: v for k, v in policies.items()}
    for thing in things:
        if isinstance(thing, type) and issubclass(thing, DurableObject):
            rt.register(thing, retry_policy=names.get(thing.__name__))
        elif isinstance(thing, DurableFunction):
            rt.register_execution(thing)
        else:
            raise TypeError(f"alarmtop runtimes register DurableObject subclasses and "
                            f"@durable_execution handlers, not {thing!r}")


@_async_fixture
async def alarmtop_runtime_factory(virtual_clock: VirtualClock, alarmtop_data_dir: Path
                                   ) -> AsyncIterator[RuntimeFactory]:
    """`await make(*classes_and_handlers, policies=None, **runtime_options)`: a started
    `Runtime` on the test's `virtual_clock` and `alarmtop_data_dir` (both overridable
    in `runtime_options`), with the classes and handlers registered (`policies` maps a
    class or its name to its `RetryPolicy`). Runtimes made in one test share the data
    dir, as a restart would; all are stopped after the test, last made first."""
    from alarmtop.core import Runtime

    started: list[Runtime] = []

    async def make(*things: Any, policies: dict[Any, RetryPolicy] | None = None,
                   **options: Any) -> Runtime:
        options.setdefault("clock", virtual_clock)
        rt = Runtime(options.pop("data_dir", alarmtop_data_dir), **options)
        _register(rt, things, policies or {})
        await rt.start()
        started.append(rt)
        return rt

    yield make
    for rt in reversed(started):
        await rt.stop()
    # Collect now, so that a database left open is reported against this test.
    gc.collect()


class Marked(Protocol):
    def iter_markers(self, name: str | None = None) -> Iterator[pytest.Mark]: ...


def marked(node: Marked) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """What the `alarmtop` markers of a test ask for: what every marker registers
    (module, class and test), and options where the closest marker wins."""
    things: list[Any] = []
    options: dict[str, Any] = {}
    for mark in node.iter_markers(MARKER):  # closest first
        if mark.args:
            # pytest takes a lone class given to a marker for the thing it decorates.
            raise TypeError("@pytest.mark.alarmtop takes keywords: "
                            "@pytest.mark.alarmtop(register=[MyObject, my_handler], ...)")
        register = mark.kwargs.get("register", ())
        for thing in register if isinstance(register, (list, tuple)) else (register,):
            if thing not in things:
                things.append(thing)
        for key, value in mark.kwargs.items():
            if key != "register":
                options.setdefault(key, value)
    return tuple(things), options


@_async_fixture
async def alarmtop_runtime(request: pytest.FixtureRequest,
                           alarmtop_runtime_factory: RuntimeFactory) -> Runtime:
    """A started `Runtime` on `virtual_clock` and a data dir of the test's own, stopped
    after the test; `@pytest.mark.alarmtop(register=[...], **options)` says what
    it registers and how it is built. More can be registered after start."""
    things, options = marked(request.node)
    return await alarmtop_runtime_factory(*things, **options)
