"""Bad input is refused with a typed error that says how to fix it, and changes nothing."""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from alarmtop.core import DurableObject, Runtime, VirtualClock
from alarmtop.core.model.errors import (
    AlarmtopError,
    BadCronExpression,
    InvalidAlarmTime,
    InvalidArgument,
    InvalidFault,
    InvalidObjectName,
    NoAlarm,
    NotSerializable,
    RuntimeNotRunning,
    UnknownClass,
    UnknownMethod,
)
from tests.conftest import START_MS, RuntimeFactory


class Target(DurableObject):
    async def echo(self, value: Any) -> Any:
        await self.ctx.storage.put("last", value)
        return value

    async def last(self) -> Any:
        return await self.ctx.storage.get("last")

    async def arm(self, at_ms: int) -> None:
        await self.ctx.storage.set_alarm(at_ms)

    async def bad_alarm(self, kind: str) -> None:
        values: dict[str, Any] = {
            "string": "tomorrow",
            "none": None,
            "naive": datetime(2027, 1, 16, 8, 0),
            "nan": float("nan"),
            "inf": math.inf,
            "negative": -1,
            "bool": True,
        }
        await self.ctx.storage.set_alarm(values[kind])

    async def get_alarm(self) -> int | None:
        return await self.ctx.storage.get_alarm()

    async def store_set(self) -> None:
        await self.ctx.storage.put("s", {1, 2})

    def sync_method(self) -> int:
        return 1

    async def _private(self) -> int:
        return 1

    async def alarm(self, info: Any) -> None:
        await self.ctx.storage.put("fired", self.ctx.now_ms())


class Unregistered(DurableObject):
    async def hello(self) -> str:
        return "hi"


def test_error_tree() -> None:
    """Input errors are ValueErrors, lookups are LookupErrors, all are AlarmtopErrors."""
    for cls in (NotSerializable, InvalidAlarmTime, InvalidObjectName, BadCronExpression,
                InvalidFault):
        assert issubclass(cls, InvalidArgument) and issubclass(cls, ValueError)
    for cls in (UnknownClass, UnknownMethod, NoAlarm):
        assert issubclass(cls, LookupError) and issubclass(cls, AlarmtopError)


async def test_unregistered_class(make_runtime: RuntimeFactory) -> None:
    """get() of an unregistered class (class or name) says to register it and lists the known."""
    rt = await make_runtime(Target)
    for cls in (Unregistered, "Unregistered", "target"):
        with pytest.raises(UnknownClass) as info:
            rt.get(cls, "x")  # type: ignore[arg-type]
        message = str(info.value)
        assert "runtime.register()" in message and "registered: Target" in message
    assert info.value.class_name == "target"
    with pytest.raises(UnknownClass, match="register"):
        await rt.alarm(Unregistered, "x")
    with pytest.raises(UnknownClass, match="register"):
        await rt.rearm("Nope", "x")


@pytest.mark.parametrize(("name", "fragment"), [
    ("", "non-empty"),
    ("x" * 300, "the limit is 256"),
    ("a\x00b", "control characters"),
    ("line\nbreak", "control characters"),
    (42, "non-empty strings"),
])
async def test_bad_object_names(make_runtime: RuntimeFactory, name: Any, fragment: str) -> None:
    """Empty, over-long, control-character and non-string names are refused."""
    rt = await make_runtime(Target)
    with pytest.raises(InvalidObjectName, match=fragment):
        rt.get(Target, name)
    assert rt.resident_objects() == []


@pytest.mark.sqlite_only  # reads the SQLite files themselves
async def test_names_with_path_characters_stay_apart(make_runtime: RuntimeFactory) -> None:
    """'/', '..' and '%' in names neither escape the data dir nor collide."""
    rt = await make_runtime(Target)
    names = ["../x", "..%2Fx", "a/b", "a%2Fb", ".", "..", "x"]
    for i, name in enumerate(names):
        await rt.get(Target, name).echo(i)
    for i, name in enumerate(names):
        assert await rt.get(Target, name).last() == i
    objects = rt.data_dir / "objects" / "Target"
    assert len(list(objects.glob("*.sqlite"))) == len(names)
    assert {p.name for p in rt.data_dir.iterdir()} - {"objects"} <= {
        "runtime.sqlite", "runtime.sqlite-wal", "runtime.sqlite-shm", ".alarmtop",
        ".alarmtop.lock"}
    assert [p.name for p in rt.data_dir.parent.iterdir()] == ["data"]


@pytest.mark.parametrize("name", ["n" * 256, "/" * 100, "é" * 50],
                         ids=["256-plain", "100-slashes", "50-non-ascii"])
async def test_every_valid_name_works(make_runtime: RuntimeFactory, name: str) -> None:
    """Any name that passes validation gives a working object."""
    rt = await make_runtime(Target)
    assert await rt.get(Target, name).echo(1) == 1
    assert await rt.get(Target, name).last() == 1


async def test_unknown_and_private_methods(make_runtime: RuntimeFactory) -> None:
    """Only public async methods are reachable; the runtime's own hooks are not."""
    rt = await make_runtime(Target)
    stub = rt.get(Target, "t")
    for method in ("nope", "alarm", "sync_method"):
        with pytest.raises(UnknownMethod, match="no public method") as info:
            await getattr(stub, method)()
        assert info.value.method == method
    with pytest.raises(AttributeError):
        await stub._private()
    with pytest.raises(AttributeError):
        stub.__secret  # noqa: B018
    assert rt.resident_objects() == []  # nothing was woken


@pytest.mark.parametrize("bad", [{1, 2}, object(), float("nan"), {"k": b"bytes"}])
async def test_non_json_arguments(make_runtime: RuntimeFactory, bad: Any) -> None:
    """Non-JSON RPC arguments are refused before the object wakes; nothing changes."""
    rt = await make_runtime(Target)
    stub = rt.get(Target, "t")
    await stub.echo("before")
    await rt.stop()  # so that the object is certainly not resident
    rt = await make_runtime(Target)
    stub = rt.get(Target, "t")
    sub = rt.events.subscribe("object.")
    with pytest.raises(NotSerializable, match="JSON-serialisable") as info:
        await stub.echo(bad)
    assert "Target.echo" in str(info.value) and "pass plain dicts" in str(info.value)
    assert sub.drain() == []
    assert rt.resident_objects() == []
    assert await stub.last() == "before"


async def test_non_json_storage_value(make_runtime: RuntimeFactory) -> None:
    """storage.put() of a non-JSON value raises NotSerializable naming the key."""
    rt = await make_runtime(Target)
    with pytest.raises(NotSerializable, match="storage value for 's'"):
        await rt.get(Target, "t").store_set()


@pytest.mark.parametrize(("kind", "fragment"), [
    ("string", "not str 'tomorrow'"),
    ("none", "not NoneType"),
    ("naive", "naive datetime"),
    ("nan", "between 0 and 2\\*\\*53"),
    ("inf", "between 0 and 2\\*\\*53"),
    ("negative", "between 0 and 2\\*\\*53"),
    ("bool", "not bool"),
])
async def test_invalid_alarm_times(make_runtime: RuntimeFactory, clock: VirtualClock,
                                   kind: str, fragment: str) -> None:
    """set_alarm() refuses what is not a time; the alarm set before stays and fires."""
    rt = await make_runtime(Target)
    stub = rt.get(Target, "t")
    await stub.arm(START_MS + 1000)
    with pytest.raises(InvalidAlarmTime, match=fragment):
        await stub.bad_alarm(kind)
    assert await stub.get_alarm() == START_MS + 1000
    status = await rt.alarm(Target, "t")
    assert status is not None and status.scheduled_ms == START_MS + 1000
    await clock.advance(1)
    assert await rt.alarm(Target, "t") is None


async def test_bad_cron_expressions(make_runtime: RuntimeFactory) -> None:
    """Unparseable cron expressions are refused and say what the five fields are."""
    rt = await make_runtime(Target)
    for expression in ("61 * * * *", "not cron", "* * * *", "* * * * * *", "*/0 * * * *"):
        with pytest.raises(BadCronExpression, match="five fields") as info:
            rt.cron(expression, lambda: None)
        assert info.value.expression == expression
    with pytest.raises(TypeError, match="callable"):
        rt.cron("* * * * *", "not a function")  # type: ignore[arg-type]


async def test_rearm_without_alarm(make_runtime: RuntimeFactory) -> None:
    """Operator actions on an object that has no alarm raise NoAlarm saying how one is set."""
    rt = await make_runtime(Target)
    for action in (rt.rearm, rt.fire_now, rt.clear_dead_letter):
        with pytest.raises(NoAlarm, match="set_alarm") as info:
            await action(Target, "t")
        assert (info.value.class_name, info.value.object_name) == ("Target", "t")
    assert await rt.alarms() == []


async def test_clear_dead_letter_of_a_live_alarm(make_runtime: RuntimeFactory) -> None:
    """clear_dead_letter() on a pending alarm refuses and leaves it alone."""
    rt = await make_runtime(Target)
    await rt.get(Target, "t").arm(START_MS + 1000)
    with pytest.raises(InvalidArgument, match="not a dead letter"):
        await rt.clear_dead_letter(Target, "t")
    status = await rt.alarm(Target, "t")
    assert status is not None and status.state == "pending"


@pytest.mark.parametrize(("args", "kwargs", "fragment"), [
    (("Target/t", "alarm_explode"), {}, "unknown fault kind 'alarm_explode'; kinds: alarm_raise"),
    (("Target/t", "alarm_delay"), {}, "seconds=5"),
    (("Target/t", "alarm_delay"), {"seconds": 0}, "seconds > 0"),
    (("Target/t", "alarm_raise"), {"times": 0}, "times must be a whole number >= 1"),
    (("Target/t", "alarm_raise"), {"times": 1.5}, "times must be a whole number"),
    (("Target", "alarm_raise"), {}, "'Class/name'"),
    (("", "alarm_raise"), {}, "needs a target"),
    (("e1", "step_raise"), {}, "step="),
    (("e1", "step_crash"), {"step": "s", "point": "D"}, "point 'A'"),
])
async def test_invalid_faults(make_runtime: RuntimeFactory, args: tuple[str, str],
                              kwargs: dict[str, Any], fragment: str) -> None:
    """Bad fault injections raise InvalidFault and leave the fault list unchanged."""
    rt = await make_runtime(Target)
    fid = rt.faults.inject("Target/t", "alarm_raise", times=2)
    before = rt.faults.list()
    sub = rt.events.subscribe("fault.")
    with pytest.raises(InvalidFault) as info:
        rt.faults.inject(*args, **kwargs)
    assert fragment in str(info.value)
    assert rt.faults.list() == before
    assert [f["id"] for f in before] == [fid]
    assert sub.drain() == []


async def test_runtime_not_running(tmp_path: Path, clock: VirtualClock) -> None:
    """Calls before start() and after stop() raise RuntimeNotRunning saying to start it."""
    rt = Runtime(tmp_path / "data", clock=clock)
    rt.register(Target)
    stub = rt.get(Target, "t")  # a stub is only an address
    with pytest.raises(RuntimeNotRunning, match=r"await runtime.start\(\)"):
        await stub.echo(1)
    for call in (rt.alarms(), rt.dead_letters(), rt.alarm(Target, "t"), rt.rearm(Target, "t"),
                 rt.sweep(), rt.alarm_counts()):
        with pytest.raises(RuntimeNotRunning, match="start"):
            await call
    assert not (tmp_path / "data").exists()  # nothing was created

    await rt.start()
    assert await stub.echo(1) == 1
    await rt.stop()
    with pytest.raises(RuntimeNotRunning):
        await stub.echo(2)
    with pytest.raises(RuntimeNotRunning):
        await rt.alarms()


async def test_register_refuses_non_objects(make_runtime: RuntimeFactory) -> None:
    """register() takes DurableObject subclasses only, one class per name."""
    rt = await make_runtime(Target)
    with pytest.raises(InvalidArgument, match="DurableObject subclass"):
        rt.register(dict)  # type: ignore[arg-type]

    class Target2(DurableObject):
        pass

    Target2.__name__ = "Target"
    with pytest.raises(InvalidArgument, match="already registered"):
        rt.register(Target2)
    assert rt.register(Target) is Target  # registering the same class again is fine
