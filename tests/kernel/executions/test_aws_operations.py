"""AWS SDK executions as executions like the native ones: chained invokes, limits,
faults at the checkpoint boundary, the dead letter of failed invocations, redrive,
fork and the replay check, a restart. Real SDK handlers (`aws_handlers`), on the
VirtualClock, on both backends."""

from __future__ import annotations

from typing import Any

import pytest

from alarmtop.core import AwsLimits, AwsOptions
from alarmtop.core.model.aws_limits import LIMIT_ERROR
from tests.kernel.executions import aws_handlers as h


@pytest.fixture(autouse=True)
def fresh_handlers() -> None:
    h.GATES.clear()
    h.RUNS.clear()
    h.SWITCHES.clear()


def kinds(history: list[dict[str, Any]]) -> list[str]:
    return [ev["EventType"] for ev in history]


async def test_invoke_runs_a_durable_target_and_a_plain_one(make_runtime: Any,
                                                            clock: Any) -> None:
    rt = await make_runtime()
    rt.register_lambda("caller", h.invokes)
    rt.register_lambda("echo", h.echo_after_wait)
    rt.register_lambda("double", h.plain_double)
    arn = rt.aws.place.function_arn("echo", "$LATEST")
    await rt.executions.start("caller", {"target": arn, "payload": {"k": 1}}, execution_id="c1")
    await rt.executions.start("caller", {"target": "double", "payload": 21}, execution_id="c2")
    await clock.advance(5)
    one, two = await rt.executions.describe("c1"), await rt.executions.describe("c2")
    assert (one["status"], one["result"]) == ("succeeded", {"k": 1})
    assert (two["status"], two["result"]) == ("succeeded", 42)
    started = next(ev for ev in one["history"] if ev["EventType"] == "ChainedInvokeStarted")
    details = started["ChainedInvokeStartedDetails"]
    child = await rt.executions.describe(details["DurableExecutionArn"].rsplit("/", 2)[1])
    assert child["status"] == "succeeded" and child["arn"] == details["DurableExecutionArn"]
    assert details["ExecutedVersion"] == "$LATEST"
    assert kinds(one["history"])[-3:] == ["ChainedInvokeSucceeded", "InvocationCompleted",
                                          "ExecutionSucceeded"]


async def test_an_unknown_invoke_target_is_refused_at_its_checkpoint(make_runtime: Any,
                                                                     clock: Any) -> None:
    rt = await make_runtime()
    rt.register_lambda("caller", h.invokes)
    await rt.executions.start("caller", {"target": "nobody"}, execution_id="c1")
    await clock.advance(5)
    d = await rt.executions.describe("c1")
    assert d["status"] == "failed"
    assert "ChainedInvokeStarted" not in kinds(d["history"])
    assert "nobody" in d["error"]["ErrorMessage"]


async def test_a_result_over_the_operation_limit_is_refused(make_runtime: Any,
                                                            clock: Any) -> None:
    rt = await make_runtime()
    rt.register_lambda("big", h.big_result)
    await rt.executions.start("big", {"size": 300 * 1024}, execution_id="b1")
    await clock.advance(5)
    d = await rt.executions.describe("b1")
    assert d["status"] == "failed" and "262144 bytes" in d["error"]["ErrorMessage"]


async def test_the_operations_limit_is_configurable(make_runtime: Any, clock: Any) -> None:
    rt = await make_runtime(aws=AwsOptions(limits=AwsLimits(operations=3)))
    rt.register_lambda("many", h.many_steps)
    await rt.executions.start("many", {"n": 5}, execution_id="m1")
    await clock.advance(5)
    d = await rt.executions.describe("m1")
    assert d["status"] == "failed" and d["error"]["ErrorType"] == LIMIT_ERROR
    assert kinds(d["history"])[-2:] == ["InvocationCompleted", "ExecutionFailed"]


async def test_failed_invocations_end_in_a_dead_letter_an_operator_rearms(
        make_runtime: Any, clock: Any) -> None:
    """A checkpoint the service keeps refusing (a fault) fails each invocation; after
    the retries the execution is a dead letter, not a silent end, until re-armed."""
    rt = await make_runtime()
    rt.register_lambda("fn", h.two_steps)
    fid = rt.faults.inject(target="e1", kind="checkpoint_fail", times=None)
    await rt.executions.start("fn", "x", execution_id="e1")
    await clock.advance(600)
    d = await rt.executions.describe("e1")
    assert d["status"] == "running" and d["aws"]["dead_letter"]
    assert d["aws"]["failures"] == 6  # the first try and its 5 retries
    dead = await rt.dead_letters()
    assert [(a.object_class, a.object_name) for a in dead] == [("Execution", "e1")]
    rt.faults.clear(fid)
    await rt.rearm("Execution", "e1")
    await clock.advance(5)
    d = await rt.executions.describe("e1")
    assert (d["status"], d["result"]) == ("succeeded", "b:a:x")
    assert await rt.dead_letters() == []


async def test_a_delayed_checkpoint_waits_on_the_runtime_clock(make_runtime: Any,
                                                               clock: Any) -> None:
    rt = await make_runtime()
    rt.register_lambda("fn", h.two_steps)
    rt.faults.inject(target="e1", kind="checkpoint_delay", seconds=30)
    await rt.executions.start("fn", "x", execution_id="e1")
    start = clock.now_ms()
    await clock.advance(40)
    d = await rt.executions.describe("e1")
    first = next(ev for ev in d["history"] if ev["EventType"] == "StepStarted")
    from datetime import datetime
    at = datetime.fromisoformat(first["EventTimestamp"]).timestamp() * 1000
    assert at - start == 30_000
    assert d["status"] == "succeeded"


async def test_a_withheld_token_ends_the_invocation_and_another_carries_on(
        make_runtime: Any, clock: Any) -> None:
    rt = await make_runtime()
    rt.register_lambda("fn", h.many_steps)
    rt.faults.inject(target="e1", kind="checkpoint_revoke")
    await rt.executions.start("fn", {"n": 3}, execution_id="e1")
    await clock.advance(5)
    d = await rt.executions.describe("e1")
    assert (d["status"], d["result"], d["invocations"]) == ("succeeded", [0, 1, 2], 2)


async def test_redrive_carries_on_from_the_failed_step(make_runtime: Any,
                                                      clock: Any) -> None:
    rt = await make_runtime()
    rt.register_lambda("fn", h.fails_until_fixed)
    await rt.executions.start("fn", None, execution_id="e1")
    await clock.advance(5)
    d = await rt.executions.describe("e1")
    assert d["status"] == "failed"
    h.SWITCHES["fixed"]["on"] = True
    out = await rt.executions.redrive("e1", actor="ana", reason="fixed the config")
    assert out["replay_check"]["clean"] and out["from_operation"]
    await clock.advance(5)
    d = await rt.executions.describe("e1")
    assert (d["status"], d["result"]) == ("succeeded", ["first", "fixed"])
    assert h.RUNS[d["arn"]] == ["first", "flaky", "flaky"]  # `first` was kept, not re-run
    assert "ExecutionRedriven" in kinds(d["history"])
    report = await rt.executions.replay_check("e1")
    assert report["clean"] and report["compared"] == 1
    audit = await rt.backend.audit_rows.audit_list()
    assert any(r["action"] == "redrive" and r["ok"] for r in audit)


async def test_fork_from_an_operation_keeps_what_came_before(make_runtime: Any,
                                                            clock: Any) -> None:
    rt = await make_runtime()
    rt.register_lambda("fn", h.fails_until_fixed)
    await rt.executions.start("fn", None, execution_id="e1")
    await clock.advance(5)
    h.SWITCHES["fixed"]["on"] = True
    out = await rt.executions.fork("e1", "flaky", execution_id="e2", actor="ana")
    await clock.advance(5)
    d = await rt.executions.describe("e2")
    assert (d["status"], d["result"]) == ("succeeded", ["first", "fixed"])
    assert out["from_operation"] and len(out["kept"]) == 1
    assert h.RUNS[d["arn"]] == ["flaky"]
    assert (await rt.executions.describe("e1"))["status"] == "failed"


async def test_an_execution_survives_a_restart(make_runtime: Any, clock: Any) -> None:
    rt = await make_runtime()
    rt.register_lambda("fn", h.two_steps)
    await rt.executions.start("fn", "x", execution_id="e1")
    await clock.advance(0)
    await rt.stop()
    again = await make_runtime()
    again.register_lambda("fn", h.two_steps)
    await clock.advance(3)
    d = await again.executions.describe("e1")
    assert (d["status"], d["result"]) == ("succeeded", "b:a:x")


async def test_a_plain_function_that_raises_fails_its_invoke(make_runtime: Any,
                                                             clock: Any) -> None:
    """A function error, as Lambda reports it to its caller: not a failed invocation
    retried, not a dead letter."""
    rt = await make_runtime()
    rt.register_lambda("caller", h.invokes)
    rt.register_lambda("bad", h.plain_fails)
    await rt.executions.start("caller", {"target": "bad", "payload": 1}, execution_id="c1")
    await clock.advance(5)
    d = await rt.executions.describe("c1")
    assert d["status"] == "failed" and "cannot take 1" in d["error"]["ErrorMessage"]
    failed = next(ev for ev in d["history"] if ev["EventType"] == "ChainedInvokeFailed")
    assert failed["ChainedInvokeFailedDetails"]["Error"]["Payload"]["ErrorType"] == \
        "ValueError"
    assert await rt.dead_letters() == []
