"""The festival saga end to end, with crashes and failing compensations injected."""

from __future__ import annotations

import pytest

from alarmtop.core import Runtime, VirtualClock
from alarmtop.examples.festival import FestivalServices, build_festival
from tests.conftest import RuntimeFactory

EID = "hsf-day2"
FORWARD = ["reserve_streaming", "open_viewing_page", "notify_partners"]
ROLLBACK = ["record_cancellation", "notify_partners", "close_viewing_page", "release_streaming"]


async def start(make_runtime: RuntimeFactory, clock: VirtualClock,
                starts_in: int = 600) -> tuple[Runtime, FestivalServices]:
    rt = await make_runtime()
    services = FestivalServices(rt.ledger)
    rt.register_execution(build_festival(services))
    await rt.executions.start("festival-stream", {"eventId": EID, "startsInSeconds": starts_in},
                              execution_id=EID)
    await clock.advance(0)
    return rt, services


async def verdict_id(rt: Runtime) -> str:
    d = await rt.executions.describe(EID)
    (cb,) = [c for c in d["callbacks"] if c["name"] == "verdict"]
    return str(cb["callback_id"])


def names(services: FestivalServices) -> list[str]:
    return [c[0] for c in services.calls]


async def test_go_passes_the_pivot_and_streams(make_runtime: RuntimeFactory,
                                               clock: VirtualClock) -> None:
    """Forward steps once each, a verdict "go", streaming starts, nothing is undone."""
    rt, services = await start(make_runtime, clock)
    d = await rt.executions.describe(EID)
    assert d["status"] == "suspended" and "verdict" in d["blocked_on"]
    assert names(services) == FORWARD
    await rt.executions.send_callback_success(await verdict_id(rt), "go")
    await clock.advance(0)
    d = await rt.executions.describe(EID)
    assert (d["status"], d["result"]) == ("succeeded", {"status": "streaming", "event": EID})
    assert names(services) == [*FORWARD, "start_streaming"]
    assert [s["state"] for s in d["saga"]] == ["pending", "pending", "pending"]


async def test_cancel_compensates_in_reverse(make_runtime: RuntimeFactory,
                                             clock: VirtualClock) -> None:
    """A "cancel" records the cancellation and runs each compensation once, in reverse."""
    rt, services = await start(make_runtime, clock)
    await rt.executions.send_callback_success(await verdict_id(rt), "cancel")
    await clock.advance(0)
    d = await rt.executions.describe(EID)
    assert d["status"] == "succeeded"
    assert d["result"]["status"] == "cancelled"
    assert names(services) == FORWARD + ROLLBACK
    assert [(s["name"], s["state"]) for s in d["saga"]] == [
        ("notify_partners", "compensated"), ("open_viewing_page", "compensated"),
        ("reserve_streaming", "compensated")]
    comp_events = [e["Name"] for e in d["history"] if e["EventType"] == "StepSucceeded"
                   and e["Name"].startswith("compensate_")]
    assert comp_events == ["compensate_notify_partners", "compensate_open_viewing_page",
                           "compensate_reserve_streaming"]
    assert services.delivered == [f"{EID} goes live", f"{EID} is cancelled"]


async def test_no_verdict_before_the_start_cancels(make_runtime: RuntimeFactory,
                                                   clock: VirtualClock) -> None:
    """The verdict callback races the start time: silence until then means cancel."""
    rt, services = await start(make_runtime, clock, starts_in=120)
    await clock.advance(119)
    assert (await rt.executions.describe(EID))["status"] == "suspended"
    await clock.advance(1)
    d = await rt.executions.describe(EID)
    assert d["status"] == "succeeded"
    assert d["result"]["verdict"] == "no verdict before the start"
    assert any(e["EventType"] == "CallbackTimedOut" for e in d["history"])
    assert names(services) == FORWARD + ROLLBACK


async def test_crash_between_compensations_runs_nothing_twice(make_runtime: RuntimeFactory,
                                                              clock: VirtualClock) -> None:
    """Crash at point C of a compensation: after re-invocation each compensation ran once."""
    rt, services = await start(make_runtime, clock)
    rt.faults.inject(EID, "step_crash", step="compensate_notify_partners", point="C")
    await rt.executions.send_callback_success(await verdict_id(rt), "cancel")
    await clock.advance(0)
    d = await rt.executions.describe(EID)
    assert d["status"] == "running"  # the invocation died; the alarm retries it
    await clock.advance(5)
    d = await rt.executions.describe(EID)
    assert d["status"] == "succeeded"
    assert names(services) == FORWARD + ROLLBACK
    crashed = [e for e in d["history"] if e["EventType"] == "InvocationCompleted"
               and "Error" in e["InvocationCompletedDetails"]]
    assert len(crashed) == 1
    assert crashed[0]["InvocationCompletedDetails"]["Error"]["Payload"]["ErrorType"] == (
        "Runtime.ExitError")


@pytest.mark.parametrize("idempotent", [True, False])
async def test_crash_after_notice_runs_twice_delivers_once(make_runtime: RuntimeFactory,
                                                           clock: VirtualClock,
                                                           idempotent: bool) -> None:
    """Crash at point B of notify_partners: the body runs twice; the keyed notice is
    delivered once, and twice when the idempotency key is switched off."""
    rt = await make_runtime()
    services = FestivalServices(rt.ledger)
    rt.register_execution(build_festival(services))
    rt.faults.inject(EID, "step_crash", step="notify_partners", point="B")
    if not idempotent:
        rt.faults.inject(EID, "idempotency_off", step="notify_partners")
    await rt.executions.start("festival-stream", {"eventId": EID}, execution_id=EID)
    await clock.advance(5)
    assert (await rt.executions.describe(EID))["status"] == "suspended"
    assert names(services).count("notify_partners") == 2
    live = f"{EID} goes live"
    assert services.delivered == ([live] if idempotent else [live, live])
    sent = [e for e in (await rt.executions.history(EID))
            if e["EventType"] == "StepSucceeded" and e.get("Name") == "notify_partners"]
    assert len(sent) == 1  # one checkpoint: the crash came before it


async def test_failing_compensation_goes_to_a_human_then_retry_finishes(
        make_runtime: RuntimeFactory, clock: VirtualClock) -> None:
    """A compensation that fails for good leaves the cancellation recorded, waits in
    needs_human with the stack visible, and an operator retry finishes the rollback."""
    rt, services = await start(make_runtime, clock)
    rt.faults.inject(EID, "compensation_fail", step="compensate_open_viewing_page", times=3)
    await rt.executions.send_callback_success(await verdict_id(rt), "cancel")
    await clock.advance(10)
    d = await rt.executions.describe(EID)
    assert d["status"] == "needs_human"
    assert "compensate_open_viewing_page" in d["blocked_on"]
    assert [(s["name"], s["state"]) for s in d["saga"]] == [
        ("notify_partners", "compensated"), ("open_viewing_page", "failed"),
        ("reserve_streaming", "pending")]
    assert ("record_cancellation", f"{EID}: cancel") in services.calls
    failed = [e for e in d["history"] if e["EventType"] == "StepFailed"
              and e["Name"] == "compensate_open_viewing_page"]
    assert [f["StepFailedDetails"]["RetryDetails"]["CurrentAttempt"] for f in failed] == [1, 2, 3]

    await rt.executions.retry_compensation(EID, actor="alice")
    # Before the retry has run: no longer waiting for a human, due to run now.
    d = await rt.executions.describe(EID)
    assert (d["status"], d["blocked_on"]) == ("running", None)
    await clock.advance(0)
    d = await rt.executions.describe(EID)
    assert d["status"] == "succeeded"
    assert [(s["name"], s["state"]) for s in d["saga"]] == [
        ("notify_partners", "compensated"), ("open_viewing_page", "compensated"),
        ("reserve_streaming", "compensated")]
    # The compensation done before the failure was not run again.
    assert names(services).count("notify_partners") == 2
    assert names(services).count("release_streaming") == 1
    audit = await rt.audit.list()
    assert [(a["actor"], a["action"], a["target"], a["ok"]) for a in audit] == [
        ("alice", "retry_compensation", EID, True)]


async def test_resolve_by_hand_and_abort(make_runtime: RuntimeFactory,
                                         clock: VirtualClock) -> None:
    """resolve records the failed compensation as done by hand and carries on; abort on a
    second execution ends it without running anything more."""
    rt, services = await start(make_runtime, clock)
    rt.faults.inject(EID, "compensation_fail", step="compensate_open_viewing_page", times=None)
    await rt.executions.send_callback_success(await verdict_id(rt), "cancel")
    await clock.advance(10)
    assert (await rt.executions.describe(EID))["status"] == "needs_human"
    await rt.executions.resolve(EID, note="closed the page by hand", actor="bob")
    await clock.advance(0)
    d = await rt.executions.describe(EID)
    assert d["status"] == "succeeded"
    entry = next(s for s in d["saga"] if s["name"] == "open_viewing_page")
    assert (entry["state"], entry["note"]) == ("resolved", "closed the page by hand")
    assert names(services).count("release_streaming") == 1

    await rt.executions.start("festival-stream", {"eventId": "day3"}, execution_id="day3")
    rt.faults.inject("day3", "compensation_fail", step="compensate_open_viewing_page",
                     times=None)
    await clock.advance(0)
    d3 = await rt.executions.describe("day3")
    (cb,) = [c for c in d3["callbacks"] if c["name"] == "verdict"]
    await rt.executions.send_callback_success(cb["callback_id"], "cancel")
    await clock.advance(10)
    before = len(services.calls)
    await rt.executions.abort("day3", reason="venue gone", actor="carol")
    await clock.advance(60)
    d3 = await rt.executions.describe("day3")
    assert d3["status"] == "aborted"
    assert d3["error"]["ErrorMessage"] == "venue gone"
    assert d3["history"][-1]["EventType"] == "ExecutionStopped"
    assert len(services.calls) == before

