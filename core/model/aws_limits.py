"""The limits of AWS Lambda durable executions, made explicit and configurable (pure).

The defaults are AWS's: 256 KB per operation's result, a 6 MB invocation response
(and so a 6 MB invocation input per page of state), 3,000 operations and 100 MB
of checkpointed data per execution, one year per execution. An operation over its
own limit is refused at its checkpoint (InvalidParameterValueException: the SDK
fails the execution, as on AWS); an execution over one of its limits is failed by
the service, and the invocation's token is withheld so that it ends PENDING.
"""

from __future__ import annotations

from dataclasses import dataclass

from alarmtop.core.model.aws_errors import invalid
from alarmtop.core.model.execution_errors import ValidationError

KB = 1024
MB = 1024 * KB
YEAR_S = 365 * 24 * 3600
# What AWS's longest wait, callback timeout and retry delay may be (the API model).
MAX_WAIT_S = 31_622_400
# The error of an execution the service failed for going over one of its limits.
LIMIT_ERROR = "Execution.LimitExceeded"


@dataclass(frozen=True)
class AwsLimits:
    """The limits of one runtime's Lambda-style executions (see the module docstring)."""

    operation_bytes: int = 256 * KB  # a result, a payload or an error of one operation
    response_bytes: int = 6 * MB  # an invocation's response; a page of its input state
    operations: int = 3000  # operations per execution
    execution_bytes: int = 100 * MB  # checkpointed data per execution
    execution_s: int = YEAR_S  # the longest an execution may run
    error_bytes: int = 32 * KB  # an ErrorObject in a checkpoint

    def __post_init__(self) -> None:
        for name in ("operation_bytes", "response_bytes", "operations", "execution_bytes",
                     "execution_s", "error_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValidationError(f"AwsLimits.{name} must be a whole number >= 1, "
                                      f"not {value!r}")

    def execution_timeout(self, asked_s: int | None) -> int:
        """The timeout an execution gets: what its function asks, at most the limit."""
        if asked_s is None:
            return self.execution_s
        return min(asked_s, self.execution_s)

    def check_payload(self, what: str, text: str | None) -> int:
        """The size of an operation's payload, refused over `operation_bytes`."""
        size = 0 if text is None else len(text.encode())
        if size > self.operation_bytes:
            raise invalid(f"{what} is {size} bytes; the limit is {self.operation_bytes} bytes "
                          "per operation")
        return size
