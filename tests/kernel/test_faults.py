"""The fault registry: inject, list, take, clear, and the events about it."""

from __future__ import annotations

import pytest

from alarmtop.core.kernel.clock import VirtualClock
from alarmtop.core.kernel.events import EventBus, Subscription
from alarmtop.core.kernel.faults import FAULT_KINDS, FaultRegistry, InjectedFault
from alarmtop.core.model.errors import InvalidArgument, InvalidFault, UnknownFault
from alarmtop.core.model.faults import TARGET_KINDS, kinds_for, needs_seconds
from tests.conftest import START_MS

TARGET = "Lease/l1"


@pytest.fixture
def bus(clock: VirtualClock) -> EventBus:
    return EventBus(clock)


@pytest.fixture
def events(bus: EventBus) -> Subscription:
    return bus.subscribe("fault.")


@pytest.fixture
def faults(bus: EventBus, clock: VirtualClock) -> FaultRegistry:
    return FaultRegistry(bus, clock.now_ms)


def test_inject_lists_the_fault_with_its_fields(faults: FaultRegistry) -> None:
    fid = faults.inject(TARGET, "alarm_raise", times=2)
    assert faults.list() == [{
        "id": fid, "target": TARGET, "kind": "alarm_raise", "times": 2, "remaining": 2,
        "seconds": None, "step": None, "point": None, "triggered": 0, "created_ms": START_MS,
    }]


def test_ids_are_distinct(faults: FaultRegistry) -> None:
    ids = {faults.inject(TARGET, "alarm_raise") for _ in range(5)}
    assert len(ids) == 5


def test_take_uses_up_a_counted_fault(faults: FaultRegistry) -> None:
    fid = faults.inject(TARGET, "alarm_raise", times=2)
    first = faults.take(TARGET, "alarm_raise")
    assert first is not None and (first.id, first.remaining, first.triggered) == (fid, 1, 1)
    assert faults.take(TARGET, "alarm_raise") is not None
    assert faults.take(TARGET, "alarm_raise") is None
    assert faults.list() == []


def test_times_none_applies_until_cleared(faults: FaultRegistry) -> None:
    fid = faults.inject(TARGET, "alarm_raise", times=None)
    for n in range(1, 51):
        fault = faults.take(TARGET, "alarm_raise")
        assert fault is not None and fault.triggered == n and fault.remaining is None
    faults.clear(fid)
    assert faults.take(TARGET, "alarm_raise") is None


def test_take_matches_target_kind_and_step(faults: FaultRegistry) -> None:
    faults.inject("exec-1", "step_raise", step="charge")
    assert faults.take("exec-2", "step_raise", step="charge") is None
    assert faults.take("exec-1", "compensation_fail", step="charge") is None
    assert faults.take("exec-1", "step_raise", step="refund") is None
    fault = faults.take("exec-1", "step_raise", step="charge")
    assert fault is not None and fault.step == "charge"


def test_fault_may_wait_for_a_target_that_does_not_exist_yet(faults: FaultRegistry) -> None:
    faults.inject("Ghost/nobody", "alarm_delay", seconds=3)
    fault = faults.find("Ghost/nobody", "alarm_delay")
    assert fault is not None and fault.seconds == 3


def test_step_crash_point_is_normalised(faults: FaultRegistry) -> None:
    faults.inject("exec-1", "step_crash", step="s", point="b")
    assert faults.list()[0]["point"] == "B"


@pytest.mark.parametrize(("target", "kind", "kwargs", "hint"), [
    (TARGET, "explode", {}, "unknown fault kind"),
    ("", "step_raise", {"step": "s"}, "needs a target"),
    ("no-slash", "alarm_raise", {}, "Class/name"),
    (TARGET, "alarm_raise", {"times": 0}, "times"),
    (TARGET, "alarm_raise", {"times": -3}, "times"),
    (TARGET, "alarm_raise", {"times": True}, "times"),
    (TARGET, "alarm_delay", {}, "seconds"),
    (TARGET, "alarm_delay", {"seconds": 0}, "seconds"),
    ("exec-1", "step_raise", {}, "step="),
    ("exec-1", "compensation_fail", {}, "step="),
    ("exec-1", "idempotency_off", {}, "step="),
    ("exec-1", "step_crash", {"step": "s"}, "point"),
    ("exec-1", "step_crash", {"step": "s", "point": "D"}, "point"),
])
def test_invalid_faults_are_refused_with_a_hint(faults: FaultRegistry, events: Subscription,
                                                target: str, kind: str,
                                                kwargs: dict[str, object], hint: str) -> None:
    with pytest.raises(InvalidFault, match=hint) as info:
        faults.inject(target, kind, **kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, InvalidArgument)
    assert faults.list() == [] and events.drain() == []


def test_every_kind_is_injectable_with_its_parameters(faults: FaultRegistry) -> None:
    params: dict[str, dict[str, object]] = {
        "alarm_delay": {"seconds": 1.5}, "step_crash": {"step": "s", "point": "A"},
        "checkpoint_delay": {"seconds": 2}, "checkpoint_fail": {}, "checkpoint_revoke": {},
    }
    for kind in FAULT_KINDS:
        target = TARGET if kind.startswith("alarm_") else "exec-1"
        extra = params.get(kind, {} if kind.startswith("alarm_") else {"step": "s"})
        faults.inject(target, kind, **extra)  # type: ignore[arg-type]
    assert sorted(f["kind"] for f in faults.list()) == sorted(FAULT_KINDS)


def test_each_target_takes_its_own_kinds() -> None:
    """What a console offers: an object the alarm kinds, a native execution the step
    kinds, an execution of the AWS SDK's handlers the checkpoint kinds; all of them."""
    assert kinds_for("object") == ["alarm_raise", "alarm_delay"]
    assert kinds_for("execution") == ["step_raise", "step_crash", "compensation_fail",
                                      "idempotency_off"]
    assert kinds_for("aws") == ["checkpoint_fail", "checkpoint_delay", "checkpoint_revoke"]
    assert sorted(k for t in TARGET_KINDS for k in kinds_for(t)) == sorted(FAULT_KINDS)
    assert [k for k in FAULT_KINDS if needs_seconds(k)] == ["alarm_delay", "checkpoint_delay"]
    with pytest.raises(InvalidFault, match="not 'lambda'"):
        kinds_for("lambda")


def test_clearing_twice_raises_unknown_fault(faults: FaultRegistry) -> None:
    fid = faults.inject(TARGET, "alarm_raise")
    faults.clear(fid)
    with pytest.raises(UnknownFault) as info:
        faults.clear(fid)
    assert info.value.fault_id == fid
    with pytest.raises(UnknownFault):
        faults.clear("f999")


def test_injected_triggered_cleared_are_announced(faults: FaultRegistry,
                                                  events: Subscription) -> None:
    fid = faults.inject(TARGET, "alarm_raise", times=None)
    faults.take(TARGET, "alarm_raise")
    faults.take(TARGET, "nothing_here")
    faults.clear(fid)
    got = events.drain()
    assert [e.type for e in got] == ["fault.injected", "fault.triggered", "fault.cleared"]
    assert all(e.data["id"] == fid for e in got)
    assert got[1].data["triggered"] == 1


def test_injected_fault_error_names_the_fault() -> None:
    err = InjectedFault("f3", "alarm_raise", TARGET)
    assert (err.fault_id, err.kind, err.target) == ("f3", "alarm_raise", TARGET)
    assert "f3" in str(err) and TARGET in str(err)


@pytest.mark.parametrize("seconds", [True, float("nan"), float("inf")])
def test_alarm_delay_refuses_seconds_that_are_not_a_duration(faults: FaultRegistry,
                                                             seconds: float) -> None:
    with pytest.raises(InvalidFault, match="seconds"):
        faults.inject(TARGET, "alarm_delay", seconds=seconds)
