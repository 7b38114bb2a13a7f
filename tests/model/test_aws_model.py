"""The service side's decisions, pure: no loop, no database, no SDK.

What a checkpoint may do (`aws_checkpoint`), what the handler is shown
(`aws_delta`), tokens (`aws_state`), what an invocation's answer means
(`aws_invocation`), where a redrive or fork cuts (`aws_redrive`), names and ids
(`aws_arn`, `callback_ids`), limits (`aws_limits`), and the alarm policy's
`final` failure.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from alarmtop.core.model import aws_delta, aws_invocation
from alarmtop.core.model.alarm_policy import AlarmRecord, AlarmState, RetryPolicy, fail
from alarmtop.core.model.aws_arn import (
    Place,
    child_execution_id,
    execution_id_of,
    parse_function_ref,
    run_id,
)
from alarmtop.core.model.aws_checkpoint import Target, apply_checkpoint
from alarmtop.core.model.aws_errors import (
    INVALID_TOKEN,
    AwsServiceError,
    InvalidParameterValueException,
    ResourceNotFoundException,
)
from alarmtop.core.model.aws_limits import LIMIT_ERROR, AwsLimits
from alarmtop.core.model.aws_redrive import cut_at, first_failed, fork_point, redrive_cut
from alarmtop.core.model.aws_state import AwsState, check_token, decode_token, encode_token
from alarmtop.core.model.aws_wire import operation_wire, parse_updates
from alarmtop.core.model.callback_ids import (
    AWS_CALLBACK_ID,
    decode_callback_id,
    encode_aws_callback_id,
    encode_callback_id,
)
from alarmtop.core.model.execution_errors import ValidationError
from alarmtop.core.model.operations import OperationRecord, OpStatus, OpType

NOW = 1_800_000_000_000
LIMITS = AwsLimits()


def state() -> AwsState:
    return AwsState("fn", "$LATEST", "arn")


def resolve(ref: str, op_id: str) -> Target:
    if ref != "known":
        raise InvalidParameterValueException(f"cannot invoke {ref!r}")
    return Target("known", "$LATEST", f"child-{op_id}", f"arn-{op_id}")


def apply(updates: list[dict[str, Any]], ops: dict[str, OperationRecord] | None = None,
          st: AwsState | None = None, limits: AwsLimits = LIMITS, now: int = NOW) -> Any:
    return apply_checkpoint(parse_updates(updates), ops or {}, st or state(), now, limits,
                            lambda op_id: encode_aws_callback_id("e1", op_id), resolve)


def step(op_id: str, action: str, **extra: Any) -> dict[str, Any]:
    return {"Id": op_id, "Type": "STEP", "Action": action, "SubType": "Step", **extra}


def ops_of(applied: Any) -> dict[str, OperationRecord]:
    return dict(applied.changed)


# -- the wire ------------------------------------------------------------------------------

@pytest.mark.parametrize("update, what", [
    ({"Id": "a", "Type": "NOPE", "Action": "START"}, "unknown operation type"),
    ({"Id": "a", "Type": "STEP", "Action": "JUMP"}, "unknown action"),
    ({"Id": "bad id", "Type": "STEP", "Action": "START"}, "Id"),
    ({"Id": "a", "Type": "WAIT", "Action": "START", "WaitOptions": {"WaitSeconds": 0}},
     "WaitSeconds"),
    ({"Id": "a", "Type": "STEP", "Action": "START", "Payload": 3}, "Payload"),
    ({"Id": "a", "Type": "STEP", "Action": "FAIL", "Error": {"ErrorType": 1}}, "ErrorType"),
])
def test_a_malformed_update_refuses_the_checkpoint(update: dict[str, Any], what: str) -> None:
    with pytest.raises(InvalidParameterValueException, match=what):
        parse_updates([update])


# -- the batch -----------------------------------------------------------------------------

def test_one_execution_update_at_most_and_last() -> None:
    ex = {"Id": "r", "Type": "EXECUTION", "Action": "SUCCEED", "Payload": "1"}
    with pytest.raises(InvalidParameterValueException, match="multiple EXECUTION"):
        apply([ex, ex])
    with pytest.raises(InvalidParameterValueException, match="must be the last"):
        apply([ex, step("a", "START")])
    out = apply([step("a", "SUCCEED", Payload='"x"'), ex])
    assert out.outcome == {"status": "SUCCEEDED", "result": "1"}


def test_an_id_twice_only_as_a_start_and_its_end() -> None:
    out = apply([step("a", "START"), step("a", "SUCCEED", Payload="1")])
    assert [e[0] for e in out.events] == ["StepStarted", "StepSucceeded"]
    with pytest.raises(InvalidParameterValueException, match="same ID"):
        apply([step("a", "SUCCEED", Payload="1"), step("a", "START")])


def test_actions_are_those_of_the_type() -> None:
    with pytest.raises(InvalidParameterValueException, match="RETRY is not an action"):
        apply([{"Id": "w", "Type": "WAIT", "Action": "RETRY"}])


def test_a_refused_checkpoint_changes_nothing() -> None:
    st, ops = state(), {}
    with pytest.raises(AwsServiceError):
        apply([step("a", "START"), {"Id": "b", "Type": "WAIT", "Action": "CANCEL"}], ops, st)
    assert (st.touch, st.created, st.bytes) == (0, 0, 0) and ops == {}


# -- transitions ---------------------------------------------------------------------------

def test_a_step_starts_again_only_once_ready() -> None:
    ops = ops_of(apply([step("a", "START"),
                        step("a", "RETRY", Error={"ErrorType": "E"},
                             StepOptions={"NextAttemptDelaySeconds": 3})]))
    assert ops["a"].status is OpStatus.PENDING and ops["a"].next_attempt_ms == NOW + 3000
    with pytest.raises(InvalidParameterValueException, match="Invalid current STEP state"):
        apply([step("a", "START")], ops)
    ready = dict(ops)
    ready["a"] = OperationRecord.from_dict({**ops["a"].to_dict(), "status": "READY",
                                            "extra": dict(ops["a"].extra)})
    again = ops_of(apply([step("a", "START")], ready))
    assert again["a"].status is OpStatus.STARTED and again["a"].attempt == 1


def test_a_retry_keeps_its_payload_as_the_result() -> None:
    """wait_for_condition keeps its state in the step's Result across polls."""
    out = apply([step("c", "START", SubType="WaitForCondition"),
                 step("c", "RETRY", SubType="WaitForCondition", Payload="7",
                      StepOptions={"NextAttemptDelaySeconds": 2})])
    op = out.changed["c"]
    assert (op.result, op.attempt, op.next_attempt_ms) == ("7", 1, NOW + 2000)
    assert out.events[-1][0] == "StepSucceeded"
    assert out.events[-1][2]["RetryDetails"] == {"CurrentAttempt": 1,
                                                 "NextAttemptDelaySeconds": 2}
    assert operation_wire(op)["StepDetails"]["Result"] == "7"


def test_a_retry_needs_its_options_and_not_both_error_and_payload() -> None:
    with pytest.raises(InvalidParameterValueException, match="StepOptions"):
        apply([step("a", "RETRY", Error={"ErrorType": "E"})])
    with pytest.raises(InvalidParameterValueException, match="both error and payload"):
        apply([step("a", "RETRY", Error={"ErrorType": "E"}, Payload="1",
                    StepOptions={"NextAttemptDelaySeconds": 1})])


def test_a_context_starts_once_and_closes_from_started() -> None:
    ctx = {"Id": "c", "Type": "CONTEXT", "SubType": "RunInChildContext"}
    ops = ops_of(apply([{**ctx, "Action": "START"}]))
    with pytest.raises(InvalidParameterValueException, match="Invalid current CONTEXT"):
        apply([{**ctx, "Action": "START"}], ops)
    done = ops_of(apply([{**ctx, "Action": "SUCCEED", "Payload": "1",
                          "ContextOptions": {"ReplayChildren": True}}], ops))
    assert done["c"].extra["replay_children"]


def test_metadata_must_match_what_was_started() -> None:
    ops = ops_of(apply([step("a", "START", Name="one")]))
    with pytest.raises(InvalidParameterValueException, match="Inconsistent operation name"):
        apply([step("a", "SUCCEED", Name="two", Payload="1")], ops)


def test_a_parent_must_be_a_context() -> None:
    ops = ops_of(apply([step("a", "START")]))
    with pytest.raises(InvalidParameterValueException, match="Invalid parent"):
        apply([step("b", "START", ParentId="a")], ops)
    ok = apply([{"Id": "c", "Type": "CONTEXT", "Action": "START"},
                step("d", "START", ParentId="c")])
    assert ok.changed["d"].parent_id == "c"


def test_a_callback_gets_an_id_in_awss_alphabet_and_its_deadlines() -> None:
    out = apply([{"Id": "cb", "Type": "CALLBACK", "Action": "START", "SubType": "Callback",
                  "CallbackOptions": {"TimeoutSeconds": 30, "HeartbeatTimeoutSeconds": 5}}])
    op = out.changed["cb"]
    assert AWS_CALLBACK_ID.fullmatch(op.callback_id or "")
    assert (op.timeout_at_ms, op.heartbeat_at_ms) == (NOW + 30_000, NOW + 5000)
    assert out.events[0][2] == {"CallbackId": op.callback_id, "Timeout": 30,
                                "HeartbeatTimeout": 5}


def test_an_invoke_of_an_unknown_function_is_refused() -> None:
    inv = {"Id": "i", "Type": "CHAINED_INVOKE", "Action": "START", "Payload": "1"}
    with pytest.raises(InvalidParameterValueException, match="nobody"):
        apply([{**inv, "ChainedInvokeOptions": {"FunctionName": "nobody"}}])
    out = apply([{**inv, "ChainedInvokeOptions": {"FunctionName": "known", "TenantId": "t"}}])
    details = out.events[0][2]
    assert details["DurableExecutionArn"] == "arn-i" and details["TenantId"] == "t"
    assert [t.child_id for _, t in out.invokes] == ["child-i"]


# -- limits --------------------------------------------------------------------------------

def test_a_payload_over_the_operation_limit_is_refused() -> None:
    with pytest.raises(InvalidParameterValueException, match="the limit is 10 bytes"):
        apply([step("a", "SUCCEED", Payload="x" * 11)], limits=AwsLimits(operation_bytes=10))


def test_an_execution_over_its_limits_fails() -> None:
    out = apply([step(f"s{i}", "START") for i in range(3)], limits=AwsLimits(operations=2))
    assert out.outcome is not None and out.outcome["error"]["ErrorType"] == LIMIT_ERROR
    out = apply([step("a", "SUCCEED", Payload="x" * 50)],
                limits=AwsLimits(execution_bytes=20))
    assert out.outcome is not None and "checkpointed data" in out.over_limit


def test_limits_refuse_nonsense() -> None:
    with pytest.raises(ValidationError):
        AwsLimits(operations=0)
    assert AwsLimits().execution_timeout(None) == 365 * 24 * 3600
    assert AwsLimits(execution_s=100).execution_timeout(300) == 100


# -- the service's timers, and what the handler is shown -----------------------------------

def test_due_timers_complete_in_the_order_they_came() -> None:
    st = state()
    ops = ops_of(apply([
        {"Id": "w", "Type": "WAIT", "Action": "START", "SubType": "Wait",
         "WaitOptions": {"WaitSeconds": 6}},
        {"Id": "cb", "Type": "CALLBACK", "Action": "START", "SubType": "Callback",
         "CallbackOptions": {"TimeoutSeconds": 3}},
        step("r", "RETRY", Error={"ErrorType": "E"}, StepOptions={"NextAttemptDelaySeconds": 1}),
    ], st=st))
    changed, events = aws_delta.complete_due(ops, st, NOW + 6000)
    assert [(op.id, op.status) for op in changed] == [
        ("r", OpStatus.READY), ("cb", OpStatus.TIMED_OUT), ("w", OpStatus.SUCCEEDED)]
    assert [e[0] for e in events] == ["CallbackTimedOut", "WaitSucceeded"]
    assert changed[1].error == {"ErrorType": "Callback.Timeout",
                                "ErrorMessage": "Callback timed out"}
    assert aws_delta.complete_due(ops, st, NOW)[0] == []


def test_the_heartbeat_deadline_that_came_first_decides() -> None:
    st = state()
    ops = ops_of(apply([{"Id": "cb", "Type": "CALLBACK", "Action": "START",
                         "CallbackOptions": {"TimeoutSeconds": 30,
                                             "HeartbeatTimeoutSeconds": 5}}], st=st))
    changed, _ = aws_delta.complete_due(ops, st, NOW + 60_000)
    assert changed[0].error["ErrorType"] == "Callback.Heartbeat"


def test_a_closed_context_hides_its_children_unless_replay_children() -> None:
    st = state()
    ops = ops_of(apply([{"Id": "c", "Type": "CONTEXT", "Action": "START"},
                        step("s", "SUCCEED", ParentId="c", Payload="1"),
                        {"Id": "c", "Type": "CONTEXT", "Action": "SUCCEED", "Payload": "1"}],
                       st=st))
    assert [op.id for op in aws_delta.visible(ops)] == ["c"]
    kept = ops_of(apply([{"Id": "d", "Type": "CONTEXT", "Action": "START"},
                         step("t", "SUCCEED", ParentId="d", Payload="1"),
                         {"Id": "d", "Type": "CONTEXT", "Action": "SUCCEED", "Payload": "",
                          "ContextOptions": {"ReplayChildren": True}}], st=st))
    assert [op.id for op in aws_delta.visible(kept)] == ["d", "t"]


def test_only_what_the_handler_has_not_seen_is_returned() -> None:
    st = state()
    ops = ops_of(apply([step("a", "START")], st=st))
    st.seen = st.touch
    assert aws_delta.unseen(ops, st) == []
    ops.update(ops_of(apply([step("b", "START")], ops, st)))
    assert [op.id for op in aws_delta.unseen(ops, st)] == ["b"]


def test_pages_and_their_markers() -> None:
    wires = [{"Id": f"o{i}", "Payload": "x" * 40} for i in range(5)]
    first, marker = aws_delta.page(wires, 0, 150, None, seq=4)
    assert len(first) == 2 and marker == "4:2"
    start = aws_delta.marker_start(marker, 4, len(wires))
    rest, end = aws_delta.page(wires, start, 10_000, None, seq=4)
    assert [w["Id"] for w in rest] == ["o2", "o3", "o4"] and end is None
    with pytest.raises(InvalidParameterValueException, match="Invalid marker"):
        aws_delta.marker_start(marker, 5, len(wires))  # a checkpoint moved on
    assert aws_delta.page(wires, 0, 1, None, seq=1)[0] == wires[:1]  # never empty


# -- tokens --------------------------------------------------------------------------------

def test_tokens_name_the_invocation_and_the_sequence() -> None:
    st = state()
    st.invocation, st.seq = 2, 7
    token = encode_token("e1", 2, 7)
    assert decode_token(token) == ("e1", 2, 7)
    base64.b64decode(token, validate=True)  # AWS's alphabet
    check_token("e1", st, token, in_invocation=True)
    for bad, why in ((encode_token("e2", 2, 7), "belong to this"),
                     (encode_token("e1", 1, 7), "has ended"),
                     (encode_token("e1", 2, 6), "already used"), ("%%", "belong")):
        with pytest.raises(InvalidParameterValueException, match=INVALID_TOKEN) as info:
            check_token("e1", st, bad, in_invocation=True)
        assert why in str(info.value)
    st.revoked = True
    with pytest.raises(InvalidParameterValueException, match="withdrawn"):
        check_token("e1", st, token, in_invocation=True)


# -- invocations ---------------------------------------------------------------------------

def test_an_invocations_answer() -> None:
    read = aws_invocation.read_output
    assert read({"Status": "SUCCEEDED", "Result": "1"}, LIMITS).kind == "succeeded"
    assert read({"Status": "FAILED", "Error": {"ErrorType": "E"}}, LIMITS).error == {
        "ErrorType": "E"}
    assert read({"Status": "PENDING"}, LIMITS).kind == "pending"
    assert read({"Status": "MAYBE"}, LIMITS).kind == "invalid"
    too_big = read({"Status": "SUCCEEDED", "Result": "x" * 11}, AwsLimits(response_bytes=10))
    assert too_big.error["ErrorType"] == "Function.ResponseSizeTooLarge"


def test_failed_invocations_retry_then_become_a_dead_letter() -> None:
    st, policy = state(), RetryPolicy(max_retries=2, initial_delay_s=1.0)
    aws_invocation.failed(st, {"ErrorType": "E", "ErrorMessage": "boom"}, policy, NOW)
    assert (st.failures, st.retry_at_ms, st.dead_pending) == (1, NOW + 1000, None)
    aws_invocation.failed(st, {"ErrorType": "E", "ErrorMessage": "boom"}, policy, NOW)
    assert st.retry_at_ms == NOW + 2000
    aws_invocation.failed(st, {"ErrorType": "E", "ErrorMessage": "boom"}, policy, NOW)
    assert st.dead_pending is not None and "3 invocations" in st.dead_pending
    aws_invocation.succeeded(st)
    assert (st.failures, st.last_failure) == (0, None)


def test_a_final_failure_is_a_dead_letter_at_once() -> None:
    rec = AlarmRecord("Execution", "e1", NOW)
    assert fail(rec, NOW, "boom", RetryPolicy()).record.state is AlarmState.RETRYING
    assert fail(rec, NOW, "boom", RetryPolicy(), final=True).record.state is AlarmState.DEAD


# -- redrive and fork ----------------------------------------------------------------------

def _record() -> dict[str, OperationRecord]:
    out = apply([step("a", "SUCCEED", Payload="1"),
                 {"Id": "c", "Type": "CONTEXT", "Action": "START"},
                 step("b", "SUCCEED", ParentId="c", Payload="2"),
                 step("x", "FAIL", ParentId="c", Error={"ErrorType": "E"}),
                 {"Id": "c", "Type": "CONTEXT", "Action": "FAIL", "Error": {"ErrorType": "E"}},
                 step("z", "SUCCEED", Payload="3")])
    return ops_of(out)


def test_a_redrive_cuts_at_the_first_failed_step_with_its_contexts() -> None:
    ops = _record()
    assert first_failed(ops) == "x"
    cut = redrive_cut(ops)
    assert (cut.kept, cut.dropped) == (("a", "b"), ("c", "x", "z"))
    assert [e["type"] for e in cut.expect] == ["CONTEXT", "STEP", "STEP"]
    assert cut_at(ops, None).dropped == ()


def test_a_fork_point_is_an_id_or_a_name_that_occurs_once() -> None:
    ops = _record()
    assert fork_point(ops, "b") == "b"
    with pytest.raises(ValidationError, match="no operation"):
        fork_point(ops, "nope")


# -- names and ids -------------------------------------------------------------------------

def test_arns_and_function_names() -> None:
    arn = Place().execution_arn("fn", "$LATEST", "e-1")
    assert execution_id_of(arn) == "e-1" and arn.endswith(run_id("e-1"))
    assert execution_id_of("e-1") == "e-1"
    for bad in ("arn:aws:lambda:nope", "has space", ""):
        with pytest.raises(InvalidParameterValueException):
            execution_id_of(bad)
    assert parse_function_ref("fn") == ("fn", None)
    assert parse_function_ref("fn:$LATEST") == ("fn", "$LATEST")
    assert parse_function_ref("arn:aws:lambda:us-east-1:123456789012:function:fn:3") == (
        "fn", "3")
    child = child_execution_id("p" * 64, "op", 2)
    assert len(child) <= 64 and child != child_execution_id("p" * 64, "op", 3)


def test_callback_ids_of_both_kinds_decode() -> None:
    aws_id = encode_aws_callback_id("e1", "op-1")
    assert AWS_CALLBACK_ID.fullmatch(aws_id) and decode_callback_id(aws_id) == ("e1", "op-1")
    assert decode_callback_id(encode_callback_id("e1", "2")) == ("e1", "2")
    assert decode_callback_id("AAAA") is None and decode_callback_id("x" * 2000) is None


def test_errors_cross_as_data() -> None:
    err = ResourceNotFoundException("gone")
    back = AwsServiceError.from_dict(err.to_dict())
    assert type(back) is ResourceNotFoundException and back.status == 404
    assert OpType.CHAINED_INVOKE.value == "CHAINED_INVOKE"
