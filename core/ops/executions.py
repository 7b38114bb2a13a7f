"""`runtime.executions`: start, inspect and steer durable executions."""

from __future__ import annotations

import itertools
import json
from typing import Any

from alarmtop.core.kernel.executions.functions import version_key
from alarmtop.core.model.execution_errors import UnknownExecution, ValidationError
from alarmtop.core.model.operations import ExecutionRecord, OpType
from alarmtop.core.model.serialization import to_json
from alarmtop.core.ops.audit import AuditLog
from alarmtop.core.ops.aws_executions import lambda_view, start_lambda
from alarmtop.core.ops.execution_access import Callbacks, ExecutionAccess
from alarmtop.core.ops.execution_tools import ExecutionTools


class Executions:
    """`runtime.executions`: start, inspect and steer durable executions.

    The operator tools (pause, resume, redrive, fork, replay check, callbacks by
    hand, timers) are `ops.execution_tools.ExecutionTools`; they are forwarded here
    under their public names."""

    def __init__(self, access: ExecutionAccess, audit: AuditLog, callbacks: Callbacks,
                 tools: ExecutionTools) -> None:
        self._access = access
        self.engine = access.engine
        self._audit = audit
        self._callbacks = callbacks
        self.tools = tools
        self._ids = itertools.count(1)
        # The operator tools, under the names `runtime.executions` has always offered.
        self.pause = tools.pause
        self.resume = tools.resume
        self.redrive = tools.redrive
        self.fork = tools.fork
        self.replay_check = tools.replay_check
        self.complete_callback = tools.complete_callback
        self.engine_stub = tools.engine_stub
        self.move_timer = tools.move_timer
        self.timers = tools.timers

    def _stub(self, execution_id: str) -> Any:
        return self._access.stub(execution_id)

    async def start(self, name: str, event: Any = None, execution_id: str | None = None, *,
                    version: str | None = None, timeout_s: int | None = None,
                    parent: str | None = None, input_text: str | None = None) -> str:
        """Start an execution of handler `name` with input `event`; returns its id.

        `name` is a `@durable_execution` handler registered with `register_execution`,
        or a function of the AWS SDK registered with `register_lambda` (its id is then
        also its DurableExecutionName: 1-64 letters, digits, '-' or '_').
        Starting again with the same id and name returns the existing execution.
        """
        if name in self.engine.aws.functions and name not in self.engine.handlers:
            return await start_lambda(self.engine.aws, self._stub, name, event, execution_id,
                                      timeout_s=timeout_s, parent=parent,
                                      input_text=input_text, n=next(self._ids))
        versions = self.engine.handlers.get(name)
        if not versions:
            raise UnknownExecution(f"handler {name!r}", "register it with "
                                   f"runtime.register_execution() or register_lambda() "
                                   f"(registered: {sorted(self.engine.handlers) or 'none'}; "
                                   f"Lambda-style: {list(self.engine.aws.functions) or 'none'})")
        version = version or max(versions, key=version_key)
        fn = self.engine.handler(name, version)
        if input_text is None:  # an invoke passes its own serialized payload
            input_text = to_json(event, f"the input of execution {name!r}")
        if execution_id is None:
            execution_id = f"{name}-{self.engine.clock.now_ms():x}-{next(self._ids)}"
        out = await self._stub(execution_id).begin(name, version, input_text,
                                                   timeout_s or fn.timeout_s, parent)
        return str(out["execution_id"])

    async def _record(self, execution_id: str) -> ExecutionRecord:
        return await self._access.record(execution_id)

    async def describe(self, execution_id: str) -> dict[str, Any]:
        """Status, result, error, history, saga stack and callbacks as a JSON-ready dict."""
        rec = await self._record(execution_id)
        store = self.engine.store
        ops = await store.operations(rec.id)
        callbacks = [{"name": op.name, "callback_id": op.callback_id,
                      "status": op.status.value.lower(), "kind": op.sub_type}
                     for op in sorted(ops, key=lambda o: o.started_ms or 0)
                     if op.type is OpType.CALLBACK]
        return {
            "execution_id": rec.id, "name": rec.name, "version": rec.version,
            "status": rec.status.value,
            "result": None if rec.result is None else json.loads(rec.result),
            "error": rec.error, "input": json.loads(rec.input),
            "created_ms": rec.created_ms, "updated_ms": rec.updated_ms,
            "ended_ms": rec.ended_ms, "invocations": rec.invocations,
            "blocked_on": rec.blocked_on, "human_hold": rec.human_hold,
            "history": await store.history(rec.id),
            "saga": rec.saga, "callbacks": callbacks,
            "paused": rec.paused is not None, "paused_reason": rec.paused,
            "paused_ms": rec.paused_ms, "redrives": rec.redrives,
            "forked_from": rec.forked_from, **lambda_view(rec),
        }

    async def history(self, execution_id: str) -> list[dict[str, Any]]:
        """The AWS-style history events, ready for `json.dumps`."""
        rec = await self._record(execution_id)
        return await self.engine.store.history(rec.id)

    async def list(self, status: str | None = None, limit: int = 100,
                   offset: int = 0) -> list[dict[str, Any]]:
        recs = await self.engine.store.list(status, limit, offset)
        return [{"execution_id": r.id, "name": r.name, "status": r.status.value,
                 "blocked_on": r.blocked_on, "updated_ms": r.updated_ms, "saga": r.saga,
                 "paused": r.paused is not None, "kind": "aws" if r.aws else "native"}
                for r in recs]

    async def counts(self) -> dict[str, int]:
        return await self.engine.store.counts()

    # -- callbacks from the outside -------------------------------------------------------

    async def send_callback_success(self, callback_id: str, payload: Any = None) -> None:
        """Complete a callback; a string is stored as sent, other values as JSON."""
        await self._callbacks.success(callback_id, payload)

    async def send_callback_failure(self, callback_id: str, error_type: str = "CallbackError",
                                    message: str = "", data: Any = None) -> None:
        await self._callbacks.failure(callback_id, error_type, message, data)

    async def send_callback_heartbeat(self, callback_id: str) -> None:
        await self._callbacks.heartbeat(callback_id)

    # -- operators ------------------------------------------------------------------------

    async def _operate(self, execution_id: str, action: str, text: str | None,
                       actor: str, role: str | None, reason: str | None = None
                       ) -> dict[str, Any]:
        """Apply an operator action; audited with its reason (or its text), ok or not."""
        audit = self._audit
        why = reason if reason is not None else text
        detail: dict[str, Any] = {} if text is None or text == why else {"note": text}
        try:
            if action == "resolve" and not text:
                raise ValidationError("resolve() needs a note saying what was done by hand")
            await self._record(execution_id)
            out: dict[str, Any] = await self._stub(execution_id).operate(action, text, actor)
        except Exception as exc:
            await audit.record(actor, action, execution_id, why, ok=False, role=role,
                               detail={**detail, "error": str(exc)})
            raise
        await audit.record(actor, action, execution_id, why, ok=True, role=role,
                           detail={**detail, **out})
        return out

    async def retry_compensation(self, execution_id: str, *, actor: str = "api",
                                 role: str | None = None,
                                 reason: str | None = None) -> dict[str, Any]:
        """Re-run the compensation that failed for good, then carry on rolling back."""
        return await self._operate(execution_id, "retry_compensation", None, actor, role,
                                   reason)

    async def resolve(self, execution_id: str, note: str, *, actor: str = "api",
                      role: str | None = None, reason: str | None = None) -> dict[str, Any]:
        """Record the failed compensation as done by hand (with `note`) and carry on."""
        return await self._operate(execution_id, "resolve", note, actor, role, reason)

    async def abort(self, execution_id: str, reason: str = "", *, actor: str = "api",
                    role: str | None = None) -> dict[str, Any]:
        """End the execution as aborted (a failure), running nothing more."""
        return await self._operate(execution_id, "abort", reason, actor, role)

    async def hand_to_human(self, execution_id: str, reason: str = "", *, actor: str = "api",
                            role: str | None = None) -> dict[str, Any]:
        """Hold the execution for a human: timers still complete, nothing runs until
        an operator resolves (carry on) or aborts it."""
        return await self._operate(execution_id, "hand_to_human", reason, actor, role)
