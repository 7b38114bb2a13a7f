"""The ops queries as the console pages them: sort keys, filters, totals, every object,
the audit rows of a target (a callback's opaque id shows its execution)."""

from __future__ import annotations

import pytest

from alarmtop.core import VirtualClock
from alarmtop.examples.festival import FestivalServices, build_festival
from tests.conftest import RuntimeFactory
from tests.server.conftest import OPERATOR, VIEWER, Always, ClientFactory, Quiet, ServerFactory

EID = "hsf-day1"


async def test_alarms_sort_by_the_real_due_time(make_runtime: RuntimeFactory,
                                                clock: VirtualClock, serve: ServerFactory,
                                                client: ClientFactory) -> None:
    """sort=due orders by the due time (ms), desc reverses; the total stays the total."""
    rt = await make_runtime(Quiet)
    for name, delay in (("q1", 51 * 60_000), ("q2", 6_000), ("q3", 600_000)):
        await rt.get(Quiet, name).arm(delay)
    await clock.advance(0)
    v = await client((await serve(rt)).url, VIEWER)
    page = await v.ok("alarms", sort="due")
    assert [r["object"] for r in page["rows"]] == ["Quiet/q2", "Quiet/q3", "Quiet/q1"]
    page = await v.ok("alarms", sort="due", desc=True, limit=2)
    assert [r["object"] for r in page["rows"]] == ["Quiet/q1", "Quiet/q3"]
    assert page["total"] == 3
    refused = await v.request("alarms", sort="due_in")
    assert refused["ok"] is False and "sort is one of" in refused["error"]


async def test_objects_are_every_object_the_runtime_knows(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory) -> None:
    """An object with only an alarm (no storage) is listed, with storage false; resident
    ones too; executions as `Execution/<id>` (their log is their storage); sorted by
    alarm time on request."""
    rt = await make_runtime(Quiet, Always)
    rt.register_execution(build_festival(FestivalServices(rt.ledger)))
    await rt.get(Quiet, "only-alarm").arm(60_000)
    await rt.get(Quiet, "stored").touch()
    await rt.executions.start("festival-stream", {"eventId": EID, "startsInSeconds": 3600},
                              execution_id=EID)
    await clock.advance(0)
    v = await client((await serve(rt)).url, VIEWER)
    listed = await v.ok("objects", limit=50)
    by = {r["object"]: r for r in listed["rows"]}
    assert {"Quiet/only-alarm", "Quiet/stored", f"Execution/{EID}"} <= set(by)
    assert listed["total"] == len(by)
    assert by["Quiet/only-alarm"]["storage"] is False and by["Quiet/stored"]["storage"] is True
    assert by[f"Execution/{EID}"]["storage"] is True  # its log, in the runtime's database
    assert by["Quiet/only-alarm"]["alarm_state"] == "pending"
    by_alarm = await v.ok("objects", sort="alarm")
    assert by_alarm["rows"][-1]["alarm_ms"] is None  # no alarm: last


async def test_executions_filter_sort_and_total(make_runtime: RuntimeFactory,
                                                clock: VirtualClock, serve: ServerFactory,
                                                client: ClientFactory) -> None:
    rt = await make_runtime()
    rt.register_execution(build_festival(FestivalServices(rt.ledger)))
    for eid in ("hsf-day1", "hsf-day2", "other-1"):
        await rt.executions.start("festival-stream", {"eventId": eid,
                                                      "startsInSeconds": 3600},
                                  execution_id=eid)
    await clock.advance(0)
    v = await client((await serve(rt)).url, VIEWER)
    assert (await v.ok("executions", limit=2))["total"] == 3
    hsf = await v.ok("executions", filter="hsf-", sort="execution", desc=True)
    assert [r["execution_id"] for r in hsf["rows"]] == ["hsf-day2", "hsf-day1"]
    assert hsf["total"] == 2


async def test_audit_total_filter_and_the_rows_of_an_execution(
        make_runtime: RuntimeFactory, clock: VirtualClock, serve: ServerFactory,
        client: ClientFactory) -> None:
    """The audit log counts its rows; a callback's row names its execution and is found
    by target=<execution id> with the execution's other rows."""
    rt = await make_runtime()
    rt.register_execution(build_festival(FestivalServices(rt.ledger)))
    await rt.executions.start("festival-stream", {"eventId": EID, "startsInSeconds": 3600},
                              execution_id=EID)
    await clock.advance(0)
    d = await rt.executions.describe(EID)
    (cb,) = [c for c in d["callbacks"] if c["name"] == "verdict"]
    op = await client((await serve(rt)).url, OPERATOR)
    await op.ok("inject_fault", target="Quiet/x", kind="alarm_raise")
    await op.ok("hand_to_human", execution_id=EID, reason="check")
    await op.ok("send_callback", callback_id=cb["callback_id"], payload="go")
    everything = await op.ok("audit", limit=2)
    assert everything["total"] == 3 and len(everything["rows"]) == 2
    mine = await op.ok("audit", target=EID)
    assert [(r["action"], r.get("execution_id")) for r in mine["rows"]] == [
        ("send_callback", EID), ("hand_to_human", None)]
    assert mine["total"] == 2
    assert (await op.ok("audit", filter="inject"))["total"] == 1
    oldest_first = await op.ok("audit", sort="when", desc=False)
    assert oldest_first["rows"][0]["action"] == "inject_fault"


async def test_faults_page_and_filter_by_target(make_runtime: RuntimeFactory,
                                                clock: VirtualClock, serve: ServerFactory,
                                                client: ClientFactory) -> None:
    rt = await make_runtime(Quiet)
    for i in range(3):
        rt.faults.inject(f"Quiet/q{i}", "alarm_raise", None)
    v = await client((await serve(rt)).url, VIEWER)
    assert (await v.ok("faults"))["total"] == 3
    page = await v.ok("faults", offset=1, limit=1, sort="id", desc=True)
    assert [f["id"] for f in page["rows"]] == ["f2"] and page["total"] == 3
    assert [f["target"] for f in (await v.ok("faults", target="Quiet/q1"))["rows"]] == [
        "Quiet/q1"]


@pytest.mark.parametrize("paused_ms", [None, 1_700_000_000_000])
def test_a_row_built_from_the_record_is_the_status_row(paused_ms: int | None) -> None:
    """The listing's fast row says what `alarm_row(AlarmStatus.of(...))` says, the
    operator's pause included."""
    from alarmtop.core import RetryPolicy
    from alarmtop.core.model.alarm_policy import AlarmRecord, AlarmState
    from alarmtop.core.model.alarm_status import AlarmStatus
    from alarmtop.server.rows import alarm_row, record_row
    rec = AlarmRecord("Flaky", "p", 1_000, AlarmState.RETRYING, 2, 5_000, "boom")
    rec = rec._replace(paused_ms=paused_ms)
    policy = RetryPolicy()
    assert record_row(rec, policy) == alarm_row(AlarmStatus.of(rec, policy))
