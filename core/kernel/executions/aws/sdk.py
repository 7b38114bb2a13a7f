"""The one door to the AWS SDK (`aws-durable-execution-sdk-python`, the `aws` extra):
imported here only, and only when a Lambda-style function is invoked.

The SDK is called as AWS's own in-process runner calls it: with a
`DurableExecutionInvocationInputWithClient` whose client is ours. The client's two
calls (`checkpoint`, `get_execution_state`) run on the SDK's threads; each hands
its request to the service on the runtime's event loop and blocks its thread
until the answer, which it turns back into the SDK's types. A refusal becomes the
SDK's own `CheckpointError`/`GetExecutionStateError`, classified as boto3's would
be (a 4xx fails the execution, a 5xx, a throttle or a stale token re-runs the
invocation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from alarmtop.core.model.aws_errors import AwsServiceError

# Sends one request to the service and blocks for its answer (raises AwsServiceError).
Call = Callable[..., dict[str, Any]]
INSTALL_HINT = ("the AWS SDK is not installed: pip install 'alarmtop[aws]' (it brings "
                "aws-durable-execution-sdk-python)")


def require_sdk() -> None:
    """Refuse, saying how to fix it, when the SDK is missing."""
    try:
        import aws_durable_execution_sdk_python  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(INSTALL_HINT) from exc


class ClientError(Exception):
    """A refusal shaped as botocore's `ClientError`, so the SDK classifies it as AWS's."""

    def __init__(self, error: AwsServiceError, operation: str) -> None:
        super().__init__(f"An error occurred ({error.code}) when calling the {operation} "
                         f"operation: {error.message}")
        self.response = {"Error": {"Code": error.code, "Message": error.message},
                         "ResponseMetadata": {"HTTPStatusCode": error.status}}


def _operations(wires: list[dict[str, Any]]) -> list[Any]:
    from aws_durable_execution_sdk_python.lambda_service import Operation
    return [Operation.from_json_dict(w) for w in wires]


class InProcessClient:
    """The SDK's `DurableServiceClient`, answered by the service (see the module)."""

    def __init__(self, call: Call) -> None:
        self._call = call

    def checkpoint(self, durable_execution_arn: str, checkpoint_token: str,
                   updates: list[Any], client_token: str | None) -> Any:
        from aws_durable_execution_sdk_python.exceptions import CheckpointError
        from aws_durable_execution_sdk_python.lambda_service import (
            CheckpointOutput,
            CheckpointUpdatedExecutionState,
        )
        try:
            out = self._call("checkpoint", durable_execution_arn, checkpoint_token,
                             [u.to_dict() for u in updates], client_token)
        except AwsServiceError as exc:
            raise CheckpointError.from_exception(
                ClientError(exc, "CheckpointDurableExecution")) from None
        state = out.get("NewExecutionState") or {}
        return CheckpointOutput(
            checkpoint_token=out.get("CheckpointToken"),
            new_execution_state=CheckpointUpdatedExecutionState(
                operations=_operations(state.get("Operations") or []),
                next_marker=state.get("NextMarker")))

    def get_execution_state(self, durable_execution_arn: str, checkpoint_token: str,
                            next_marker: str, max_items: int = 1000) -> Any:
        from aws_durable_execution_sdk_python.exceptions import GetExecutionStateError
        from aws_durable_execution_sdk_python.lambda_service import StateOutput
        try:
            out = self._call("get_state", durable_execution_arn, checkpoint_token,
                             next_marker, max_items)
        except AwsServiceError as exc:
            raise GetExecutionStateError.from_exception(
                ClientError(exc, "GetDurableExecutionState")) from None
        return StateOutput(operations=_operations(out.get("Operations") or []),
                           next_marker=out.get("NextMarker"))


def invocation_event(payload: dict[str, Any], client: InProcessClient) -> Any:
    """The SDK's input for one invocation: the Lambda envelope `payload`, with our client."""
    from aws_durable_execution_sdk_python.execution import (
        DurableExecutionInvocationInput,
        DurableExecutionInvocationInputWithClient,
    )
    plain = DurableExecutionInvocationInput.from_json_dict(payload)
    return DurableExecutionInvocationInputWithClient.from_durable_execution_invocation_input(
        plain, client)


class LambdaContext:
    """What a Lambda handler's `context` argument offers, for handlers that read it."""

    def __init__(self, function_name: str, version: str, arn: str, request_id: str,
                 remaining_ms: Callable[[], int]) -> None:
        self.function_name = function_name
        self.function_version = version
        self.invoked_function_arn = arn
        self.memory_limit_in_mb = 128
        self.aws_request_id = request_id
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "alarmtop"
        self.tenant_id: str | None = None
        self._remaining = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self._remaining()
