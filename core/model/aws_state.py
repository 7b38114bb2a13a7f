"""The service side's bookkeeping of one Lambda-style execution, and its tokens (pure).

It rides in the execution's record (`ExecutionRecord.aws`), written in the same
commit as the operations it counts:

- `invocation` numbers the invocations; `seq` the checkpoint tokens. A token names
  both, so a token of an earlier invocation, or one already used, is refused: the
  token is rotated by every checkpoint.
- `touch` counts changes to operations (each operation keeps the count of its last
  change); `seen` is how far the running invocation has been told. A checkpoint
  answers with the operations changed after `seen`: what the handler has not seen.
- `created` numbers operations in the order they were first checkpointed (the order
  of the state the SDK reads, and of a redrive's cut).
- `failures` counts invocations in a row that failed (the handler raised, died or
  answered nonsense); past the retry policy the execution becomes a dead letter.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from alarmtop.core.model.aws_errors import stale_token


@dataclass
class AwsState:
    function: str
    qualifier: str
    arn: str
    plain: bool = False  # a plain function: one call, no checkpoints
    invocation: int = 0
    seq: int = 0
    touch: int = 0
    seen: int = 0
    created: int = 0
    bytes: int = 0
    failures: int = 0
    last_failure: dict[str, Any] | None = None
    retry_at_ms: int | None = None  # when a failed invocation runs again
    invocation_started_ms: int | None = None
    watchdog_ms: int | None = None  # a live invocation's deadline
    revoked: bool = False  # the token of the running invocation was withheld
    outcome: dict[str, Any] | None = None  # an EXECUTION update's result, until its end
    updated: list[str] = field(default_factory=list)  # changed outside an invocation
    cached: dict[str, Any] | None = None  # the last answer, for a repeated client token
    dead_pending: str | None = None  # retries exhausted: the next alarm dead-letters it
    dead: str | None = None  # a dead letter: nothing runs until an operator re-arms it
    expect: list[dict[str, Any]] | None = None  # a redrive's or fork's dropped shapes
    compared: int = 0  # how many of `expect` the re-run has matched
    divergence: dict[str, Any] | None = None  # where the re-run left the record

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> AwsState:
        known = {f.name for f in fields(AwsState)}
        return AwsState(**{k: v for k, v in data.items() if k in known})

    def next_touch(self) -> int:
        self.touch += 1
        return self.touch

    def next_created(self) -> int:
        self.created += 1
        return self.created


def encode_token(execution_id: str, invocation: int, seq: int) -> str:
    """A checkpoint token (AWS's alphabet: standard base64)."""
    raw = json.dumps([execution_id, invocation, seq], separators=(",", ":")).encode()
    return base64.b64encode(raw).decode()


def decode_token(token: Any) -> tuple[str, int, int] | None:
    if not isinstance(token, str) or not 0 < len(token) <= 2048:
        return None
    try:
        value = json.loads(base64.b64decode(token, validate=True))
    except (ValueError, UnicodeDecodeError, binascii.Error):
        return None
    if (isinstance(value, list) and len(value) == 3 and isinstance(value[0], str)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value[1:])):
        return value[0], value[1], value[2]
    return None


def current_token(execution_id: str, state: AwsState) -> str:
    return encode_token(execution_id, state.invocation, state.seq)


def check_token(execution_id: str, state: AwsState, token: Any, in_invocation: bool) -> None:
    """Refuse a token that is not the running invocation's current one (the SDK ends
    the invocation on it and the execution runs again from what is durable)."""
    parsed = decode_token(token)
    if parsed is None or parsed[0] != execution_id:
        raise stale_token("the token does not belong to this execution")
    if not in_invocation or parsed[1] != state.invocation:
        raise stale_token("the token belongs to an invocation that has ended")
    if state.revoked:
        raise stale_token("the token was withdrawn (the execution was paused or stopped)")
    if parsed[2] != state.seq:
        raise stale_token("the token was already used; each checkpoint answers with the "
                          "next one")
