"""Callback ids: which execution and operation a callback belongs to, as an opaque
token an outside system hands back (pure).

Two spellings decode to the same pair: the native executions' `cb1.<urlsafe
base64>`, and the one the AWS SDK's executions hand out, in AWS's alphabet
(standard base64, at most 1,024 characters: what boto3 and the Lambda API accept
as a `CallbackId`).
"""

from __future__ import annotations

import base64
import binascii
import json
import re

AWS_CALLBACK_ID = re.compile(r"[A-Za-z0-9+/]+={0,2}")
AWS_CALLBACK_ID_MAX = 1024
_AWS_TAG = "dx1"


def encode_callback_id(execution_id: str, op_id: str) -> str:
    raw = json.dumps([execution_id, op_id], separators=(",", ":")).encode()
    return "cb1." + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def encode_aws_callback_id(execution_id: str, op_id: str) -> str:
    """A callback id in AWS's alphabet and length for an operation of an execution."""
    raw = json.dumps([_AWS_TAG, execution_id, op_id], separators=(",", ":")).encode()
    return base64.b64encode(raw).decode()


def decode_callback_id(callback_id: str) -> tuple[str, str] | None:
    """`(execution_id, op_id)` of either spelling; None for anything else."""
    if not isinstance(callback_id, str):
        return None
    if not callback_id.startswith("cb1."):
        return _decode_aws(callback_id)
    body = callback_id[4:]
    try:
        pair = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (ValueError, UnicodeDecodeError):
        return None
    if (isinstance(pair, list) and len(pair) == 2
            and all(isinstance(p, str) for p in pair)):
        return pair[0], pair[1]
    return None


def _decode_aws(callback_id: str) -> tuple[str, str] | None:
    if len(callback_id) > AWS_CALLBACK_ID_MAX or AWS_CALLBACK_ID.fullmatch(callback_id) is None:
        return None
    try:
        triple = json.loads(base64.b64decode(callback_id, validate=True))
    except (ValueError, UnicodeDecodeError, binascii.Error):
        return None
    if (isinstance(triple, list) and len(triple) == 3 and triple[0] == _AWS_TAG
            and all(isinstance(p, str) for p in triple)):
        return triple[1], triple[2]
    return None
