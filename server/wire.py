"""The ops protocol on the wire: typed messages, pure encode and decode.

Client to server: `{"op": "hello", "token": ...}` first, then commands
`{"op": NAME, "id": N, ...fields}`. Server to client: `welcome`, `snapshot`,
`delta`, `result` (`{"type": "result", "id": N, "ok": bool, "data"|"error"}`)
and `error` (for frames that are not even a command). No socket in here: this
module turns text into checked values and back, and says precisely what is
wrong with a bad frame.

The commands and their fields are the one table of `commands.py`: `decode`
checks a server's incoming frame against it, and `command` a client's outgoing
one, the same way and with the same words, before it is sent.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from alarmtop.server.commands import COMMANDS, OPERATOR_OPS, QUERY_OPS
from alarmtop.server.protocol import (
    MAX_OFFSET,
    MAX_PAGE,
    Field,
    ProtocolError,
    Role,
    split_object,
)
from alarmtop.server.services import Spec

PROTOCOL = 1
MAX_FRAME_BYTES = 1 << 20  # websockets closes the connection (1009) above this
MAX_DEPTH = 16
MAX_CLOSE_REASON_BYTES = 123  # RFC 6455: a close frame's payload is 125 bytes, 2 are the code

# op -> (operator only, fields): the command table as the tests and the reference see it.
OPS: dict[str, tuple[bool, dict[str, Field]]] = {
    op: (spec.role is Role.OPERATOR, spec.fields) for op, spec in COMMANDS.items()}


@dataclass(frozen=True)
class Hello:
    token: str

    def message(self) -> dict[str, Any]:
        return {"op": "hello", "token": self.token}


@dataclass(frozen=True)
class Command:
    op: str
    id: int
    args: dict[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> Spec:
        return COMMANDS[self.op]

    @property
    def needs_operator(self) -> bool:
        return self.op in OPERATOR_OPS

    def message(self) -> dict[str, Any]:
        return {"op": self.op, "id": self.id, **self.args}


def command(op: str, id: int, **fields: Any) -> Command:
    """The command a client sends, checked as the server will check it: a field the
    table does not know or of the wrong type raises the `ProtocolError` the server
    would answer with, before anything is sent. (None stands for a field left out.)"""
    msg = decode(encode({"op": op, "id": id, **fields}))
    if not isinstance(msg, Command):
        raise ProtocolError("hello is said once, on connecting; it is not a command")
    return msg


class _LoneSurrogate(Exception):
    def __init__(self, char: str) -> None:
        self.char = char


def _check_text(text: str) -> None:
    # JSON's \uD800 escapes decode to lone surrogates, which no UTF-8 encoder (SQLite's,
    # the log's, a close frame's) accepts: found here, they never reach the runtime.
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _LoneSurrogate(text[exc.start]) from None


def _walk(value: Any, level: int = 0) -> int:
    """The nesting depth of `value`; raises `_LoneSurrogate` for a string (key or
    value) that is not valid Unicode."""
    if level > MAX_DEPTH:
        return level
    if isinstance(value, str):
        _check_text(value)
    elif isinstance(value, dict):
        deepest = level + 1
        for k, v in value.items():
            _check_text(k)
            deepest = max(deepest, _walk(v, level + 1))
        return deepest
    elif isinstance(value, list):
        return max((_walk(v, level + 1) for v in value), default=level + 1)
    return level


def _type_ok(value: Any, expected: type | tuple[type, ...]) -> bool:
    if expected is object:
        return True
    if isinstance(value, bool) and expected is not bool:
        return False  # JSON true is not a number here
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return isinstance(value, expected)


def _type_name(expected: type | tuple[type, ...]) -> str:
    if isinstance(expected, tuple):
        return "number"
    return {"str": "string", "int": "integer", "bool": "boolean"}.get(expected.__name__,
                                                                      expected.__name__)


def decode(text: str | bytes) -> Hello | Command:
    """Parse one client frame, or raise `ProtocolError` saying what is wrong."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("frames must be UTF-8 JSON text") from None
    try:
        msg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"not JSON: {exc.msg} at character {exc.pos}") from None
    except RecursionError:
        raise ProtocolError(f"frame nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # e.g. numbers too long to convert
        raise ProtocolError(f"not acceptable JSON: {exc}") from None
    if not isinstance(msg, dict):
        raise ProtocolError('a frame is a JSON object like {"op": "alarms", "id": 1}')
    raw_id, op = msg.get("id"), msg.get("op")
    cid = raw_id if isinstance(raw_id, int) and not isinstance(raw_id, bool) else None
    if cid is not None and not 0 <= cid < 2**53:
        cid = None
    try:
        depth = _walk(msg)
    except _LoneSurrogate as exc:
        raise _refusal(f"text holds a lone surrogate (U+{ord(exc.char):04X}); strings must "
                       "be valid Unicode (escape a character outside the BMP as a "
                       "surrogate pair)", cid, msg) from None
    if depth > MAX_DEPTH:
        raise _refusal(f"frame nested deeper than {MAX_DEPTH} levels", cid, msg)
    if op == "hello":
        token = msg.get("token")
        if not isinstance(token, str) or not token:
            raise ProtocolError('hello needs a "token" string')
        return Hello(token)
    if not isinstance(op, str):
        raise ProtocolError('missing "op": one of ' + ", ".join(sorted(COMMANDS)), cid)
    if op not in COMMANDS:
        raise _refusal(f"unknown op {op!r}; ops: {', '.join(sorted(COMMANDS))}", cid, msg)
    if cid is None:
        raise _refusal(f'{op} needs an integer "id" (0 to 2**53) to match its result', None,
                       msg)
    return Command(op, cid, _fields(op, cid, msg))


def _refusal(message: str, cid: int | None, msg: dict[str, Any]) -> ProtocolError:
    op = msg.get("op")
    if op == "hello":  # never keep a token, even a malformed one, for anyone to log
        return ProtocolError(message, cid)
    fields = {k: v for k, v in msg.items() if k not in ("op", "id")}
    return ProtocolError(message, cid, op=op if isinstance(op, str) else None, fields=fields)


def _fields(op: str, cid: int, msg: dict[str, Any]) -> dict[str, Any]:
    """The checked arguments of a command, or `ProtocolError` naming the field."""
    spec = COMMANDS[op].fields
    args: dict[str, Any] = {}
    for name, f in spec.items():
        if name not in msg or msg[name] is None:
            if f.required:
                raise _refusal(f"{op} needs {name!r} ({_type_name(f.type)})", cid, msg)
            continue
        if not _type_ok(msg[name], f.type):
            raise _refusal(f"{op}: {name!r} must be a {_type_name(f.type)}, not "
                           f"{type(msg[name]).__name__}", cid, msg)
        args[name] = msg[name]
    unknown = set(msg) - set(spec) - {"op", "id"}
    if unknown:
        raise _refusal(f"{op}: unknown field(s) {', '.join(sorted(unknown))}", cid, msg)
    for key, most in (("offset", MAX_OFFSET), ("limit", MAX_PAGE)):
        if key in args and not 0 <= args[key] <= most:
            raise _refusal(f"{op}: {key} must be between 0 and {most}", cid, msg)
    return args


def encode(message: dict[str, Any]) -> str:
    return json.dumps(message, separators=(",", ":"), default=str)


def welcome(role: str) -> dict[str, Any]:
    return {"type": "welcome", "role": role, "protocol": PROTOCOL}


def result(cid: int, data: Any = None) -> dict[str, Any]:
    return {"type": "result", "id": cid, "ok": True, "data": data}


def failure(cid: int | None, error: str) -> dict[str, Any]:
    if cid is None:
        return {"type": "error", "error": error}
    return {"type": "result", "id": cid, "ok": False, "error": error}


def close_reason(text: str) -> str:
    """`text` cut to fit a WebSocket close frame: at most 123 bytes of UTF-8, never
    splitting a character; anything that is not valid Unicode becomes "?"."""
    data = text.encode("utf-8", "replace")
    if len(data) <= MAX_CLOSE_REASON_BYTES:
        return data.decode("utf-8")
    return data[:MAX_CLOSE_REASON_BYTES].decode("utf-8", "ignore")


__all__ = ["MAX_PAGE", "OPERATOR_OPS", "QUERY_OPS", "Field", "ProtocolError",
           "split_object"]
