"""The AWS Lambda durable-execution API's errors, as the service side raises them.

A checkpoint, a state read or a callback that the service refuses answers with one
of AWS's error codes and HTTP statuses, so that the SDK classifies it as AWS's own
would: a 4xx other than 429 and other than "Invalid checkpoint token" fails the
execution; a 5xx, a 429 and a stale token make the invocation run again.

::

    AlarmtopError
     └── AwsServiceError                         code, message, HTTP status
          ├── InvalidParameterValueException     400: the request is wrong
          ├── ResourceNotFoundException          404: no such execution or callback
          ├── ResourceConflictException          409: not in a state that allows it
          ├── DurableExecutionAlreadyStartedException  409: the name runs another input
          ├── InvalidRequestContentException     400: the body is not what it must be
          ├── CallbackTimeoutException           400: the callback has timed out
          ├── RequestTooLargeException           413: the request body is too large
          ├── UnsupportedMediaTypeException      415
          ├── TooManyRequestsException           429
          └── ServiceException                   500: the service failed (retryable)

Errors cross node links and RPCs as data (`to_dict`/`from_dict`), never as Python
objects: a refusal on the owner of an execution reads the same on any node.
"""

from __future__ import annotations

from typing import Any

from alarmtop.core.model.errors import AlarmtopError

# The SDK retries an invocation refused with exactly this prefix (a stale token).
INVALID_TOKEN = "Invalid checkpoint token"


class AwsServiceError(AlarmtopError):
    """An error of the Lambda durable-execution API: `code` (AWS's exception name),
    `message`, `status` (the HTTP status AWS answers it with)."""

    code = "ServiceException"
    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "status": self.status}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> AwsServiceError:
        cls = _BY_CODE.get(str(data.get("code")), ServiceException)
        return cls(str(data.get("message", "")))


class InvalidParameterValueException(AwsServiceError):
    code = "InvalidParameterValueException"
    status = 400


class ResourceNotFoundException(AwsServiceError):
    code = "ResourceNotFoundException"
    status = 404


class ResourceConflictException(AwsServiceError):
    code = "ResourceConflictException"
    status = 409


class DurableExecutionAlreadyStartedException(AwsServiceError):
    code = "DurableExecutionAlreadyStartedException"
    status = 409


class InvalidRequestContentException(AwsServiceError):
    code = "InvalidRequestContentException"
    status = 400


class CallbackTimeoutException(AwsServiceError):
    code = "CallbackTimeoutException"
    status = 400  # as the Lambda API's model says (not 408)


class RequestTooLargeException(AwsServiceError):
    code = "RequestTooLargeException"
    status = 413


class UnsupportedMediaTypeException(AwsServiceError):
    code = "UnsupportedMediaTypeException"
    status = 415


class TooManyRequestsException(AwsServiceError):
    code = "TooManyRequestsException"
    status = 429


class ServiceException(AwsServiceError):
    code = "ServiceException"
    status = 500


_BY_CODE: dict[str, type[AwsServiceError]] = {
    cls.code: cls for cls in (InvalidParameterValueException, ResourceNotFoundException,
                              ResourceConflictException, CallbackTimeoutException,
                              DurableExecutionAlreadyStartedException,
                              InvalidRequestContentException,
                              RequestTooLargeException, UnsupportedMediaTypeException,
                              TooManyRequestsException, ServiceException)}


def invalid(message: str) -> InvalidParameterValueException:
    return InvalidParameterValueException(message)


def stale_token(why: str) -> InvalidParameterValueException:
    """The token is not the current one: the SDK ends the invocation and it runs again."""
    return InvalidParameterValueException(f"{INVALID_TOKEN}: {why}")
