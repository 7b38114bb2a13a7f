"""Operator tools for executions: pause, resume, redrive, fork, replay check,
callbacks by hand, and the timers of every execution.

`runtime.executions` forwards to them (`ops.executions`). Every action is
one audit row, whether it worked, failed or was refused; the work itself is an
RPC to the execution's object, so it never interleaves with the execution's own
events. A redrive or fork first replays the log against the handler version
that will run (`kernel.executions.replay_check`) and is refused where they disagree, unless
`force=True`.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from alarmtop.core.kernel.executions.replay_check import DEFAULT_DEADLINE_S, replay_check
from alarmtop.core.model.alarm_pause import check_snooze, snoozed_until
from alarmtop.core.model.callback_ids import decode_callback_id
from alarmtop.core.model.execution_errors import ReplayDivergence, UnknownCallback, ValidationError
from alarmtop.core.model.execution_timers import EXECUTION_TIMER
from alarmtop.core.model.operations import ExecutionRecord, OperationRecord, OpType
from alarmtop.core.model.replay import fork_point, plan_from
from alarmtop.core.model.serialization import to_json
from alarmtop.core.ops.audit import AuditLog
from alarmtop.core.ops.aws_executions import fork_lambda
from alarmtop.core.ops.execution_access import Callbacks, ExecutionAccess, check_execution_id

# History events a fork does not copy: the source's own life, not its operations'.
_NOT_COPIED = ("Execution", "Invocation")
MAX_TIMERS_PAGE = 1000


def _reason(reason: Any) -> str | None:
    if reason is not None and not isinstance(reason, str):
        raise ValidationError(f"a reason is text, not {reason!r}")
    return reason


class ExecutionTools:
    """The operator tools of executions (see the module docstring)."""

    def __init__(self, access: ExecutionAccess, audit: AuditLog, callbacks: Callbacks) -> None:
        self._access = access
        self.engine = access.engine
        self._audit = audit
        self._callbacks = callbacks
        self._fork_ids = itertools.count(1)

    def _stub(self, execution_id: str) -> Any:
        return self._access.stub(execution_id)

    async def _record(self, execution_id: str) -> ExecutionRecord:
        return await self._access.record(execution_id)

    async def _audited(self, action: str, target: str, reason: str | None, actor: str,
                       role: str | None, detail: dict[str, Any],
                       run: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """Run an action, auditing it whatever happens (bad input included)."""
        try:
            _reason(reason)
            out = await run()
        except Exception as exc:
            extra: dict[str, Any] = {"error": str(exc)}
            if isinstance(exc, ReplayDivergence):
                extra["replay_check"] = exc.report
            await self._audit.record(actor, action, target, reason, ok=False, role=role,
                                     detail={**detail, **extra})
            raise
        await self._audit.record(actor, action, target, reason, ok=True, role=role,
                                 detail={**detail, **out})
        return out

    # -- pause and resume -----------------------------------------------------------------

    async def pause(self, execution_id: str, reason: str | None = None, *, actor: str = "api",
                    role: str | None = None) -> dict[str, Any]:
        """Run nothing of the execution until `resume`: its timers keep their due times
        (what falls due meanwhile runs on resume, the execution timeout included) and
        callbacks sent meanwhile are recorded. Its status is unchanged."""
        async def run() -> dict[str, Any]:
            await self._record(execution_id)
            out: dict[str, Any] = await self._stub(execution_id).control("pause", reason, actor)
            return out
        return await self._audited("pause", execution_id, reason, actor, role, {}, run)

    async def resume(self, execution_id: str, *, reason: str | None = None, actor: str = "api",
                     role: str | None = None) -> dict[str, Any]:
        """Let a paused execution run again; timers that fell due meanwhile run now."""
        async def run() -> dict[str, Any]:
            await self._record(execution_id)
            out: dict[str, Any] = await self._stub(execution_id).control("resume", reason,
                                                                          actor)
            return out
        return await self._audited("resume", execution_id, reason, actor, role, {}, run)

    # -- redrive and fork -----------------------------------------------------------------

    async def redrive(self, execution_id: str, version: str | None = None, *,
                      force: bool = False, reason: str | None = None, actor: str = "api",
                      role: str | None = None,
                      deadline_s: float = DEFAULT_DEADLINE_S) -> dict[str, Any]:
        """Carry a failed or timed-out execution on from its first failed operation,
        under the same id: every recorded result before it is kept, it and the
        operations after it are reset and run again, the history records the redrive,
        and the execution timeout starts again from now.

        `version`: the pinned handler version, or a newer registered one. The log is
        first replayed against it; a divergence refuses the redrive (saying where)
        unless `force=True`."""
        async def run() -> dict[str, Any]:
            await self._record(execution_id)
            out: dict[str, Any] = await self._stub(execution_id).redrive(
                version, bool(force), float(deadline_s), actor)
            return out
        return await self._audited("redrive", execution_id, reason, actor, role,
                                   {"version": version, "force": bool(force)}, run)

    async def delete(self, execution_id: str, *, reason: str | None = None,
                     actor: str = "api", role: str | None = None) -> dict[str, Any]:
        """Delete a finished execution of a Lambda-style function and all its data
        (DeleteDurableExecution): its record, operations, history and timers go in
        one commit of its object; what it started (chained invokes) stays."""
        async def run() -> dict[str, Any]:
            await self._record(execution_id)
            out: dict[str, Any] = await self._stub(execution_id).aws_delete()
            return out
        return await self._audited("delete", execution_id, reason, actor, role, {}, run)

    async def fork(self, source_id: str, from_step: str, input: Any = None,
                   execution_id: str | None = None, version: str | None = None, *,
                   force: bool = False, reason: str | None = None, actor: str = "api",
                   role: str | None = None,
                   deadline_s: float = DEFAULT_DEADLINE_S) -> dict[str, Any]:
        """A new execution that takes the source's recorded results up to `from_step`
        (a step name that occurs once, or an operation id) and runs from there.

        `input` replaces the source's input (None: the same); the new execution's id
        is `execution_id` (None: made up); `version` as for `redrive`, and the same
        replay check, refused unless `force=True`."""
        async def run() -> dict[str, Any]:
            return await self._fork(source_id, from_step, input, execution_id, version,
                                    bool(force), actor, float(deadline_s))
        return await self._audited("fork", source_id, reason, actor, role,
                                   {"from_step": from_step, "version": version,
                                    "force": bool(force), "new_execution_id": execution_id},
                                   run)

    async def _fork(self, source_id: str, from_step: str, input: Any, new_id: str | None,
                    version: str | None, force: bool, actor: str,
                    deadline_s: float) -> dict[str, Any]:
        await self._record(source_id)
        if new_id is not None:
            check_execution_id(new_id)
            if await self.engine.store.get(new_id) is not None:
                raise ValidationError(f"execution id {new_id!r} is already used; choose "
                                      "another execution_id for the fork")
        snap = await self._stub(source_id).snapshot()
        rec = ExecutionRecord.from_dict(snap["record"])
        if rec.aws is not None:
            new_id = new_id or (f"{source_id[:30]}-fork-{self.engine.clock.now_ms():x}-"
                                f"{next(self._fork_ids)}")
            return await fork_lambda(self.engine.aws, self._stub, snap, source_id, from_step,
                                     input, new_id, actor)
        ops = {d["id"]: OperationRecord.from_dict(d) for d in snap["ops"]}
        from_id = fork_point(ops.values(), from_step)
        plan = plan_from(ops.values(), snap["marks"], from_id)
        waiting = [i for i in plan.kept
                   if ops[i].type is OpType.CHAINED_INVOKE and not ops[i].done]
        if waiting:
            # Its child reports to the source, never to the fork: the fork would wait forever.
            raise ValidationError(f"the fork would keep invoke {waiting[0]} of {source_id!r}, "
                                  "which is still waiting for its child; fork from that "
                                  "operation or an earlier one, or once the child has ended")
        fn = self.engine.pick_version(rec.name, rec.version, version)
        input_text = rec.input if input is None else to_json(input, "the fork's input")
        marks = {k: snap["marks"][k] for k in plan.kept_marks}
        report = await replay_check(
            fn, rec, {i: ops[i] for i in plan.kept}, marks, store=self.engine.store,
            clock=self.engine.clock, faults=self.engine.faults, input_text=input_text,
            deadline_s=deadline_s)
        if not report["clean"] and not force:
            raise ReplayDivergence(source_id, "fork", report)
        new_id = new_id or f"{source_id}-fork-{self.engine.clock.now_ms():x}-{next(self._fork_ids)}"
        kept = set(plan.kept)
        events = [ev for ev in snap["history"] if ev.get("Id") in kept
                  and not str(ev.get("EventType", "")).startswith(_NOT_COPIED)]
        source = {"ExecutionId": source_id, "FromOperationId": from_id, "RequestedBy": actor}
        await self._stub(new_id).begin_fork(
            rec.name, fn.version, input_text, rec.timeout_s, source,
            [ops[i].to_dict() for i in plan.kept], marks, events)
        return {"execution_id": new_id, "source": source_id, "from_operation": from_id,
                "kept": list(plan.kept), "version": fn.version, "replay_check": report}

    # -- the replay check -----------------------------------------------------------------

    async def replay_check(self, execution_id: str, version: str | None = None, *,
                           deadline_s: float = DEFAULT_DEADLINE_S) -> dict[str, Any]:
        """Replay the execution's whole log against `version` (None: its pinned one)
        without running or writing anything; the first divergence, or "replays
        cleanly". Read-only: not audited."""
        rec = await self._record(execution_id)
        if rec.aws is not None:  # the SDK replays client-side: its re-run was compared
            out: dict[str, Any] = await self._stub(execution_id).aws_replay_report()
            return out
        store = self.engine.store
        fn = self.engine.pick_version(rec.name, rec.version, version)
        ops = {op.id: op for op in await store.operations(rec.id)}
        marks = await store.marks(rec.id) if rec.has_marks else {}
        return await replay_check(fn, rec, ops, marks, store=store,
                                  clock=self.engine.clock, faults=self.engine.faults,
                                  deadline_s=float(deadline_s))

    # -- callbacks by hand ----------------------------------------------------------------

    async def complete_callback(self, callback_id: str, outcome: str = "success",
                                payload: Any = None, *, error_type: str = "CallbackError",
                                message: str = "", reason: str | None = None,
                                actor: str = "api", role: str | None = None) -> dict[str, Any]:
        """An operator completes (`outcome="success"`, with `payload`) or fails
        (`"failure"`, with `error_type` and `message`) a waiting callback by hand,
        audited. A compensation waiting for a human takes `retry_compensation`,
        `resolve` or `abort` instead."""
        pair = decode_callback_id(callback_id)
        target = pair[0] if pair is not None else str(callback_id)

        async def run() -> dict[str, Any]:
            if pair is None:
                raise UnknownCallback(str(callback_id))
            if outcome == "success":
                await self._callbacks.success(callback_id, payload)
            elif outcome == "failure":
                await self._callbacks.failure(callback_id, error_type, message)
            else:
                raise ValidationError(f"outcome is 'success' or 'failure', not {outcome!r}")
            return {"callback_id": callback_id, "outcome": outcome}
        return await self._audited("complete_callback", target, reason, actor, role,
                                   {"callback_id": str(callback_id), "outcome": outcome}, run)


    # -- timers ---------------------------------------------------------------------------

    def engine_stub(self, execution_id: str) -> Any:
        """The execution's object, for a caller that audits the action itself."""
        return self._stub(execution_id)

    async def move_timer(self, execution_id: str, op_id: str | None, kind: str, *,
                         due_ms: int | None = None, by_ms: int | None = None,
                         reason: str | None = None, actor: str = "api",
                         role: str | None = None) -> dict[str, Any]:
        """Move one timer of an execution (`op_id` None: its own timeout): to `due_ms`,
        or `by_ms` later than it is (from now, when it is overdue): a snooze. With
        neither, it falls due now: fire it. Audited."""
        async def run() -> dict[str, Any]:
            if due_ms is not None and by_ms is not None:
                raise ValidationError("move_timer takes due_ms or by_ms, not both")
            if due_ms is not None and (not isinstance(due_ms, int) or isinstance(due_ms, bool)):
                raise ValidationError(f"due_ms is epoch milliseconds, not {due_ms!r}")
            now = self.engine.clock.now_ms()
            at = now if due_ms is None else due_ms
            if by_ms is not None:
                step = check_snooze(by_ms)
                rows = await self.engine.store.timers(MAX_TIMERS_PAGE, None, execution_id)
                mine = [r for r in rows if (r["op_id"] or EXECUTION_TIMER) ==
                        (op_id or EXECUTION_TIMER) and r["kind"] == kind]
                if not mine:
                    raise ValidationError(f"execution {execution_id!r} has no pending {kind} "
                                          f"timer on {op_id or 'itself'}")
                at = snoozed_until(int(mine[0]["due_ms"]), now, step)
            await self._record(execution_id)
            out: dict[str, Any] = await self._stub(execution_id).move_timer(
                op_id, kind, at, actor)
            return out
        return await self._audited("move_timer", execution_id, reason, actor, role,
                                   {"op_id": op_id, "kind": kind, "due_ms": due_ms,
                                    "by_ms": by_ms}, run)


    async def timers(self, limit: int = 100, after: Sequence[Any] | None = None,
                     execution_id: str | None = None) -> list[dict[str, Any]]:
        """Every pending execution timer (waits, step retries, condition polls,
        callback and heartbeat deadlines, execution timeouts), soonest first; page
        with `after=` the last row's `key`."""
        if not isinstance(limit, int) or isinstance(limit, bool) or not 0 < limit <= \
                MAX_TIMERS_PAGE:
            raise ValidationError(f"limit is 1-{MAX_TIMERS_PAGE}, not {limit!r}")
        if after is not None and (not isinstance(after, (list, tuple)) or len(after) != 4):
            raise ValidationError("after is the `key` of the last row of the previous page")
        return await self.engine.store.timers(limit, after, execution_id)
