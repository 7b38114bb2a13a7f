"""Lifecycle hooks: what plugins hear of object events and alarm attempts, and that a
plugin that raises changes nothing."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from alarmtop.core import AlarmInfo, DurableObject, RetryPolicy, VirtualClock
from alarmtop.core.kernel.hooks import HOOKS, NO_HOOKS, FailureLog, Hooks, Plugin
from alarmtop.core.model import hook_info
from tests.conftest import START_MS, RuntimeFactory


class Recorder(Plugin):
    """Every hook it hears, in order, as (hook name, info); `order` is shared between
    recorders to see the order of plugins."""

    def __init__(self, label: str = "", order: list[str] | None = None) -> None:
        self.heard: list[tuple[str, Any]] = []
        self.label, self.order = label, order

    def named(self, *names: str) -> list[Any]:
        return [info for name, info in self.heard if name in names]


class Raises(Plugin):
    """Every hook raises."""

    def __init__(self) -> None:
        self.calls = 0


def _recording(name: str) -> Any:
    def hook(self: Recorder, info: Any) -> None:
        self.heard.append((name, info))
        if self.order is not None:
            self.order.append(self.label)
    hook.__name__ = name
    return hook


def _raising(name: str) -> Any:
    def hook(self: Raises, info: Any) -> None:
        self.calls += 1
        raise RuntimeError(f"plugin bug in {name}")
    hook.__name__ = name
    return hook


for _name in HOOKS:
    setattr(Recorder, _name, _recording(_name))
    setattr(Raises, _name, _raising(_name))


class Defines(Plugin):
    def on_object_event_start(self, info: hook_info.ObjectEventInfo) -> None:
        pass


class Counter(DurableObject):
    async def add(self, n: int) -> int:
        total = int(await self.ctx.storage.get("n") or 0) + n
        await self.ctx.storage.put("n", total)
        return total

    async def boom(self) -> None:
        await self.ctx.storage.put("tried", True)
        raise ValueError("no")

    async def arm(self, at_ms: int) -> None:
        await self.ctx.storage.set_alarm(at_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        if await self.ctx.storage.get("fail"):
            raise RuntimeError("flaky")
        await self.ctx.storage.put("fired", info.retry_count)

    async def set_fail(self, fail: bool) -> None:
        await self.ctx.storage.put("fail", fail)

    async def fired(self) -> int | None:
        value = await self.ctx.storage.get("fired")
        return None if value is None else int(value)


# -- the hooks table --------------------------------------------------------------------

def test_no_plugin_means_every_hook_tuple_is_empty() -> None:
    assert all(getattr(NO_HOOKS, name) == () for name in HOOKS)
    assert not NO_HOOKS.active and NO_HOOKS.propagation() is None


def test_a_plugin_is_listed_only_under_the_hooks_it_defines() -> None:
    p = Defines()
    hooks = Hooks([p])
    assert [name for name in HOOKS if getattr(hooks, name)] == ["on_object_event_start"]
    assert hooks.on_object_event_start[0].__self__ is p  # type: ignore[attr-defined]


def test_plugins_are_called_in_order_and_handler_plugins_come_after() -> None:
    order: list[str] = []
    a, b, c = Recorder("a", order), Recorder("b", order), Recorder("c", order)
    hooks = Hooks([a, b])
    hooks.fire(hooks.on_command_start, "x")
    combined = hooks.with_plugins([c])
    combined.fire(combined.on_command_start, "y")
    assert order == ["a", "b", "a", "b", "c"]
    assert hooks.with_plugins([]) is hooks
    version = hooks.version
    hooks.add(c)
    assert hooks.version == version + 1 and len(hooks.on_command_start) == 3


def test_a_raising_hook_is_logged_and_the_next_plugin_still_runs(
        caplog: pytest.LogCaptureFixture) -> None:
    after = Recorder()
    hooks = Hooks([Raises(), after])
    with caplog.at_level(logging.WARNING, "alarmtop.plugins"):
        for _ in range(3):
            hooks.fire(hooks.on_command_end, "info")
    assert len(after.heard) == 3
    lines = [r for r in caplog.records if r.name == "alarmtop.plugins"]
    assert len(lines) == 1  # then quiet for a minute
    assert "Raises raised in on_command_end: RuntimeError" in lines[0].getMessage()
    assert lines[0].exc_info is not None


def test_failure_log_logs_the_first_then_one_line_per_interval_with_the_count() -> None:
    fl = FailureLog(every_s=60)
    key = ("P", "on_x")
    assert fl.decide(key, 0.0) == (True, 0)
    assert fl.decide(key, 10.0) == (False, 0)
    assert fl.decide(key, 59.0) == (False, 0)
    assert fl.decide(key, 60.0) == (True, 2)
    assert fl.decide(("P", "on_y"), 61.0) == (True, 0)  # each hook on its own
    assert fl.count == 5


def test_propagation_merges_what_the_plugins_carry() -> None:
    class Carries(Plugin):
        def __init__(self, carrier: dict[str, str] | None) -> None:
            self.carrier = carrier

        def propagation_metadata(self) -> dict[str, str] | None:
            if self.carrier is None:
                raise RuntimeError("broken")
            return self.carrier

    hooks = Hooks([Carries({"a": "1"}), Carries(None), Carries({"b": "2"})])
    assert hooks.propagation() == {"a": "1", "b": "2"}
    assert Hooks([Carries({})]).propagation() is None


# -- object events ----------------------------------------------------------------------

async def test_calls_are_told_start_and_end_with_their_outcome(
        make_runtime: RuntimeFactory) -> None:
    rec = Recorder()
    rt = await make_runtime(Counter, plugins=[rec])
    c = rt.get(Counter, "c")
    assert await c.add(2) == 2
    with pytest.raises(ValueError):
        await c.boom()
    starts = rec.named("on_object_event_start")
    ends = rec.named("on_object_event_end")
    assert [(s.object_class, s.object_name, s.event, s.method) for s in starts] == [
        ("Counter", "c", "call", "add"), ("Counter", "c", "call", "boom")]
    assert [e.start for e in ends] == starts
    assert [e.outcome for e in ends] == [hook_info.Outcome.OK, hook_info.Outcome.ERROR]
    assert isinstance(ends[1].error, ValueError)
    assert [name for name, _ in rec.heard] == ["on_object_event_start",
                                               "on_object_event_end"] * 2


async def test_alarm_attempts_are_told_their_retry_count_and_outcome(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    rec = Recorder()
    rt = await make_runtime(Counter, plugins=[rec],
                            policies={"Counter": RetryPolicy(max_retries=2, initial_delay_s=1.0,
                                                             max_delay_s=60.0, jitter=0.0)})
    c = rt.get(Counter, "a")
    await c.set_fail(True)
    await c.arm(START_MS + 1000)
    rec.heard.clear()
    await clock.advance(30)  # three attempts: the first and two retries, then dead

    starts = rec.named("on_alarm_attempt_start")
    ends = rec.named("on_alarm_attempt_end")
    assert [(s.object_class, s.object_name, s.retry_count, s.max_retries) for s in starts] == [
        ("Counter", "a", 0, 2), ("Counter", "a", 1, 2), ("Counter", "a", 2, 2)]
    assert [e.start for e in ends] == starts
    outcome = hook_info.AlarmOutcome
    assert [e.outcome for e in ends] == [outcome.RETRY_SCHEDULED, outcome.RETRY_SCHEDULED,
                                         outcome.DEAD]
    assert all("RuntimeError: flaky" in (e.error or "") for e in ends)
    assert ends[0].next_attempt_ms is not None and ends[0].next_attempt_ms > ends[0].end_ms
    assert ends[2].next_attempt_ms is None
    # The attempt wraps its object event: alarm start, event start, event end, alarm end.
    assert [name for name, _ in rec.heard][:4] == [
        "on_alarm_attempt_start", "on_object_event_start", "on_object_event_end",
        "on_alarm_attempt_end"]
    event = rec.named("on_object_event_start")[0]
    assert (event.event, event.method) == ("alarm", "alarm")

    # Fixed, re-armed: the next attempt is a first one and ends ok.
    await c.set_fail(False)
    await rt.rearm(Counter, "a", at_ms=clock.now_ms() + 1000)
    rec.heard.clear()
    await clock.advance(2)
    ends = rec.named("on_alarm_attempt_end")
    assert [(e.retry_count, e.outcome, e.error) for e in ends] == [
        (0, hook_info.AlarmOutcome.OK, None)]


async def test_a_plugin_that_raises_everywhere_changes_nothing(
        make_runtime: RuntimeFactory, clock: VirtualClock,
        caplog: pytest.LogCaptureFixture) -> None:
    bad, rec = Raises(), Recorder()
    rt = await make_runtime(Counter, plugins=[bad, rec])
    c = rt.get(Counter, "x")
    assert await c.add(1) == 1
    await c.arm(START_MS + 1000)
    await clock.advance(2)
    assert await c.fired() == 0
    status = await rt.alarm(Counter, "x")
    assert status is None  # fired once, done: nothing of the plugin's raise reached it
    assert bad.calls > 0 and bad.calls == len(rec.heard)
    assert any("Raises raised in" in r.getMessage() for r in caplog.records)


async def test_a_plugin_added_later_hears_what_starts_from_then(
        make_runtime: RuntimeFactory) -> None:
    rt = await make_runtime(Counter)
    c = rt.get(Counter, "late")
    await c.add(1)
    rec = rt.add_plugin(Recorder())
    await c.add(1)
    assert [s.method for s in rec.named("on_object_event_start")] == ["add"]
