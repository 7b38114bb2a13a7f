"""The pure replay module: matching, resolving, the transition tables, reset plans."""

from __future__ import annotations

import random

import pytest

from alarmtop.core.durable import (
    Duration,
    JitterStrategy,
    RetryPresets,
    RetryStrategyConfig,
    ValidationError,
    create_retry_strategy,
)
from alarmtop.core.model.alarm_policy import RetryPolicy, next_delay, retry_after
from alarmtop.core.model.execution_config import decide_retry
from alarmtop.core.model.execution_errors import IllegalTransition, NonDeterministicExecutionError
from alarmtop.core.model.execution_timers import execution_timers, op_timers
from alarmtop.core.model.operations import ExecutionStatus, OperationRecord, OpStatus, OpType
from alarmtop.core.model.replay import (
    Outcome,
    Shape,
    advance,
    advance_execution,
    first_failed,
    fork_point,
    is_reset,
    mark_is_reset,
    mark_key,
    match,
    plan_from,
    redrive_plan,
    resolve,
)

STEP = Shape(OpType.STEP, "Step", "charge")


def op(op_id: str, status: OpStatus = OpStatus.SUCCEEDED, name: str | None = None,
       type_: OpType = OpType.STEP, sub_type: str = "Step", **kw: object) -> OperationRecord:
    return OperationRecord(op_id, type_, sub_type, name or f"s{op_id}", None, status=status,
                           **kw)  # type: ignore[arg-type]


def test_match_returns_the_record_or_none() -> None:
    rec = op("1", name="charge")
    assert match(rec, "1", *STEP) is rec
    assert match(None, "1", *STEP) is None


def test_match_names_both_sides_of_a_divergence() -> None:
    with pytest.raises(NonDeterministicExecutionError) as caught:
        match(op("3", name="charge"), "3", OpType.STEP, "Step", "refund", index=2)
    d = caught.value.divergence
    assert d is not None and (d.op_id, d.index) == ("3", 2)
    assert (d.recorded.name, d.current and d.current.name) == ("charge", "refund")
    assert "'charge'" in caught.value.message and "'refund'" in caught.value.message


def test_resolve_covers_every_recorded_outcome() -> None:
    assert resolve(None, 0).outcome is Outcome.RUN
    ok = resolve(op("1", result='"x"'), 0)
    assert (ok.outcome, ok.text) == (Outcome.VALUE, '"x"')
    failed = resolve(op("1", OpStatus.FAILED, error={"ErrorType": "E"}), 0)
    assert (failed.outcome, failed.error) == (Outcome.ERROR, {"ErrorType": "E"})
    later = resolve(op("1", OpStatus.PENDING, next_attempt_ms=100), 50)
    assert (later.outcome, later.until_ms) == (Outcome.SUSPEND, 100)
    assert resolve(op("1", OpStatus.PENDING, next_attempt_ms=100), 100).outcome is Outcome.RUN
    assert resolve(op("1", OpStatus.STARTED), 0).outcome is Outcome.RUN  # resumed
    wait = op("2", OpStatus.STARTED, type_=OpType.WAIT, sub_type="Wait", scheduled_end_ms=9)
    assert (resolve(wait, 0).outcome, resolve(wait, 0).until_ms) == (Outcome.SUSPEND, 9)
    cb = op("3", OpStatus.STARTED, type_=OpType.CALLBACK, sub_type="Callback")
    assert resolve(cb, 0).outcome is Outcome.SUSPEND


def test_the_table_refuses_an_illegal_change_and_changes_nothing() -> None:
    rec = op("1", OpStatus.SUCCEEDED)
    with pytest.raises(IllegalTransition, match="SUCCEEDED -> STARTED"):
        advance(rec, OpStatus.STARTED)
    assert rec.status is OpStatus.SUCCEEDED
    ready = op("2", OpStatus.READY)
    with pytest.raises(IllegalTransition):
        advance(ready, OpStatus.SUCCEEDED)  # a step succeeds only after it started
    assert advance(ready, OpStatus.STARTED).status is OpStatus.STARTED
    assert advance(ready, OpStatus.PENDING).status is OpStatus.PENDING
    with pytest.raises(IllegalTransition, match="succeeded -> running"):
        advance_execution(ExecutionStatus.SUCCEEDED, ExecutionStatus.RUNNING, "e1")
    assert advance_execution(ExecutionStatus.FAILED, ExecutionStatus.RUNNING,
                             "e1") is ExecutionStatus.RUNNING


def test_a_reset_takes_the_operation_what_follows_and_its_contexts() -> None:
    assert is_reset("3", "3") and is_reset("4", "3") and is_reset("3-1", "3")
    assert not is_reset("2", "3") and not is_reset("2-9", "3")
    assert is_reset("2", "2-3")  # the context holding it replays anew
    assert not is_reset("2-2", "2-3") and is_reset("2-4", "2-3")
    assert not mark_is_reset(mark_key(None, 0, "now", 1), "1")
    assert not mark_is_reset(mark_key(None, 2, "now", 1), "3")  # taken after op 2
    assert mark_is_reset(mark_key(None, 3, "now", 1), "3")
    assert mark_is_reset(mark_key("3", 0, "random", 1), "3")  # first thing inside op 3


def test_the_first_failed_operation_is_the_leaf() -> None:
    ops = [op("1"), op("2", OpStatus.FAILED, type_=OpType.CONTEXT, sub_type="RunInChildContext"),
           op("2-1"), op("2-2", OpStatus.FAILED), op("3", OpStatus.FAILED)]
    assert first_failed(ops) == "2-2"
    plan = redrive_plan(ops, [mark_key(None, 1, "now", 1), mark_key("2", 2, "now", 1)])
    assert plan.kept == ("1", "2-1") and plan.reset == ("2", "2-2", "3")
    assert plan.kept_marks == ("1/now/1",) and plan.reset_marks == ("2-2/now/1",)
    assert redrive_plan([op("1"), op("2")], []).reset == ()  # nothing failed: keep all


def test_a_fork_point_is_an_id_or_a_name_used_once() -> None:
    ops = [op("1", name="a"), op("2", name="poll"), op("3", name="poll"), op("4", name="b")]
    assert fork_point(ops, "b") == "4" and fork_point(ops, "3") == "3"
    with pytest.raises(ValidationError, match=r"occurs 2 times.*2, 3.*operation id"):
        fork_point(ops, "poll")
    with pytest.raises(ValidationError, match="no operation named"):
        fork_point(ops, "nope")
    assert plan_from(ops, [], "3").kept == ("1", "2")


def test_timers_follow_the_operation_state() -> None:
    wait = op("1", OpStatus.STARTED, type_=OpType.WAIT, sub_type="Wait", scheduled_end_ms=5)
    cb = op("2", OpStatus.STARTED, type_=OpType.CALLBACK, sub_type="Callback",
            timeout_at_ms=9, heartbeat_at_ms=7)
    retry = op("3", OpStatus.PENDING, next_attempt_ms=3)
    assert [(t.kind, t.due_ms) for t in op_timers(wait)] == [("wait", 5)]
    assert [(t.kind, t.due_ms) for t in op_timers(cb)] == [("callback_timeout", 9),
                                                         ("heartbeat", 7)]
    assert [(t.kind, t.due_ms) for t in op_timers(retry)] == [("retry", 3)]
    assert op_timers(op("4")) == []
    from alarmtop.core.model.operations import ExecutionRecord
    rec = ExecutionRecord("e", "h", "1", ExecutionStatus.RUNNING, "null", 1000, 1000,
                          timeout_s=60, timeout_start_ms=5000)
    assert [(t.kind, t.due_ms) for t in execution_timers(rec)] == [("execution_timeout",
                                                                    65_000)]


def test_step_strategies_are_a_layer_over_the_alarm_policy() -> None:
    cfg = RetryStrategyConfig(max_attempts=4, initial_delay=Duration(2), max_delay=Duration(10),
                              backoff_rate=3, jitter_strategy=JitterStrategy.NONE)
    policy = cfg.policy()
    assert policy == RetryPolicy(max_retries=3, initial_delay_s=2.0, backoff_rate=3,
                                 max_delay_s=10.0, jitter=0.0)
    strategy = create_retry_strategy(cfg)
    err = RuntimeError("x")
    assert [strategy(err, n).delay_seconds for n in (1, 2, 3)] == [2, 6, 10]
    assert not strategy(err, 4).should_retry
    assert [next_delay(policy, n) for n in (1, 2, 3)] == [2.0, 6.0, 10.0]
    assert retry_after(policy, err, 3) is None


def test_jitter_comes_from_the_rng_handed_in(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_global() -> float:
        raise AssertionError("the global random was used")
    monkeypatch.setattr(random, "random", no_global)
    strategy = RetryPresets.default()  # full jitter
    err = RuntimeError("x")
    one = [decide_retry(strategy, err, n, random.Random(7)).delay_seconds for n in (1, 2, 3)]
    two = [decide_retry(strategy, err, n, random.Random(7)).delay_seconds for n in (1, 2, 3)]
    assert one == two and all(1 <= d <= 20 for d in one)


def test_retryable_errors_narrow_what_a_step_retries() -> None:
    strategy = create_retry_strategy(RetryStrategyConfig(
        max_attempts=3, retryable_error_types=[ConnectionError]))
    assert strategy(ConnectionError("down"), 1).should_retry
    assert not strategy(ValueError("bad"), 1).should_retry
    with pytest.raises(ValidationError, match="backoff_rate"):
        RetryStrategyConfig(backoff_rate=0.5).policy()


def test_condition_polls_draw_jitter_from_the_rng_handed_in(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from alarmtop.core.durable import WaitStrategyConfig, create_wait_strategy
    from alarmtop.core.model.execution_config import decide_poll

    def no_global() -> float:
        raise AssertionError("the global random was used")
    monkeypatch.setattr(random, "random", no_global)
    strategy = create_wait_strategy(WaitStrategyConfig(lambda s: s < 10,
                                                       initial_delay=Duration(20)))
    one = [decide_poll(strategy, 0, n, random.Random(3)).delay.seconds for n in (1, 2)]
    two = [decide_poll(strategy, 0, n, random.Random(3)).delay.seconds for n in (1, 2)]
    assert one == two and all(1 <= d <= 30 for d in one)
    assert not decide_poll(strategy, 10, 1, random.Random(3)).should_continue
