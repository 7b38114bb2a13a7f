"""The ops protocol on the wire, without sockets: what `decode` accepts and how it
says no, and the shapes `encode`, `result`, `failure` and `welcome` produce."""

from __future__ import annotations

import json
from typing import Any

import pytest

from alarmtop.server.wire import (
    MAX_DEPTH,
    MAX_PAGE,
    OPERATOR_OPS,
    OPS,
    PROTOCOL,
    Command,
    Hello,
    ProtocolError,
    close_reason,
    decode,
    encode,
    failure,
    result,
    split_object,
    welcome,
)

# The protocol contract (DESIGN section 9 plus the paging queries): op -> required fields.
REQUIRED: dict[str, set[str]] = {
    "rearm": {"object"}, "fire_now": {"object"}, "clear_dead_letter": {"object"},
    "inject_fault": {"target", "kind"}, "clear_fault": {"fault_id"},
    "send_callback": {"callback_id"}, "retry_compensation": {"execution_id"},
    "resolve": {"execution_id", "note"}, "abort": {"execution_id"},
    "hand_to_human": {"execution_id"},
    "alarms": set(), "alarm": {"object"}, "objects": set(), "executions": set(),
    "execution": {"execution_id"}, "audit": set(), "faults": set(), "snapshot": set(),
    # the execution tools (server/execution_commands.py)
    "pause": {"execution_id"}, "resume": {"execution_id"}, "redrive": {"execution_id"},
    "fork": {"execution_id", "from_step"}, "complete_callback": {"callback_id"},
    "replay_check": {"execution_id"}, "execution_timers": set(),
    # the operator tools (server/alarm_commands.py, timer_commands.py, bulk_commands.py)
    "pause_alarm": {"object"}, "resume_alarm": {"object"}, "snooze_alarm": {"object", "by_ms"},
    "fire_timer": {"key"}, "snooze_timer": {"key", "by_ms"}, "bulk_preview": {"selection"},
    "bulk_start": {"action"}, "bulk_cancel": {"batch_id"}, "timers": set(),
    "bulk": {"batch_id"}, "bulks": set(),
    "nodes": set(),  # the fleet (DESIGN section 10)
}
TOOL_OPERATOR_OPS = {"pause", "resume", "redrive", "fork", "complete_callback",
                     "pause_alarm", "resume_alarm", "snooze_alarm", "fire_timer",
                     "snooze_timer", "bulk_preview", "bulk_start", "bulk_cancel"}
DESIGN_OPERATOR_OPS = {"rearm", "fire_now", "inject_fault", "clear_fault", "send_callback",
                       "retry_compensation", "resolve", "abort", "hand_to_human"}
DESIGN_QUERIES = {"alarms", "objects", "executions", "execution", "audit", "nodes"}

# A valid value, and values of the wrong type, for each declared field type.
GOOD: dict[str, Any] = {"str": "Flaky/a", "int": 5, "number": 1.5, "bool": True,
                        "any": {"k": 1}, "list": [5, "Flaky", "a"], "dict": {"kind": "alarms"}}
BAD: dict[str, list[Any]] = {
    "str": [5, True, ["x"], {"s": 1}],
    "int": ["5", True, False, 1.5, [1]],
    "number": ["1.5", True, [1.0]],
    "bool": [1, 0, "true"],
    "list": ["x", 5, True, {"a": 1}],
    "dict": ["a", 5, ["k"]],
}


def kind(t: type | tuple[type, ...]) -> str:
    if isinstance(t, tuple):
        return "number"
    return {str: "str", int: "int", bool: "bool", object: "any", list: "list",
            dict: "dict"}[t]


def frame(op: str, cid: int | None = 7, **fields: Any) -> str:
    msg: dict[str, Any] = {"op": op, **fields}
    if cid is not None:
        msg["id"] = cid
    return json.dumps(msg)


def valid_fields(op: str, *, all_fields: bool = False) -> dict[str, Any]:
    _, spec = OPS[op]
    return {name: GOOD[kind(f.type)] for name, f in spec.items() if f.required or all_fields}


def reject(text: str | bytes) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        decode(text)
    return info.value


# -- the op table ---------------------------------------------------------------------------


def test_op_table_matches_the_contract() -> None:
    """Every op of DESIGN section 9 exists with the required fields the contract expects,
    and exactly the mutating ones need the operator role."""
    assert DESIGN_OPERATOR_OPS | DESIGN_QUERIES <= set(OPS)
    assert {op: {n for n, f in OPS[op][1].items() if f.required} for op in OPS} == REQUIRED
    assert OPERATOR_OPS == DESIGN_OPERATOR_OPS | {"clear_dead_letter"} | TOOL_OPERATOR_OPS
    assert not OPERATOR_OPS & DESIGN_QUERIES


@pytest.mark.parametrize("op", sorted(OPS))
def test_each_op_decodes_with_its_required_fields(op: str) -> None:
    """A frame with just the required fields decodes to a Command carrying them and the id;
    `needs_operator` follows the op table."""
    fields = valid_fields(op)
    cmd = decode(frame(op, 42, **fields))
    assert cmd == Command(op, 42, fields)
    assert isinstance(cmd, Command) and cmd.needs_operator is (op in OPERATOR_OPS)


@pytest.mark.parametrize("op", sorted(OPS))
def test_each_op_decodes_with_all_its_fields(op: str) -> None:
    """Optional fields are accepted and passed through unchanged (limits in range)."""
    fields = valid_fields(op, all_fields=True)
    cmd = decode(frame(op, 1, **fields))
    assert isinstance(cmd, Command) and cmd.args == fields


@pytest.mark.parametrize(("op", "name"), [(op, n) for op, req in sorted(REQUIRED.items())
                                          for n in sorted(req)])
def test_missing_required_field_is_named(op: str, name: str) -> None:
    """Leaving out (or nulling) a required field is refused, naming the field and keeping
    the command id so the client can match the failure to its request."""
    fields = valid_fields(op)
    del fields[name]
    err = reject(frame(op, 9, **fields))
    assert name in err.message and op in err.message
    assert err.id == 9
    err = reject(frame(op, 9, **fields, **{name: None}))
    assert name in err.message and err.id == 9


CASES = [(op, name, bad) for op, (_, spec) in sorted(OPS.items())
         for name, f in sorted(spec.items()) for bad in BAD.get(kind(f.type), [])]


@pytest.mark.parametrize(("op", "name", "bad"), CASES,
                         ids=[f"{o}-{n}-{b!r}" for o, n, b in CASES])
def test_wrong_type_is_named(op: str, name: str, bad: Any) -> None:
    """A field of the wrong JSON type is refused with the field's name; booleans are not
    numbers, and numbers are not booleans."""
    fields = valid_fields(op)
    fields[name] = bad
    err = reject(frame(op, 3, **fields))
    assert repr(name) in err.message, err.message
    assert err.id == 3


def test_bool_is_not_an_integer() -> None:
    """`true` where an integer is expected (at_ms, offset, limit, times) is refused even
    though Python's bool is an int."""
    cases: list[tuple[str, dict[str, Any]]] = [
        ("rearm", {"object": "A/b", "at_ms": True}),
        ("alarms", {"limit": True}), ("alarms", {"offset": False}),
        ("inject_fault", {"target": "A/b", "kind": "alarm_raise", "times": True})]
    for op, extra in cases:
        err = reject(frame(op, 1, **extra))
        assert "integer" in err.message and "bool" in err.message


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_are_refused(literal: str) -> None:
    """NaN and infinities (which Python's json reads) never pass as numbers or integers."""
    text = ('{"op": "inject_fault", "id": 1, "target": "A/b", "kind": "alarm_delay", '
            f'"seconds": {literal}}}')
    err = reject(text)
    assert "'seconds'" in err.message
    err = reject(f'{{"op": "rearm", "id": 1, "object": "A/b", "at_ms": {literal}}}')
    assert "'at_ms'" in err.message


def test_finite_float_is_a_number_but_not_an_integer() -> None:
    """`seconds` takes 0.25; `at_ms` and `limit` do not take 1.0."""
    cmd = decode(frame("inject_fault", 1, target="A/b", kind="alarm_delay", seconds=0.25))
    assert isinstance(cmd, Command) and cmd.args["seconds"] == 0.25
    assert "'at_ms'" in reject(frame("rearm", 1, object="A/b", at_ms=1.0)).message
    assert "'limit'" in reject(frame("alarms", 1, limit=1.0)).message


def test_unknown_fields_are_refused_by_name() -> None:
    """Extra fields are an error (a typo must not be silently ignored), all named."""
    err = reject(frame("rearm", 4, object="A/b", reson="typo", zeta=1))
    assert "reson" in err.message and "zeta" in err.message and err.id == 4


def test_unknown_op_lists_the_known_ones() -> None:
    """An unknown op is refused with the id kept and the list of valid ops."""
    err = reject(frame("rearm_all", 11))
    assert "unknown op" in err.message and "'rearm_all'" in err.message
    assert "rearm" in err.message and "alarms" in err.message
    assert err.id == 11


@pytest.mark.parametrize("op", [None, 5, ["rearm"], ""])
def test_missing_or_non_string_op(op: Any) -> None:
    """A frame without a usable "op" is refused; its readable id is kept."""
    msg: dict[str, Any] = {"id": 2}
    if op is not None:
        msg["op"] = op
    err = reject(json.dumps(msg))
    assert "op" in err.message and "alarms" in err.message  # lists the valid ops
    assert err.id == 2


@pytest.mark.parametrize("cid", [None, "7", 1.0, True, -1, 2**53, [1]])
def test_command_needs_a_usable_integer_id(cid: Any) -> None:
    """A command without an integer id in [0, 2**53) cannot be answered, so it is refused
    (with no id to answer)."""
    msg: dict[str, Any] = {"op": "alarms"}
    if cid is not None:
        msg["id"] = cid
    err = reject(json.dumps(msg))
    assert '"id"' in err.message
    assert err.id is None


def test_id_bounds_are_inclusive_of_zero() -> None:
    """0 and 2**53 - 1 are valid ids."""
    for cid in (0, 2**53 - 1):
        cmd = decode(frame("faults", cid))
        assert isinstance(cmd, Command) and cmd.id == cid


@pytest.mark.parametrize("text", ["[1, 2]", "1", '"alarms"', "null", "true", "[]"])
def test_not_an_object(text: str) -> None:
    """Valid JSON that is not an object is refused with an example of a frame."""
    err = reject(text)
    assert "JSON object" in err.message and err.id is None


@pytest.mark.parametrize("text", ["", "{", '{"op": "alarms", "id": 1,}', "{'op': 'x'}",
                                  '{"op": "alarms"} trailing'])
def test_malformed_json(text: str) -> None:
    """Text that is not JSON is refused, saying where it broke."""
    err = reject(text)
    assert err.message.startswith("not JSON") and "character" in err.message


def test_invalid_utf8_bytes() -> None:
    """Binary frames must be UTF-8; bytes that are not are refused clearly."""
    err = reject(b'{"op": "alarms", "id": 1, "x": "\xff\xfe"}')
    assert "UTF-8" in err.message


def test_valid_utf8_bytes_decode() -> None:
    """A binary frame holding UTF-8 JSON is accepted like text."""
    cmd = decode('{"op": "alarm", "id": 1, "object": "Café/naïve"}'.encode())
    assert isinstance(cmd, Command) and cmd.args == {"object": "Café/naïve"}


def nested(levels: int) -> Any:
    """A value that adds `levels` levels of containers."""
    value: Any = 1
    for i in range(levels):
        value = [value] if i % 2 else {"k": value}
    return value


def test_nesting_deeper_than_the_limit_is_refused() -> None:
    """A frame of MAX_DEPTH (16) container levels is accepted; one more level is refused."""
    ok = frame("send_callback", 1, callback_id="c", payload=nested(MAX_DEPTH - 1))
    cmd = decode(ok)
    assert isinstance(cmd, Command)
    deep = frame("send_callback", 1, callback_id="c", payload=nested(MAX_DEPTH))
    err = reject(deep)
    assert "deeper than 16" in err.message


def test_extreme_nesting_is_a_protocol_error_too() -> None:
    """Deep nesting that Python's json cannot even parse must still be a ProtocolError,
    not an exception that escapes the decoder."""
    err = reject('{"op": "faults", "id": 1, "x": ' + "[" * 200 + "]" * 200 + "}")
    assert "deeper" in err.message


def test_pathological_nesting_is_a_protocol_error() -> None:
    """100,000 nested brackets (100 KB, well under the frame limit) must be refused as a
    ProtocolError like any other bad frame."""
    reject("[" * 100_000)


def test_hello() -> None:
    """Hello needs a non-empty token string; it needs no id."""
    assert decode('{"op": "hello", "token": "s3cret"}') == Hello("s3cret")
    for bad in ('{"op": "hello"}', '{"op": "hello", "token": ""}',
                '{"op": "hello", "token": 5}', '{"op": "hello", "token": null}'):
        err = reject(bad)
        assert "token" in err.message and "hello" in err.message


@pytest.mark.parametrize(("field", "value"), [("limit", MAX_PAGE + 1), ("limit", -1),
                                              ("offset", -1), ("offset", 10**9 + 1)])
def test_paging_bounds(field: str, value: int) -> None:
    """Pages are bounded: at most MAX_PAGE (500) rows, no negative offsets."""
    err = reject(frame("alarms", 5, **{field: value}))
    assert field in err.message and err.id == 5


def test_paging_at_the_bounds() -> None:
    """limit 0 and MAX_PAGE, offset 0 and 10**9 are accepted."""
    for args in ({"limit": 0}, {"limit": MAX_PAGE}, {"offset": 0}, {"offset": 10**9}):
        assert isinstance(decode(frame("executions", 1, **args)), Command)


# -- server -> client shapes ----------------------------------------------------------------


def test_result_and_failure_shapes() -> None:
    """Results carry the id, ok and data; failures ok false and error; a failure with no
    readable id is an "error" frame (nothing to match it to)."""
    assert result(3, {"a": 1}) == {"type": "result", "id": 3, "ok": True, "data": {"a": 1}}
    assert result(4) == {"type": "result", "id": 4, "ok": True, "data": None}
    assert failure(3, "nope") == {"type": "result", "id": 3, "ok": False, "error": "nope"}
    assert failure(None, "bad frame") == {"type": "error", "error": "bad frame"}
    assert failure(0, "zero is an id") == {"type": "result", "id": 0, "ok": False,
                                           "error": "zero is an id"}


def test_welcome_shape() -> None:
    """The welcome names the role and protocol 1."""
    assert PROTOCOL == 1
    assert welcome("viewer") == {"type": "welcome", "role": "viewer", "protocol": 1}


def test_encode_is_compact_json_round_trip() -> None:
    """encode() writes compact JSON that reads back equal; odd values become strings."""
    msg = {"type": "delta", "seq": 1, "rows": [{"a": None, "b": "é"}]}
    text = encode(msg)
    assert json.loads(text) == msg and ", " not in text and ": " not in text
    assert json.loads(encode({"x": {7}}))["x"] == "{7}"


def test_split_object() -> None:
    """`Class/name` splits at the first slash; the name may contain slashes."""
    assert split_object("LeaseLedger/tenant-7") == ("LeaseLedger", "tenant-7")
    assert split_object("Files/a/b/c") == ("Files", "a/b/c")


@pytest.mark.parametrize("ref", ["", "LeaseLedger", "/tenant", "LeaseLedger/", "/"])
def test_split_object_refuses_half_references(ref: str) -> None:
    """Without a class or a name, the reference is refused saying the expected form."""
    with pytest.raises(ProtocolError) as info:
        split_object(ref)
    assert "Class/name" in info.value.message


# -- text that is not valid Unicode ---------------------------------------------------------

SURROGATE_FRAMES = [
    ('{"op": "alarm", "id": 1, "object": "A/\\ud800"}', 1, "alarm"),
    ('{"op": "rearm", "id": 2, "object": "A/b", "reason": "x\\udfffy"}', 2, "rearm"),
    ('{"op": "send_callback", "id": 3, "callback_id": "c", "payload": {"k": ["\\ud83d"]}}',
     3, "send_callback"),
    ('{"op": "inject_fault", "id": 4, "target": "A/b", "kind": "alarm_raise", '
     '"\\udc00": 1}', 4, "inject_fault"),
    ('{"op": "no_such_op\\ud800", "id": 5}', 5, "no_such_op\ud800"),
]


@pytest.mark.parametrize(("text", "cid", "op"), SURROGATE_FRAMES)
def test_lone_surrogates_are_refused_anywhere(text: str, cid: int, op: str) -> None:
    """A lone surrogate (JSON lets "\\ud800" through; no UTF-8 encoder takes it) in any
    string, value or key, at any depth, is refused with the id and op kept (so the refusal
    is answered and audited) and a message naming the code point."""
    err = reject(text)
    assert "lone surrogate" in err.message and "U+D" in err.message
    assert err.id == cid and err.op == op


def test_a_surrogate_pair_is_one_character_and_accepted() -> None:
    """An escaped pair is a valid character outside the BMP: accepted."""
    cmd = decode('{"op": "alarm", "id": 1, "object": "A/\\ud83d\\ude00"}')
    assert isinstance(cmd, Command) and cmd.args["object"] == "A/\U0001F600"


def test_hello_with_a_lone_surrogate_is_a_protocol_error_that_keeps_nothing() -> None:
    """A token holding a lone surrogate is refused by the decoder (never compared, never
    logged); the error carries no field of the frame."""
    err = reject('{"op": "hello", "token": "\\ud800secret"}')
    assert "lone surrogate" in err.message and err.fields == {} and err.op is None


def test_refusals_keep_the_frame_fields_for_the_audit_log() -> None:
    """A bad command's fields (but not op and id) travel with the error."""
    err = reject(frame("abort", 9, execution_id=5, reason="why"))
    assert err.op == "abort" and err.id == 9
    assert err.fields == {"execution_id": 5, "reason": "why"}


# -- close reasons --------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "short", "x" * 123, "x" * 124, "é" * 100, "€" * 50,
                                  "\U0001F600" * 40, "a\ud800b" * 60, "ab" + "€" * 60])
def test_close_reason_fits_a_close_frame(text: str) -> None:
    """At most 123 bytes of UTF-8, never a split character, always encodable; text that
    fits is kept as it is."""
    reason = close_reason(text)
    data = reason.encode("utf-8")  # raises if a surrogate were left
    assert len(data) <= 123
    if len(text.encode("utf-8", "replace")) <= 123:
        assert reason == text.encode("utf-8", "replace").decode()
    else:
        assert len(data) > 123 - 4  # cut at the last whole character, not earlier
        assert text.encode("utf-8", "replace").startswith(data)
