"""Names as the AWS Lambda API spells them: function names, execution names, ARNs (pure).

An execution of a Lambda-style function has an alarmtop execution id (its
`DurableExecutionName`, unique in the runtime) and an ARN the SDK and boto3 see:

    arn:aws:lambda:<region>:<account>:function:<function>:<qualifier>/durable-execution/<name>/<run>

The SDK takes the last segment (`<run>`) as the id of the EXECUTION operation; it
is derived from the name, so the same execution always has the same ARN.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from alarmtop.core.model.aws_errors import invalid

DEFAULT_REGION = "us-east-1"
DEFAULT_ACCOUNT = "000000000000"
LATEST = "$LATEST"

# AWS's own patterns (the Lambda API model), anchored.
EXECUTION_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
FUNCTION_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
QUALIFIER = re.compile(r"\$LATEST|[a-zA-Z0-9_-]{1,128}")
_EXECUTION_ARN = re.compile(
    r"arn:([a-zA-Z0-9-]+):lambda:([a-zA-Z0-9-]+):(\d{12}):function:([a-zA-Z0-9_-]+):"
    r"(\$LATEST(?:\.PUBLISHED)?|[0-9]+|[a-zA-Z0-9_-]+)/durable-execution/([a-zA-Z0-9_-]+)/"
    r"([a-zA-Z0-9_-]+)")
_FUNCTION_REF = re.compile(
    r"(?:arn:(?:aws[a-zA-Z-]*)?:lambda:)?(?:(?:eusc-)?[a-z]{2}(?:-gov|-iso[a-z]?)?-[a-z]+-\d:)?"
    r"(?:\d{12}:)?(?:function:)?([a-zA-Z0-9_.-]+)(?::(\$LATEST(?:\.PUBLISHED)?|[a-zA-Z0-9_-]+))?")


@dataclass(frozen=True)
class Place:
    """Where the runtime's Lambda-style functions live, as their ARNs say."""

    region: str = DEFAULT_REGION
    account: str = DEFAULT_ACCOUNT

    def function_arn(self, function: str, qualifier: str | None = None) -> str:
        base = f"arn:aws:lambda:{self.region}:{self.account}:function:{function}"
        return base if qualifier is None else f"{base}:{qualifier}"

    def execution_arn(self, function: str, qualifier: str, execution_id: str) -> str:
        return (f"{self.function_arn(function, qualifier)}/durable-execution/"
                f"{execution_id}/{run_id(execution_id)}")


def run_id(execution_id: str) -> str:
    """The id of the EXECUTION operation: stable for the execution, uuid-shaped."""
    h = hashlib.blake2b(execution_id.encode(), digest_size=16).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def execution_id_of(arn_or_id: str) -> str:
    """The execution id an ARN names (an id is taken as it is); refuses what is neither."""
    if not isinstance(arn_or_id, str) or not arn_or_id:
        raise invalid("DurableExecutionArn must be a non-empty string")
    if arn_or_id.startswith("arn:"):
        m = _EXECUTION_ARN.fullmatch(arn_or_id)
        if m is None:
            raise invalid(f"{arn_or_id!r} is not a durable execution ARN")
        return m.group(6)
    check_execution_name(arn_or_id)
    return arn_or_id


def check_execution_name(name: str) -> str:
    if not isinstance(name, str) or EXECUTION_NAME.fullmatch(name) is None:
        raise invalid(f"the durable execution name {name!r} must be 1-64 letters, digits, "
                      "'-' or '_'")
    return name


def check_function_name(name: str) -> str:
    if not isinstance(name, str) or FUNCTION_NAME.fullmatch(name) is None:
        raise invalid(f"the function name {name!r} must be 1-64 letters, digits, '-' or '_'")
    return name


def parse_function_ref(ref: str) -> tuple[str, str | None]:
    """`(name, qualifier)` of a FunctionName: a name, `name:qualifier` or a function ARN
    (partial ARNs too, as AWS accepts them). Refuses anything else."""
    if not isinstance(ref, str) or not 0 < len(ref) <= 256:
        raise invalid("FunctionName must be a string of 1-256 characters")
    m = _FUNCTION_REF.fullmatch(ref)
    if m is None:
        raise invalid(f"{ref!r} is not a function name, name:qualifier or function ARN")
    return m.group(1), m.group(2)


def child_execution_id(parent_id: str, op_id: str, round_: int = 0) -> str:
    """The execution a chained invoke starts: stable for the operation (a retried START
    finds it), new for each redrive of the parent (`round_`)."""
    h = hashlib.blake2b(f"{parent_id}/{round_}/{op_id}".encode(), digest_size=8).hexdigest()
    return f"{parent_id[:40]}-{h}"
