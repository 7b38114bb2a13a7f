"""Executions of the AWS SDK's handlers, as `runtime.executions` offers them: their
start, their view in `describe`, their fork and their replay check.

They are executions like the native ones (listed, described, paused, redriven,
stopped and audited by the same tools); what differs is answered here: an id that
is also an AWS execution name, an ARN, the SDK's own operation ids (a fork cuts by
the order operations were created), a replay check made while the re-run runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from alarmtop.core.kernel.executions.aws.service import AwsService
from alarmtop.core.model.aws_arn import check_execution_name
from alarmtop.core.model.aws_errors import AwsServiceError
from alarmtop.core.model.aws_redrive import cut_at, fork_point
from alarmtop.core.model.aws_state import AwsState
from alarmtop.core.model.execution_errors import ValidationError
from alarmtop.core.model.operations import ExecutionRecord, OperationRecord, OpType
from alarmtop.core.model.serialization import to_json

# History events a fork does not copy: the source's own life, not its operations'.
_NOT_COPIED = ("Execution", "Invocation")


def _checked_name(execution_id: str) -> str:
    try:
        return check_execution_name(execution_id)
    except AwsServiceError as exc:
        raise ValidationError(exc.message) from None


async def start_lambda(aws: AwsService, stub: Callable[[str], Any], name: str, event: Any,
                       execution_id: str | None, *, timeout_s: int | None,
                       parent: str | None, input_text: str | None, n: int) -> str:
    """Start an execution of the Lambda-style function `name` (see `Executions.start`)."""
    fn = aws.functions.get(name)
    if input_text is None:
        input_text = to_json(event, f"the input of execution {name!r}")
    if execution_id is None:
        execution_id = f"{name[:40]}-{aws.clock.now_ms():x}-{n}"
    _checked_name(execution_id)
    timeout = aws.limits.execution_timeout(timeout_s or fn.timeout_s)
    arn = aws.place.execution_arn(fn.name, fn.version, execution_id)
    out = await stub(execution_id).aws_begin(fn.name, fn.version, input_text, timeout,
                                             parent, not fn.durable, arn)
    return str(out["execution_id"])


def lambda_view(rec: ExecutionRecord) -> dict[str, Any]:
    """What `describe()` adds for an SDK execution: its ARN and its service state."""
    if rec.aws is None:
        return {"kind": "native"}
    aws = AwsState.from_dict(rec.aws)
    return {"kind": "aws", "arn": aws.arn, "aws": {
        "function": aws.function, "qualifier": aws.qualifier, "plain": aws.plain,
        "invocation": aws.invocation, "in_invocation": rec.in_invocation,
        "failures": aws.failures, "last_failure": aws.last_failure,
        "dead_letter": aws.dead or aws.dead_pending, "retry_at_ms": aws.retry_at_ms,
        "operations": aws.created, "bytes": aws.bytes}}


async def fork_lambda(aws: AwsService, stub: Callable[[str], Any], snap: dict[str, Any],
                      source_id: str, from_step: str, input: Any, new_id: str,
                      actor: str) -> dict[str, Any]:
    """Fork an SDK execution: a new execution with the operations created before
    `from_step`, whose handler runs from there (the SDK replays what was kept)."""
    rec = ExecutionRecord.from_dict(snap["record"])
    ops = {d["id"]: OperationRecord.from_dict(d) for d in snap["ops"]}
    from_id = fork_point(ops, from_step)
    cut = cut_at(ops, from_id)
    waiting = [i for i in cut.kept if ops[i].type is OpType.CHAINED_INVOKE and not ops[i].done]
    if waiting:
        raise ValidationError(f"the fork would keep invoke {waiting[0]} of {source_id!r}, "
                              "which is still waiting for its execution; fork from that "
                              "operation or an earlier one, or once it has ended")
    _checked_name(new_id)
    state = AwsState.from_dict(rec.aws or {})
    fn = aws.functions.get(state.function)
    input_text = rec.input if input is None else to_json(input, "the fork's input")
    kept = set(cut.kept)
    events = [ev for ev in snap["history"] if ev.get("Id") in kept
              and not str(ev.get("EventType", "")).startswith(_NOT_COPIED)]
    source = {"ExecutionId": source_id, "FromOperationId": from_id, "RequestedBy": actor}
    arn = aws.place.execution_arn(fn.name, fn.version, new_id)
    await stub(new_id).aws_begin_fork(
        fn.name, fn.version, input_text, rec.timeout_s or aws.limits.execution_s, arn,
        source, [ops[i].to_dict() for i in cut.kept], events, list(cut.expect))
    report = {"execution_id": new_id, "clean": True, "mode": "client-side",
              "summary": "the SDK replays the kept operations itself; the re-run is "
                         "compared with the record as it runs (replay_check() says how far)"}
    return {"execution_id": new_id, "source": source_id, "from_operation": from_id,
            "kept": list(cut.kept), "version": fn.version, "replay_check": report}
