"""The demo's fourth festival day: failed for good while the partners were down,
redriven once they are back, with nothing booked twice."""

from __future__ import annotations

from alarmtop.core import VirtualClock
from alarmtop.examples.demo import RedriveStory, start_outage_day
from alarmtop.examples.festival import FestivalServices, build_festival
from tests.conftest import RuntimeFactory

EID = RedriveStory.EXECUTION


async def test_the_outage_day_is_redriven_after_the_outage(make_runtime: RuntimeFactory,
                                                           clock: VirtualClock) -> None:
    rt = await make_runtime()
    services = FestivalServices(rt.ledger)
    rt.register_execution(build_festival(services))
    story = await start_outage_day(rt, hold_s=10)
    await clock.advance(10)  # three tries of notify_partners, two seconds apart
    d = await rt.executions.describe(EID)
    assert (d["status"], d["error"]["ErrorType"]) == ("failed",
                                                      "alarmtop.core.InjectedFault")
    await story.tick()
    assert not story.redriven  # the failure is shown for a while first
    await clock.advance(10)
    await story.tick()
    assert story.redriven and rt.faults.list() == []
    await clock.advance(1)
    d = await rt.executions.describe(EID)
    assert d["status"] == "suspended" and "verdict" in d["blocked_on"]
    assert [c[0] for c in services.calls] == ["reserve_streaming", "open_viewing_page",
                                              "notify_partners"]
    assert services.delivered == [f"{EID} goes live"]
    kinds = [e["EventType"] for e in d["history"]]
    assert kinds.count("ExecutionRedriven") == 1 and kinds.count("ExecutionFailed") == 1
    audit = (await rt.audit.list())[0]
    assert (audit["action"], audit["actor"], audit["reason"]) == ("redrive", "demo",
                                                                  "partner API back")
