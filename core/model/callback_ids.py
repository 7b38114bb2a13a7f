"""Callback ids: which execution and operation a callback belongs to, as an opaque
token an outside system hands back (pure)."""

from __future__ import annotations

import base64
import json


def encode_callback_id(execution_id: str, op_id: str) -> str:
    raw = json.dumps([execution_id, op_id], separators=(",", ":")).encode()
    return "cb1." + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_callback_id(callback_id: str) -> tuple[str, str] | None:
    if not isinstance(callback_id, str) or not callback_id.startswith("cb1."):
        return None
    body = callback_id[4:]
    try:
        pair = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (ValueError, UnicodeDecodeError):
        return None
    if (isinstance(pair, list) and len(pair) == 2
            and all(isinstance(p, str) for p in pair)):
        return pair[0], pair[1]
    return None
