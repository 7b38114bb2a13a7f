"""The festival saga written with AWS's SDK (`examples/festival_aws.py`), on alarmtop:
the verdict, the compensations in reverse, and a compensation that keeps failing
waiting on a human-decision callback answered by hand (as the console answers it)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.environment import required

try:
    from alarmtop.examples.festival_aws import FUNCTION, FestivalServices, build_festival
except ImportError:  # pragma: no cover - the aws extra is missing
    if required():
        raise
    pytest.skip("the AWS SDK is not installed (pip install -e '.[aws]')",
                allow_module_level=True)


async def _festival(make_runtime: Any, clock: Any, services: FestivalServices) -> Any:
    rt = await make_runtime()
    rt.register_lambda(FUNCTION, build_festival(services))
    await rt.executions.start(FUNCTION, {"eventId": "hsf-day2"}, execution_id="hsf-day2")
    await clock.advance(0)
    return rt


async def _answer(rt: Any, name: str, payload: str, actor: str = "api") -> None:
    d = await rt.executions.describe("hsf-day2")
    callback_id = next(c["callback_id"] for c in d["callbacks"]
                       if c["name"] == name and c["status"] == "started")
    await rt.executions.complete_callback(callback_id, "success", payload, actor=actor)


async def test_go_streams(make_runtime: Any, clock: Any) -> None:
    services = FestivalServices()
    rt = await _festival(make_runtime, clock, services)
    await _answer(rt, "verdict", "go")
    await clock.advance(0)
    d = await rt.executions.describe("hsf-day2")
    assert d["result"] == {"status": "streaming", "event": "hsf-day2"}
    assert [c for c, _ in services.calls] == [
        "reserve_streaming", "open_viewing_page", "notify_partners", "start_streaming"]


async def test_cancel_compensates_in_reverse(make_runtime: Any, clock: Any) -> None:
    services = FestivalServices()
    rt = await _festival(make_runtime, clock, services)
    await _answer(rt, "verdict", "cancel")
    await clock.advance(0)
    d = await rt.executions.describe("hsf-day2")
    assert d["status"] == "succeeded"
    assert [s["state"] for s in d["result"]["saga"]] == ["compensated"] * 3
    assert [c for c, _ in services.calls][-4:] == [
        "record_cancellation", "notify_partners", "close_viewing_page", "release_streaming"]


async def test_a_failed_compensation_waits_for_a_human(make_runtime: Any, clock: Any) -> None:
    services = FestivalServices(broken={"close_viewing_page"})
    rt = await _festival(make_runtime, clock, services)
    await _answer(rt, "verdict", "cancel")
    await clock.advance(10)
    d = await rt.executions.describe("hsf-day2")
    assert d["status"] == "suspended"
    assert "decide_open_viewing_page" in (d["blocked_on"] or "")
    assert services.calls.count(("close_viewing_page", "hsf-day2")) == 3  # its retries
    # An operator fixes the page service and asks for the compensation again.
    services.broken.clear()
    await _answer(rt, "decide_open_viewing_page", json.dumps({"action": "retry"}),
                  actor="ana")
    await clock.advance(0)
    d = await rt.executions.describe("hsf-day2")
    assert d["status"] == "succeeded"
    assert [s["state"] for s in d["result"]["saga"]] == ["compensated"] * 3
    audit = await rt.backend.audit_rows.audit_list()
    assert any(r["action"] == "complete_callback" and r["actor"] == "ana" for r in audit)


async def test_a_compensation_resolved_by_hand_carries_on(make_runtime: Any,
                                                          clock: Any) -> None:
    services = FestivalServices(broken={"close_viewing_page"})
    rt = await _festival(make_runtime, clock, services)
    await _answer(rt, "verdict", "cancel")
    await clock.advance(10)
    await _answer(rt, "decide_open_viewing_page",
                  json.dumps({"action": "resolve", "note": "closed by hand"}))
    await clock.advance(0)
    d = await rt.executions.describe("hsf-day2")
    assert [s["state"] for s in d["result"]["saga"]] == [
        "compensated", "resolved", "compensated"]
    assert services.calls[-1] == ("release_streaming", "hsf-day2")
