"""Calls to objects: a `Stub` per object, the checks a call passes, and where it runs.

A call is one event of its object (RPC; arguments and results are copied as JSON).
On a fleet the object's shard may be held by another node: the call is routed
there (`Routing`, the fleet's node), told what the plugins carry for its event.
Socket events arrive here too, on the node that holds the object.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

from alarmtop.core.kernel.hooks import INCOMING, Hooks
from alarmtop.core.kernel.objects.classes import ObjectClasses
from alarmtop.core.kernel.objects.durable_object import DurableObject
from alarmtop.core.kernel.objects.host import Call, ObjectHost
from alarmtop.core.kernel.objects.resident import EventKind
from alarmtop.core.kernel.run_state import RunState
from alarmtop.core.model.errors import HandlerAborted, UnknownMethod
from alarmtop.core.model.object_names import check_object_name
from alarmtop.core.model.serialization import json_copy

T = TypeVar("T")
ObjectKey = tuple[str, str]
# Methods the runtime calls itself; RPC cannot reach them.
RESERVED = frozenset({"alarm", "web_socket_connect", "web_socket_message", "web_socket_close",
                      "web_socket_error"})


class Routing(Protocol):
    """Where an object's events run: here, or on the node holding its shard."""

    async def route(self, key: ObjectKey, here: Callable[[], Awaitable[Any]], op: str,
                    **fields: Any) -> Any:
        """`here()` when this node holds the object, else `op` with `fields` on its owner."""
        ...

    async def route_with(self, key: ObjectKey, here: Callable[[], Awaitable[Any]],
                         there: Callable[[Any], Awaitable[Any]]) -> Any:
        """`here()`, or `there(owner)` with a client of the node that holds the object."""
        ...


class Stub:
    """A handle on one object; attribute access gives async RPC callables."""

    __slots__ = ("_calls", "_class_name", "_name")

    def __init__(self, calls: ObjectCalls, class_name: str, name: str) -> None:
        self._calls = calls
        self._class_name = class_name
        self._name = name

    @property
    def id(self) -> str:
        return self._name

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method.startswith("_"):
            raise AttributeError(method)
        calls, class_name, name = self._calls, self._class_name, self._name

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await calls.call(class_name, name, method, args, kwargs)

        call.__name__ = method
        return call

    def __repr__(self) -> str:
        return f"<Stub {self._class_name}/{self._name}>"


class ObjectCalls:
    """Calls and socket events to objects: checked, routed, run as events."""

    def __init__(self, classes: ObjectClasses, host: ObjectHost, hooks: Hooks,
                 routing: Routing, state: RunState) -> None:
        self._classes = classes
        self._host = host
        self._hooks = hooks
        self._routing = routing
        self._state = state
        # One event kind per method, made once: a stuck object's callers are told what
        # holds it ("busy handling a call to grant()").
        self._kinds: dict[str, EventKind] = {}

    def get(self, cls: type[DurableObject] | str, name: str) -> Stub:
        """A stub for the object `name` of class `cls` (a class or its registered name)."""
        return Stub(self, self._classes.name_of(cls), check_object_name(name))

    def check_method(self, class_name: str, method: str) -> None:
        """Refuse a method RPC cannot reach: reserved, missing, or not `async def`."""
        fn = getattr(self._classes.by_name[class_name], method, None)
        if method in RESERVED or fn is None or not inspect.iscoroutinefunction(fn):
            raise UnknownMethod(class_name, method)

    async def call(self, class_name: str, name: str, method: str, args: tuple[Any, ...],
                   kwargs: dict[str, Any]) -> Any:
        """A call through a stub: where the object runs, as one of its events."""
        self._state.check()
        self.check_method(class_name, method)
        args = tuple(json_copy(list(args), f"arguments of {class_name}.{method}"))
        kwargs = json_copy(kwargs, f"keyword arguments of {class_name}.{method}")
        # Another node may hold the object's shard: then it runs the call, told what the
        # plugins carry (say, the caller's trace) for its event.
        extra: dict[str, Any] = {}
        if self._hooks.plugins:
            carried = self._hooks.propagation()
            if carried is not None:
                extra["propagation"] = carried
        return await self._routing.route(
            (class_name, name), lambda: self.call_here(class_name, name, method, args, kwargs),
            "call", cls=class_name, name=name, method=method, args=list(args), kwargs=kwargs,
            **extra)

    async def call_here(self, class_name: str, name: str, method: str,
                        args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run the call on this node (it holds the object)."""
        async def body(instance: DurableObject) -> Any:
            return await getattr(instance, method)(*args, **kwargs)

        value, error, _ = await self._host.run_event(
            (class_name, name), body, self._kind(method, "a call to {}()", class_name))
        if error is not None:
            raise _raisable(error, class_name, name, method)  # its writes are kept
        return json_copy(value, f"the result of {class_name}.{method}")

    async def serve(self, request: dict[str, Any],
                    held: Callable[[ObjectKey], Awaitable[None]]) -> Any:
        """A call another node forwarded here; `held(key)` refuses it unless this node
        holds the object's shard (the caller then asks again)."""
        cls, name, method = str(request["cls"]), str(request["name"]), str(request["method"])
        self._classes.name_of(cls)
        self.check_method(cls, method)
        await held((cls, check_object_name(name)))
        carried = request.get("propagation")
        if isinstance(carried, dict) and self._hooks.plugins:
            INCOMING.set({str(k): str(v) for k, v in carried.items()})
        return await self.call_here(cls, name, method, tuple(request.get("args") or ()),
                                    dict(request.get("kwargs") or {}))

    async def socket_route(self, class_name: str, name: str,
                           there: Callable[[Any], Coroutine[Any, Any, T]]) -> T | None:
        """Where an object socket's events run: None when on this node, else what
        `there(owner)` answered (it opens the socket on the node holding the object's
        shard, `fleet.sockets`). Asked again, as calls are, while nothing ran: the
        owner was down or the shard moved."""
        self._state.check()
        key = (self._classes.name_of(class_name), check_object_name(name))

        async def here() -> None:
            return None
        result: T | None = await self._routing.route_with(key, here, there)
        return result

    async def socket_event(self, class_name: str, name: str, method: str,
                           *args: Any) -> None:
        """Deliver a WebSocket event to an object (waking it), like any other event."""
        self._state.check()
        class_name = self._classes.name_of(class_name)

        async def body(instance: DurableObject) -> Any:
            return await getattr(instance, method)(*args)

        _, error, _ = await self._host.run_event((class_name, check_object_name(name)), body,
                                                 self._kind(method, "its {}"))
        if error is not None:
            raise _raisable(error, class_name, name, method)

    def _kind(self, method: str, what: str, class_name: str | None = None) -> EventKind:
        cls = None if class_name is None else self._classes.by_name.get(class_name)
        interrupts = cls is not None and method in getattr(cls, "interrupts_alarm_for", ())
        kind = self._kinds.get(f"{method}!" if interrupts else method)
        if kind is None:
            event = "socket" if method in RESERVED else "call"
            kind = Call("handling " + what.format(method), method, event, interrupts)
            self._kinds[f"{method}!" if interrupts else method] = kind
        return kind


def _raisable(error: BaseException, class_name: str, name: str, method: str) -> BaseException:
    """What the caller gets: the method's own exception, or, for one that is not an
    `Exception` (SystemExit...), `HandlerAborted`: re-raised as it is, it would end the
    caller's task, or the process."""
    if isinstance(error, Exception):
        return error
    aborted = HandlerAborted(class_name, name, method, error)
    aborted.__cause__ = error
    return aborted
