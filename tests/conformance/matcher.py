"""The AWS conformance suite's matching rules, re-implemented without its package.

A faithful port of the pure-Python validation pieces of
`aws-durable-execution-conformance-tests` 1.0.0 (the package declares Python
3.14 and imports boto3, so it is read, not imported):

* `PlaceholderContext`  <- `variables.py`  (Variables, `${GEN_STR:N}`, substitution)
* `EventHistoryMatcher` <- `history.py`    (`${NAME}` binding, `${/re/}`, `'*'`, `{}`)
* `validate_execution_result` <- `validate.py::_validate_execution_result`
* `CallbackAction`, `extract_callback_events`, `find_matching_action`,
  `get_execution_status` <- `callback.py` / `validate.py` (the async poller's helpers)
* `LogValidator` <- `cloudwatch.py::CloudWatchLogValidator` (validation only)

Quirks of the original are kept on purpose (they decide what passes): a whole
string `${...}` is a placeholder even when it is not a valid name, `{}` and
`'*'` accept any value but the key must exist, lists must have equal length,
dicts are matched on the expected keys only, the result is `json.loads`-ed once.
"""

from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass, field
from secrets import choice
from typing import Any

# -- variables.py -------------------------------------------------------------------------

_GEN_STR_PATTERN = re.compile(r"^\$\{GEN_STR:(\d+)\}$")
_PLACEHOLDER_REF_PATTERN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ALPHANUMERIC = string.ascii_lowercase + string.digits


def generate_random_string(length: int) -> str:
    return "".join(choice(_ALPHANUMERIC) for _ in range(length))


class PlaceholderContext:
    """Bindings shared by variables, input substitution, history, callbacks and logs."""

    def __init__(self) -> None:
        self._bindings: dict[str, Any] = {}

    @property
    def bindings(self) -> dict[str, Any]:
        return dict(self._bindings)

    def bind(self, name: str, value: Any) -> None:
        if name in self._bindings:
            if self._bindings[name] != value:
                raise ValueError(f"Placeholder ${{{name}}} already bound to "
                                 f"{self._bindings[name]!r}, cannot rebind to {value!r}")
            return
        self._bindings[name] = value

    def get(self, name: str) -> Any | None:
        return self._bindings.get(name)

    def has(self, name: str) -> bool:
        return name in self._bindings

    def resolve_variables(self, variables: dict[str, Any] | None) -> None:
        """`NAME: ${GEN_STR:N}` -> random `[a-z0-9]{N}`; other values bound as text."""
        if not variables:
            return
        for name, value in variables.items():
            if not isinstance(value, str):
                self._bindings[name] = str(value)
                continue
            gen = _GEN_STR_PATTERN.match(value)
            self._bindings[name] = generate_random_string(int(gen.group(1))) if gen else value

    def substitute(self, data: Any) -> Any:
        """Replace bound `${NAME}` references (also embedded ones); leave the rest as is."""
        if not self._bindings:
            return data
        if isinstance(data, str):
            return self._substitute_string(data)
        if isinstance(data, dict):
            return {key: self.substitute(val) for key, val in data.items()}
        if isinstance(data, list):
            return [self.substitute(item) for item in data]
        return data

    def _substitute_string(self, text: str) -> str:
        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            return str(self._bindings[name]) if name in self._bindings else match.group(0)

        return _PLACEHOLDER_REF_PATTERN.sub(replace, text)


# -- history.py ---------------------------------------------------------------------------

PLACEHOLDER_PATTERN = re.compile(r"^\$\{(.+)\}$")
REGEX_PATTERN = re.compile(r"^\$\{/(.+)/\}$")


@dataclass(frozen=True)
class MatchResult:
    success: bool
    errors: list[str] = field(default_factory=list)
    resolved_placeholders: dict[str, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.success


def is_wildcard(value: Any) -> bool:
    return isinstance(value, str) and value == "*"


def is_empty_object(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 0


def get_placeholder_name(value: Any) -> str | None:
    """`${NAME}` (whole string) -> NAME; regexes `${/.../}` are not placeholders."""
    if not isinstance(value, str) or REGEX_PATTERN.match(value):
        return None
    m = PLACEHOLDER_PATTERN.match(value)
    return m.group(1) if m else None


def get_regex_pattern(value: Any) -> re.Pattern[str] | None:
    if not isinstance(value, str):
        return None
    m = REGEX_PATTERN.match(value)
    return re.compile(m.group(1)) if m else None


class EventHistoryMatcher:
    """Expected events (from YAML) against actual events, paired by `EventId`.

    Extra actual events are ignored; there is no ordering check besides the ids.
    """

    def __init__(self, context: PlaceholderContext | None = None) -> None:
        self._context = context or PlaceholderContext()
        self._errors: list[str] = []

    @property
    def context(self) -> PlaceholderContext:
        return self._context

    def match(self, expected_events: list[dict[str, Any]],
              actual_events: list[dict[str, Any]]) -> MatchResult:
        self._errors = []
        actual_by_id: dict[Any, dict[str, Any]] = {}
        for evt in actual_events:
            eid = evt.get("EventId")
            if eid is not None:
                actual_by_id[eid] = evt  # duplicates: the last one wins
        for expected in expected_events:
            eid = expected.get("EventId")
            if eid is None:
                self._errors.append(f"Expected event missing EventId: {expected}")
                continue
            actual = actual_by_id.get(eid)
            if actual is None:
                self._errors.append(f"No actual event found for EventId={eid}")
                continue
            self._match_value(expected, actual, path=f"Event[EventId={eid}]")
        return MatchResult(success=not self._errors, errors=list(self._errors),
                           resolved_placeholders=self._context.bindings)

    def _match_value(self, expected: Any, actual: Any, path: str) -> None:
        if is_empty_object(expected) or is_wildcard(expected):
            return
        placeholder = get_placeholder_name(expected)
        if placeholder is not None:
            self._resolve_placeholder(placeholder, actual, path)
            return
        regex = get_regex_pattern(expected)
        if regex is not None:
            if not regex.search(str(actual)):
                self._errors.append(f"{path}: value {actual!r} does not match regex pattern "
                                    f"{regex.pattern!r}")
            return
        if isinstance(expected, dict) and isinstance(actual, dict):
            for key in expected:
                if key not in actual:
                    self._errors.append(f"{path}.{key}: key missing in actual event")
                    continue
                self._match_value(expected[key], actual[key], f"{path}.{key}")
            return
        if isinstance(expected, list) and isinstance(actual, list):
            if len(expected) != len(actual):
                self._errors.append(f"{path}: list length mismatch (expected {len(expected)}, "
                                    f"got {len(actual)})")
                return
            for i, (e, a) in enumerate(zip(expected, actual)):
                self._match_value(e, a, f"{path}[{i}]")
            return
        resolved = self._context.substitute(expected) if isinstance(expected, str) else expected
        if resolved != actual:
            self._errors.append(f"{path}: expected {resolved!r}, got {actual!r}")

    def _resolve_placeholder(self, name: str, actual_value: Any, path: str) -> None:
        if self._context.has(name):
            if self._context.get(name) != actual_value:
                self._errors.append(f"{path}: placeholder ${{{name}}} was previously bound to "
                                    f"{self._context.get(name)!r}, but got {actual_value!r}")
        else:
            self._context.bind(name, actual_value)


# -- validate.py: result check, execution status ------------------------------------------

TERMINAL_STATUSES = frozenset({"SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELLED"})


def validate_execution_result(execution: dict[str, Any] | None, expected_result: dict[str, Any],
                              context: PlaceholderContext | None = None) -> list[str]:
    """`execution` is what `get_durable_execution` returns: `{"Status", "Result"?}`."""
    if execution is None:
        return ["Failed to retrieve durable execution details"]
    actual_status = execution.get("Status")
    expected_status = expected_result.get("ExecutionStatus")
    if expected_status and actual_status != expected_status:
        return [f"Expected ExecutionStatus={expected_status!r}, got {actual_status!r}"]
    if actual_status != "SUCCEEDED" or "Result" not in expected_result:
        return []
    expected_output = expected_result.get("Result")
    raw = execution.get("Result")
    actual_output: Any = None
    if raw is not None:
        try:
            actual_output = json.loads(raw)
        except (json.JSONDecodeError, TypeError):
            actual_output = raw
    if context is not None:
        expected_output = context.substitute(expected_output)
    if actual_output != expected_output:
        return [f"Expected Result={expected_output!r}, got {actual_output!r}"]
    return []


def get_execution_status(history: dict[str, Any]) -> str | None:
    """Top-level `ExecutionStatus`, else the last terminal execution event."""
    explicit = history.get("ExecutionStatus")
    if explicit:
        return str(explicit)
    for event in reversed(history.get("Events", history.get("events", []))):
        match event.get("EventType"):
            case "ExecutionSucceeded":
                return "SUCCEEDED"
            case "ExecutionFailed":
                return "FAILED"
            case "ExecutionTimedOut":
                return "TIMED_OUT"
            case "ExecutionCancelled":
                return "CANCELLED"
    return None


# -- callback.py / validate.py: callback actions ------------------------------------------

@dataclass(frozen=True)
class CallbackAction:
    callback_name: str
    operation: str  # success | failure | heartbeat
    payload: Any = None
    delay_seconds: float = 0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CallbackAction:
        callback_name = data.get("CallbackName")
        if not callback_name:
            raise ValueError("CallbackAction requires a 'CallbackName' field")
        operation = data.get("Operation")
        if not operation:
            raise ValueError("CallbackAction requires an 'Operation' field")
        if operation.lower() not in {"success", "failure", "heartbeat"}:
            raise ValueError(f"Invalid operation '{operation}'. Must be one of: "
                             "failure, heartbeat, success")
        return cls(callback_name, operation.lower(), data.get("Payload"),
                   float(data.get("Delay", 0)))


def success_result_bytes(payload: Any) -> bytes | None:
    """What `send_durable_execution_callback_success(Result=...)` carries (None: no arg)."""
    return None if payload is None else json.dumps(payload).encode("utf-8")


def failure_error(payload: Any) -> dict[str, Any] | None:
    """What `send_durable_execution_callback_failure(Error=...)` carries (None: no arg)."""
    if payload is None:
        return None
    if not isinstance(payload, dict):
        raise ValueError("Failure callback payload must be a dict containing ErrorType/"
                         f"ErrorMessage/ErrorData/StackTrace fields, got "
                         f"{type(payload).__name__}: {payload!r}")
    error = {k: payload[k] for k in ("ErrorType", "ErrorMessage", "ErrorData", "StackTrace")
             if k in payload}
    return error or None


def extract_callback_events(events: list[dict[str, Any]],
                            already_handled: set[str]) -> list[dict[str, Any]]:
    """`CallbackStarted` events whose `CallbackId` was not handled yet, in event order."""
    found = []
    for event in events:
        if event.get("EventType") != "CallbackStarted":
            continue
        callback_id = event.get("CallbackStartedDetails", {}).get("CallbackId")
        if callback_id and callback_id not in already_handled:
            found.append(event)
    return found


def find_matching_action(callback_event: dict[str, Any], actions: list[CallbackAction],
                         used_indices: set[int], context: PlaceholderContext | None = None
                         ) -> tuple[CallbackAction | None, int | None]:
    """First unused action named like the event (`'*'`, equal, or `${/regex/}`)."""
    event_name = callback_event.get("Name", "")
    for i, action in enumerate(actions):
        if i in used_indices:
            continue
        resolved = action.callback_name
        if context is not None:
            resolved = str(context.substitute(resolved))
        pattern = get_regex_pattern(resolved)
        if resolved in ("*", event_name) or (pattern is not None
                                             and pattern.search(event_name)):
            return action, i
    return None, None


# -- cloudwatch.py: log validation --------------------------------------------------------

@dataclass(frozen=True)
class LogExpectation:
    match: dict[str, Any]
    count: int | None = None
    min_count: int | None = None
    max_count: int | None = None
    before: tuple[dict[str, Any], ...] = ()
    after: tuple[dict[str, Any], ...] = ()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LogExpectation:
        match = data["match"]
        if not isinstance(match, dict) or not match:
            raise TypeError("'match' must be a non-empty field->value mapping")
        return cls(match, data.get("count"), data.get("min_count"), data.get("max_count"),
                   _anchor_tuple(data.get("before")), _anchor_tuple(data.get("after")))

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.match.items())


def _anchor_tuple(raw: Any) -> tuple[dict[str, Any], ...]:
    if raw is None:
        return ()
    if isinstance(raw, dict):
        return (raw,)
    if isinstance(raw, list) and all(isinstance(item, dict) for item in raw):
        return tuple(raw)
    raise TypeError("'before'/'after' must be a matcher mapping or a list of matcher mappings")


class LogValidator:
    """`ExpectedLogs` against log events `{"message", "timestamp", "ingestionTime"}`."""

    def validate(self, expected_logs: list[dict[str, Any]], actual_events: list[dict[str, Any]],
                 context: PlaceholderContext | None = None) -> MatchResult:
        errors: list[str] = []
        events = sorted(actual_events, key=self._sort_key)
        keys = [self._sort_key(e) for e in events]
        records = [_parse_record(e.get("message", "")) for e in events]
        for i, raw in enumerate(expected_logs):
            resolved = context.substitute(raw) if context is not None else raw
            try:
                exp = LogExpectation.from_dict(resolved)
            except (KeyError, TypeError) as e:
                errors.append(f"ExpectedLogs[{i}]: invalid entry — {e}")
                continue
            label = f"ExpectedLogs[{i}] match({exp.label})"
            own = _matching_indices(exp.match, records)
            errors.extend(self._check_count(exp, len(own), i))
            for direction, anchors in (("after", exp.after), ("before", exp.before)):
                for anchor in anchors:
                    anchor_matches = _matching_indices(anchor, records)
                    if not anchor_matches:
                        errors.append(f"{label}: {direction} anchor {anchor!r} matched no log "
                                      "records")
                        continue
                    if not own:
                        continue
                    if direction == "after":
                        if keys[own[0]] < keys[anchor_matches[-1]]:
                            errors.append(f"{label}: expected all matches after {anchor!r} "
                                          "(log records out of order)")
                    elif keys[own[-1]] > keys[anchor_matches[0]]:
                        errors.append(f"{label}: expected all matches before {anchor!r} "
                                      "(log records out of order)")
        return MatchResult(success=not errors, errors=errors)

    @staticmethod
    def _sort_key(evt: dict[str, Any]) -> tuple[Any, ...]:
        ts = evt.get("timestamp", 0)
        ts_key = (0, float(ts), "") if isinstance(ts, int | float) else (1, 0.0, str(ts))
        return (ts_key, evt.get("ingestionTime", 0))

    @staticmethod
    def _check_count(exp: LogExpectation, actual: int, index: int) -> list[str]:
        label = f"ExpectedLogs[{index}] match({exp.label})"
        if exp.count is not None:
            if actual != exp.count:
                return [f"{label}: expected exactly {exp.count} match(es), got {actual}"]
            return []
        errors = []
        min_c, max_c = exp.min_count, exp.max_count
        if min_c is None and max_c is None:
            min_c = 1
        if min_c is not None and actual < min_c:
            errors.append(f"{label}: expected at least {min_c} match(es), got {actual}")
        if max_c is not None and actual > max_c:
            errors.append(f"{label}: expected at most {max_c} match(es), got {actual}")
        return errors


def _parse_record(raw_line: str) -> dict[str, Any]:
    stripped = raw_line.strip()
    if stripped.startswith("{"):
        try:
            parsed = json.loads(stripped)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    return {"message": stripped}


def _matching_indices(matcher: dict[str, Any], records: list[dict[str, Any]]) -> list[int]:
    return [i for i, rec in enumerate(records)
            if all(k in rec and _value_matches(v, rec[k]) for k, v in matcher.items())]


def _value_matches(expected: Any, actual: Any) -> bool:
    if isinstance(expected, str):
        actual_str = str(actual).strip()
        if len(expected) >= 2 and expected.startswith("/") and expected.endswith("/"):
            return re.search(expected[1:-1], actual_str) is not None
        return actual_str == expected.strip()
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    if isinstance(expected, int | float) and isinstance(actual, int | float):
        return float(expected) == float(actual)
    return str(expected) == str(actual)
