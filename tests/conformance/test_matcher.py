"""The re-implemented matcher behaves as the suite's own `history.py` / `validate.py`."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.conformance.matcher import (
    CallbackAction,
    EventHistoryMatcher,
    LogValidator,
    PlaceholderContext,
    extract_callback_events,
    failure_error,
    find_matching_action,
    get_execution_status,
    success_result_bytes,
    validate_execution_result,
)


def ev(event_id: int, event_type: str = "StepStarted", **fields: Any) -> dict[str, Any]:
    return {"EventId": event_id, "EventType": event_type, "EventTimestamp": "t", **fields}


def match(expected: list[dict[str, Any]], actual: list[dict[str, Any]],
          ctx: PlaceholderContext | None = None) -> list[str]:
    return EventHistoryMatcher(ctx).match(expected, actual).errors


# -- variables and substitution -----------------------------------------------------------

def test_gen_str_variables_are_random_lowercase_alphanumerics_of_the_length() -> None:
    ctx = PlaceholderContext()
    ctx.resolve_variables({"A": "${GEN_STR:8}", "B": "${GEN_STR:12}", "C": "literal", "D": 42})
    assert re.fullmatch(r"[a-z0-9]{8}", ctx.get("A") or "")
    assert re.fullmatch(r"[a-z0-9]{12}", ctx.get("B") or "")
    assert ctx.get("C") == "literal"
    assert ctx.get("D") == "42"  # non-strings are bound as text


def test_substitution_replaces_bound_names_also_embedded_and_leaves_unbound_ones() -> None:
    ctx = PlaceholderContext()
    ctx.bind("INPUT_1", "abc")
    data = {"a": '"${INPUT_1}"', "b": ["${INPUT_1}", "${OTHER}"], "c": 3,
            "d": "Hello, ${INPUT_1}!"}
    assert ctx.substitute(data) == {"a": '"abc"', "b": ["abc", "${OTHER}"], "c": 3,
                                    "d": "Hello, abc!"}


def test_substitution_without_bindings_returns_the_value_itself() -> None:
    data = {"x": "${A}"}
    assert PlaceholderContext().substitute(data) is data


def test_rebinding_a_name_to_another_value_is_refused() -> None:
    ctx = PlaceholderContext()
    ctx.bind("X", 1)
    ctx.bind("X", 1)
    with pytest.raises(ValueError):
        ctx.bind("X", 2)


# -- history matching ---------------------------------------------------------------------

def test_placeholder_binds_on_first_use_then_requires_the_same_value() -> None:
    expected = [{"EventId": 2, "Id": "${ID1}"}, {"EventId": 3, "Id": "${ID1}"}]
    ctx = PlaceholderContext()
    assert match(expected, [ev(2, Id="a"), ev(3, Id="a")], ctx) == []
    assert ctx.get("ID1") == "a"
    errors = match(expected, [ev(2, Id="a"), ev(3, Id="b")])
    assert errors == ["Event[EventId=3].Id: placeholder ${ID1} was previously bound to 'a', "
                      "but got 'b'"]


def test_placeholders_bind_any_json_type_and_distinct_names_may_share_a_value() -> None:
    expected = [{"EventId": 2, "Id": "${A}", "X": "${B}"}]
    ctx = PlaceholderContext()
    assert match(expected, [ev(2, Id="same", X="same")], ctx) == []
    assert match([{"EventId": 2, "X": "${N}"}], [ev(2, X={"k": [1]})], ctx) == []
    assert ctx.get("N") == {"k": [1]}


def test_a_variable_bound_before_matching_is_compared_not_rebound() -> None:
    ctx = PlaceholderContext()
    ctx.resolve_variables({"CB_NAME": "approval"})
    assert match([{"EventId": 2, "Name": "${CB_NAME}"}], [ev(2, Name="approval")], ctx) == []
    assert match([{"EventId": 2, "Name": "${CB_NAME}"}], [ev(2, Name="other")], ctx) != []


def test_embedded_placeholders_are_substituted_then_compared_literally() -> None:
    ctx = PlaceholderContext()
    ctx.bind("INPUT_1", "abc")
    expected = [{"EventId": 2, "D": {"Result": {"Payload": '"${INPUT_1}"'}}}]
    assert match(expected, [ev(2, D={"Result": {"Payload": '"abc"'}})], ctx) == []
    assert match(expected, [ev(2, D={"Result": {"Payload": "abc"}})], ctx) != []


def test_regex_searches_the_text_of_the_actual_value_even_for_numbers() -> None:
    expected = [{"EventId": 2, "Delay": "${/^[0-5]$/}", "T": "${/.*TransientError$/}"}]
    assert match(expected, [ev(2, Delay=3, T="mod.TransientError")]) == []
    errors = match(expected, [ev(2, Delay=7, T="ValueError")])
    assert len(errors) == 2 and "does not match regex pattern" in errors[0]


def test_a_regex_is_not_a_placeholder_and_binds_nothing() -> None:
    ctx = PlaceholderContext()
    assert match([{"EventId": 2, "X": "${/a/}"}], [ev(2, X="cat")], ctx) == []
    assert ctx.bindings == {}


@pytest.mark.parametrize("wildcard", ["*", {}])
def test_wildcards_accept_any_value_but_the_key_must_exist(wildcard: Any) -> None:
    for value in (None, "x", 3, {"a": 1}, [1, 2]):
        assert match([{"EventId": 2, "D": wildcard}], [ev(2, D=value)]) == []
    assert match([{"EventId": 2, "D": wildcard}], [ev(2)]) == [
        "Event[EventId=2].D: key missing in actual event"]


def test_dicts_match_on_the_expected_keys_only() -> None:
    expected = [{"EventId": 2, "D": {"Error": {"Payload": {"ErrorType": "E"}}}}]
    actual = [ev(2, D={"Error": {"Payload": {"ErrorType": "E", "ErrorMessage": "m"},
                                 "Truncated": False}, "More": 1})]
    assert match(expected, actual) == []
    assert match([{"EventId": 2, "D": {"RetryDetails": {}}}], [ev(2, D={})]) == [
        "Event[EventId=2].D.RetryDetails: key missing in actual event"]


def test_lists_need_equal_length_and_match_element_wise() -> None:
    assert match([{"EventId": 2, "L": [1, "*"]}], [ev(2, L=[1, 9])]) == []
    assert match([{"EventId": 2, "L": [1]}], [ev(2, L=[1, 2])]) == [
        "Event[EventId=2].L: list length mismatch (expected 1, got 2)"]
    assert match([{"EventId": 2, "L": [1, 2]}], [ev(2, L=[1, 3])]) == [
        "Event[EventId=2].L[1]: expected 2, got 3"]


def test_literals_compare_with_their_types() -> None:
    assert match([{"EventId": 2, "Duration": 2}], [ev(2, Duration="2")]) == [
        "Event[EventId=2].Duration: expected 2, got '2'"]
    assert match([{"EventId": 2, "P": "1"}], [ev(2, P=1)]) != []
    assert match([{"EventId": 2, "D": {"x": 1}}], [ev(2, D="text")]) != []  # dict vs not


def test_events_are_paired_by_event_id_and_extra_actual_events_are_ignored() -> None:
    expected = [{"EventId": 3, "EventType": "StepSucceeded"}]
    actual = [ev(1, "ExecutionStarted"), ev(2), ev(3, "StepSucceeded"), ev(4, "Other")]
    assert match(expected, actual) == []
    assert match(expected, list(reversed(actual))) == []  # order does not matter, ids do
    assert match([{"EventId": 9}], actual) == ["No actual event found for EventId=9"]
    assert match([{"EventType": "X"}], actual) == [
        "Expected event missing EventId: {'EventType': 'X'}"]


def test_a_missing_event_shifts_ids_and_fails_later_assertions() -> None:
    expected = [{"EventId": 2, "EventType": "StepStarted"},
                {"EventId": 3, "EventType": "StepSucceeded"}]
    actual = [ev(1, "ExecutionStarted"), ev(2, "StepSucceeded")]
    assert match(expected, actual) == [
        "Event[EventId=2].EventType: expected 'StepStarted', got 'StepSucceeded'",
        "No actual event found for EventId=3"]


def test_duplicate_actual_event_ids_keep_the_last() -> None:
    actual = [ev(2, "A"), ev(2, "B")]
    assert match([{"EventId": 2, "EventType": "B"}], actual) == []


def test_bindings_follow_event_order_then_key_order() -> None:
    ctx = PlaceholderContext()
    expected = [{"EventId": 3, "Id": "${X}"}, {"EventId": 2, "Id": "${X}"}]
    errors = match(expected, [ev(2, Id="two"), ev(3, Id="three")], ctx)
    assert ctx.get("X") == "three"
    assert errors == ["Event[EventId=2].Id: placeholder ${X} was previously bound to 'three', "
                      "but got 'two'"]


def test_match_result_reports_success_and_bindings() -> None:
    result = EventHistoryMatcher().match([{"EventId": 2, "Id": "${ID1}"}], [ev(2, Id="1")])
    assert result and result.success and result.resolved_placeholders == {"ID1": "1"}


# -- result check -------------------------------------------------------------------------

def test_result_check_compares_status_first_and_stops_there() -> None:
    errors = validate_execution_result({"Status": "FAILED"},
                                       {"ExecutionStatus": "SUCCEEDED", "Result": 1})
    assert errors == ["Expected ExecutionStatus='SUCCEEDED', got 'FAILED'"]


def test_result_check_of_a_non_success_checks_the_status_only() -> None:
    assert validate_execution_result({"Status": "FAILED", "Result": "x"},
                                     {"ExecutionStatus": "FAILED", "Result": "y"}) == []


def test_result_is_json_decoded_once_and_compared_after_substitution() -> None:
    ctx = PlaceholderContext()
    ctx.bind("INPUT_1", "abc")
    ok = {"Status": "SUCCEEDED", "Result": '"Hello, abc!"'}
    assert validate_execution_result(ok, {"ExecutionStatus": "SUCCEEDED",
                                          "Result": "Hello, ${INPUT_1}!"}, ctx) == []
    double = {"Status": "SUCCEEDED", "Result": '"\\"HELLO\\""'}  # the 5-16 quirk
    assert validate_execution_result(double, {"Result": '"HELLO"'}) == []
    raw = {"Status": "SUCCEEDED", "Result": "not json"}
    assert validate_execution_result(raw, {"Result": "not json"}) == []


def test_an_empty_result_means_null_and_an_absent_result_is_not_checked() -> None:
    assert validate_execution_result({"Status": "SUCCEEDED", "Result": "null"},
                                     {"ExecutionStatus": "SUCCEEDED", "Result": None}) == []
    assert validate_execution_result({"Status": "SUCCEEDED", "Result": "1"},
                                     {"ExecutionStatus": "SUCCEEDED", "Result": None}) == [
        "Expected Result=None, got 1"]
    assert validate_execution_result({"Status": "SUCCEEDED", "Result": "1"},
                                     {"ExecutionStatus": "SUCCEEDED"}) == []
    assert validate_execution_result(None, {}) == [
        "Failed to retrieve durable execution details"]


def test_execution_status_comes_from_the_last_terminal_event() -> None:
    assert get_execution_status({"Events": [ev(1, "ExecutionStarted")]}) is None
    assert get_execution_status({"Events": [ev(5, "ExecutionSucceeded"),
                                            ev(6, "InvocationCompleted")]}) == "SUCCEEDED"
    assert get_execution_status({"Events": [ev(6, "ExecutionFailed")]}) == "FAILED"
    assert get_execution_status({"ExecutionStatus": "RUNNING", "Events": []}) == "RUNNING"
    assert get_execution_status({"Events": [ev(6, "ExecutionStopped")]}) is None


# -- callbacks ----------------------------------------------------------------------------

def test_callback_actions_parse_as_the_validator_does() -> None:
    a = CallbackAction.from_dict({"CallbackName": "x", "Operation": "Success", "Delay": 3})
    assert (a.operation, a.delay_seconds, a.payload) == ("success", 3.0, None)
    with pytest.raises(ValueError):
        CallbackAction.from_dict({"CallbackName": "x", "Operation": "cancel"})
    with pytest.raises(ValueError):
        CallbackAction.from_dict({"Operation": "success"})


def cb_event(event_id: int, name: str | None, callback_id: str) -> dict[str, Any]:
    fields: dict[str, Any] = {"CallbackStartedDetails": {"CallbackId": callback_id}}
    if name is not None:
        fields["Name"] = name
    return ev(event_id, "CallbackStarted", **fields)


def test_actions_match_by_name_wildcard_or_regex_and_are_used_once() -> None:
    ctx = PlaceholderContext()
    ctx.bind("CB_NAME_B", "bee")
    actions = [CallbackAction("${CB_NAME_B}", "success"), CallbackAction("alpha", "success"),
               CallbackAction("${/^ga/}", "failure"), CallbackAction("*", "heartbeat")]
    used: set[int] = set()
    assert find_matching_action(cb_event(2, "alpha", "a"), actions, used, ctx)[1] == 1
    assert find_matching_action(cb_event(3, "bee", "b"), actions, used, ctx)[1] == 0
    assert find_matching_action(cb_event(4, "gamma", "g"), actions, used, ctx)[1] == 2
    used.add(0)
    assert find_matching_action(cb_event(3, "bee", "b"), actions, used, ctx)[1] == 3
    assert find_matching_action(cb_event(5, None, "n"), actions[:3], set(), ctx) == (None, None)


def test_only_unhandled_callback_started_events_are_answered_in_event_order() -> None:
    events = [ev(1, "ExecutionStarted"), cb_event(2, "a", "id-a"), cb_event(3, "b", "id-b"),
              ev(4, "CallbackStarted", CallbackStartedDetails={})]
    assert [e["EventId"] for e in extract_callback_events(events, {"id-a"})] == [3]


def test_payloads_are_encoded_as_the_validator_sends_them() -> None:
    assert success_result_bytes("x") == b'"x"'
    assert success_result_bytes({"status": "approved"}) == b'{"status": "approved"}'
    assert success_result_bytes(42) == b"42"
    assert success_result_bytes(None) is None
    assert failure_error({"ErrorType": "E", "ErrorMessage": "m", "Other": 1}) == {
        "ErrorType": "E", "ErrorMessage": "m"}
    assert failure_error(None) is None
    with pytest.raises(ValueError):
        failure_error("not a dict")


# -- logs ---------------------------------------------------------------------------------

def line(message: str, ts: int) -> dict[str, Any]:
    return {"message": message, "timestamp": ts, "ingestionTime": ts}


def test_log_counts_regexes_and_substitution() -> None:
    ctx = PlaceholderContext()
    ctx.bind("INPUT_1", "abc")
    logs = [line("running abc", 1), line("running abc", 2), line("done", 3)]
    ok = LogValidator().validate([{"match": {"message": "/${INPUT_1}/"}, "count": 2},
                                  {"match": {"message": "done"}},
                                  {"match": {"message": "/\\[ERROR\\]/"}, "count": 0}],
                                 logs, ctx)
    assert ok.success
    bad = LogValidator().validate([{"match": {"message": "/abc/"}, "count": 1},
                                   {"match": {"message": "missing"}},
                                   {"match": {"message": "/abc/"}, "max_count": 1}], logs)
    assert bad.errors == [
        "ExpectedLogs[0] match(message='/abc/'): expected exactly 1 match(es), got 2",
        "ExpectedLogs[1] match(message='missing'): expected at least 1 match(es), got 0",
        "ExpectedLogs[2] match(message='/abc/'): expected at most 1 match(es), got 2"]


def test_log_json_lines_expose_their_fields_and_anchors_order_them() -> None:
    logs = [line('{"hook": "start", "first": true}', 1), line('{"hook": "end"}', 5)]
    v = LogValidator()
    assert v.validate([{"match": {"hook": "end"}, "after": {"hook": "start"}}], logs).success
    late = v.validate([{"match": {"hook": "start"}, "after": {"hook": "end"}}], logs)
    assert late.errors and "out of order" in late.errors[0]
    typo = v.validate([{"match": {"hook": "end"}, "before": {"hook": "nope"}}], logs)
    assert typo.errors and "matched no log records" in typo.errors[0]
    assert v.validate([{"match": {"first": True}}], logs).success
