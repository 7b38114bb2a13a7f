"""Lambda-style functions registered with `rt.register_lambda`: the handlers the AWS
SDK's executions run, and how each is invoked.

A function is durable when its handler is the AWS SDK's `@durable_execution`
wrapper (or says so with `durable=True`); otherwise it is a plain function, which a
chained invoke calls once, as Lambda calls a function that is not durable.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from alarmtop.core.model.alarm_policy import RetryPolicy
from alarmtop.core.model.aws_arn import LATEST, check_function_name, parse_function_ref
from alarmtop.core.model.aws_errors import ResourceNotFoundException
from alarmtop.core.model.execution_errors import ValidationError

ISOLATIONS = ("thread", "process")
# A failed invocation runs again 1 s later, doubling up to a minute; after this many
# in a row the execution is a dead letter for an operator to re-arm.
INVOCATION_RETRIES = RetryPolicy(max_retries=5, initial_delay_s=1.0, max_delay_s=60.0)
_SDK_WRAPPER = "aws_durable_execution_sdk_python/execution.py"


@dataclass(frozen=True)
class LambdaFunction:
    """One registered function (see `register_lambda`)."""

    name: str
    handler: Callable[..., Any] | None  # None until a "module:attr" is first loaded
    target: str | None  # the "module:attr" it was registered as, if any
    isolation: str = "thread"
    endpoint: str | None = None
    durable: bool = True
    version: str = LATEST
    timeout_s: int | None = None  # the execution timeout (None: the limit)
    retries: RetryPolicy = INVOCATION_RETRIES
    paths: tuple[str, ...] = ()  # where a worker process imports `target` from

    def load(self) -> Callable[..., Any]:
        """The handler, importing a "module:attr" target on first use."""
        if self.handler is not None:
            return self.handler
        assert self.target is not None
        return load_target(self.target)


def load_target(target: str) -> Callable[..., Any]:
    module, _, attr = target.partition(":")
    if not module or not attr:
        raise ValidationError(f"a handler given as text is 'module:attr', not {target!r}")
    try:
        value: Any = importlib.import_module(module)
        for part in attr.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError) as exc:
        raise ValidationError(f"cannot load the handler {target!r}: {exc}") from exc
    if not callable(value):
        raise ValidationError(f"the handler {target!r} is not callable")
    return value  # type: ignore[no-any-return]


def target_of(handler: Any) -> str:
    """The "module:attr" a worker process imports a handler from."""
    if isinstance(handler, str):
        name, sep, attr = handler.partition(":")
        if not name or not sep or not attr:
            raise ValidationError(f"a handler given as text is 'module:attr', not {handler!r}")
        return handler
    module: str | None = getattr(handler, "__module__", None)
    qualname: str = getattr(handler, "__qualname__", "")
    if not module or not qualname or "<" in qualname or module == "__main__":
        raise ValidationError("isolation='process' imports the handler in its worker "
                              "processes: give it as 'module:attr', or register a handler "
                              "defined at the top of an importable module")
    return f"{module}:{qualname}"


def check_endpoint(url: Any) -> str:
    """An endpoint as `register_lambda` takes it: http(s)://host[:port][/base], no
    query; refuses anything else."""
    if not isinstance(url, str):
        raise ValidationError(f"endpoint is an http:// or https:// URL, not {url!r}")
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError:
        raise ValidationError(f"endpoint {url!r}: the port is not a number") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or \
            parts.fragment or parts.username:
        raise ValidationError(f"endpoint is http(s)://HOST[:PORT][/PATH] (the Lambda runtime "
                              f"emulator's address, e.g. http://127.0.0.1:9000), not {url!r}")
    return url.rstrip("/")


def is_sdk_handler(fn: Any) -> bool:
    """Whether `fn` is the AWS SDK's `@durable_execution` wrapper."""
    code = getattr(fn, "__code__", None)
    return code is not None and code.co_filename.replace("\\", "/").endswith(_SDK_WRAPPER)


class LambdaFunctions:
    """The registry: by name, one version each (the last registration wins)."""

    def __init__(self) -> None:
        self._by_name: dict[str, LambdaFunction] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Any:
        return iter(sorted(self._by_name))

    def add(self, name: str, handler: Any, *, isolation: str = "thread",
            endpoint: str | None = None, durable: bool | None = None,
            version: str | None = None, timeout_s: int | None = None,
            retries: RetryPolicy | None = None,
            paths: tuple[str, ...] = ()) -> LambdaFunction:
        check_function_name(name)
        if isolation not in ISOLATIONS:
            raise ValidationError(f"isolation is 'thread' or 'process', not {isolation!r}")
        if endpoint is not None:
            endpoint = check_endpoint(endpoint)
            if handler is not None:
                raise ValidationError("register_lambda: give the handler or endpoint=, not "
                                      "both (an endpoint's handler runs behind it)")
            if isolation != "thread":
                raise ValidationError("register_lambda: isolation= is for handlers this "
                                      "runtime runs; an endpoint's runs where it is served")
        if timeout_s is not None and (not isinstance(timeout_s, int) or timeout_s < 1):
            raise ValidationError(f"timeout is whole seconds >= 1, not {timeout_s!r}")
        fn: Any
        target: str | None
        if endpoint is not None:  # the handler runs behind it: durable unless told
            target, fn = None, None
            is_durable = True if durable is None else bool(durable)
        elif isolation == "process":
            # Imported by each worker process, never here: the handler may end its process.
            target, fn = target_of(handler), None
            is_durable = True if durable is None else bool(durable)
        else:
            target = handler if isinstance(handler, str) else None
            fn = load_target(handler) if target is not None else handler
            if not callable(fn):
                raise ValidationError("register_lambda() takes the handler (a callable, or "
                                      "'module:attr'), not " + repr(handler)[:80])
            is_durable = is_sdk_handler(fn) if durable is None else bool(durable)
        entry = LambdaFunction(name, fn, target, isolation, endpoint, is_durable,
                               version or LATEST, timeout_s, retries or INVOCATION_RETRIES,
                               tuple(str(p) for p in paths))
        self._by_name[name] = entry
        return entry

    def get(self, name: str) -> LambdaFunction:
        fn = self._by_name.get(name)
        if fn is None:
            raise ResourceNotFoundException(
                f"Function not found: {name} (registered: {', '.join(self) or 'none'}); "
                "register it with runtime.register_lambda()")
        return fn

    def resolve(self, ref: str) -> LambdaFunction:
        """The function a FunctionName names (a name, `name:qualifier` or an ARN)."""
        name, qualifier = parse_function_ref(ref)
        fn = self.get(name)
        if qualifier not in (None, LATEST, fn.version):
            raise ResourceNotFoundException(
                f"Function not found: {name}:{qualifier} (registered version: {fn.version})")
        return fn
