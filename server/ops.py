"""Commands and queries of the ops channel, applied to a runtime.

Every frame that names a command (anything but a query) is one row of the audit
log, with role, client address, time, command, target, reason and outcome
(`ok`, `failed`, or `refused`: wrong role, bad input, unknown op, over the rate
limit), and is announced as an `operator.*` event: what an operator did, tried
or was stopped from doing. The execution commands are audited by the runtime
itself when they run; everything refused before that is audited here. Text that
came from the client is made safe to store first (valid Unicode, bounded), so
no frame can skip its row. Queries are not audited: the console sends them on
its own, many a second. Queries page and filter: a client never receives the
whole world.

Refusals are counted whole but written in full only up to a pace: past the first
few of a window from one client address and role, they are coalesced into one
row when the window ends ("N refused commands of kinds ..."; `refusals`), so a
client refused in a loop cannot fill the disk through the audit log.

Each command has a deadline (`deadline_s`, 5 s by default), and its answer comes
by then. Waiting for a busy object's turn gives up at the deadline with the
reason ("ClickCounter/home is busy running its alarm (started 12 s ago)") and
nothing done. A command that got further is never cut off, because a runtime
decision on a record must land whole or not at all: at the deadline it is
answered as failed ("no outcome within 5 s ... left to finish") and audited so,
then left to finish on its own, and its late outcome is logged. (An execution
command is audited by the runtime when it ends; one that passes its deadline
after it started therefore has a second row, the runtime's, with its outcome.)
A query past its deadline is simply cancelled: it changes nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from alarmtop.core import AlarmStatus, RetryPolicy, Runtime
from alarmtop.core.model import hook_info, keys
from alarmtop.core.model.alarm_policy import AlarmRecord, is_near_exhaustion
from alarmtop.core.model.callback_ids import decode_callback_id
from alarmtop.core.model.errors import AlarmtopError, CommandTimeout
from alarmtop.core.model.operations import EXECUTION_CLASS
from alarmtop.core.model.storage_values import ObjectEntry
from alarmtop.core.ops import Supervisor, patience
from alarmtop.server.execution_ops import RUNTIME_AUDITED, TOOL_QUERIES, ExecutionTools
from alarmtop.server.fleet_view import FleetView
from alarmtop.server.listing import (
    KEYED,
    CountCache,
    check_scan,
    check_sort,
    contains,
    keyed_order,
    resident_in_page,
    sort_rows,
    window,
)
from alarmtop.server.operator_ops import OPERATOR_COMMANDS, OPERATOR_QUERIES, OperatorTools
from alarmtop.server.refusals import RefusalLedger, Summary, host_of
from alarmtop.server.wire import OPS, Command, Hello, ProtocolError, split_object

DEFAULT_PAGE = 50
ALARM_STATES = ("pending", "running", "retrying", "dead")
SNAPSHOT_ROWS = 50
QUERY_OPS = frozenset(op for op, (operator, _) in OPS.items() if not operator)
# The runtime audits these itself, one row each with the client as actor.
EXECUTION_OPS = (frozenset({"retry_compensation", "resolve", "abort", "hand_to_human"})
                 | RUNTIME_AUDITED | OPERATOR_COMMANDS)
TARGET_FIELDS = ("object", "target", "fault_id", "callback_id", "execution_id")
MAX_AUDIT_TEXT = 500  # characters of client text kept in a row about a refused frame
DEADLINE_S = 5.0  # a command's answer comes within this (alarmtop serve --command-timeout)
# Beyond the deadline, the time a command that gave up at it (a busy object) has to
# write its audit row and answer with its own reason rather than a bare timeout.
ANSWER_GRACE_S = 0.5
log = logging.getLogger("alarmtop.server")


class _Answer:
    """Who answers a command and writes its one audit row: the command when it ends in
    time, else its deadline. The first to claim it does."""

    __slots__ = ("claimed", "late")

    def __init__(self) -> None:
        self.claimed = False
        self.late = False  # the deadline answered first

    def claim(self, late: bool = False) -> bool:
        if self.claimed:
            return False
        self.claimed, self.late = True, late
        return True


@dataclass(frozen=True)
class Session:
    """Who sent a command: their role and address, for permissions and the audit log."""

    role: str
    address: str


if TYPE_CHECKING:
    from alarmtop.core.model.operations import ExecutionRecord


# `AlarmStatus.to_dict` is `dataclasses.asdict`, which deep-copies field by field: a
# page of 400 rows cost 4.4 ms of the event loop that way, 0.5 ms this way.
_STATUS_FIELDS = tuple(f.name for f in dataclasses.fields(AlarmStatus))


def alarm_row(status: AlarmStatus) -> dict[str, Any]:
    d = {name: getattr(status, name) for name in _STATUS_FIELDS}
    d["object"] = status.object
    d["attempts"] = [a.to_dict() for a in status.attempts]
    return d


def record_row(rec: AlarmRecord, policy: RetryPolicy) -> dict[str, Any]:
    """`alarm_row(AlarmStatus.of(rec, policy))`, built straight from the record: a page
    of a listing makes hundreds of them on the event loop."""
    attempts = rec.attempts
    return {"object_class": rec.object_class, "object_name": rec.object_name,
            "scheduled_ms": rec.scheduled_ms, "state": rec.state.value,
            "retry_count": rec.retry_count, "next_attempt_ms": rec.next_attempt_ms,
            "last_error": rec.last_error, "attempts": [a.to_dict() for a in attempts],
            "max_retries": policy.max_retries,
            "near_exhaustion": is_near_exhaustion(rec, policy),
            "attempt_count": max(rec.attempt_count, len(attempts)),
            "paused": rec.paused_ms is not None, "paused_ms": rec.paused_ms,
            "object": f"{rec.object_class}/{rec.object_name}"}


def alarm_cursor(rec: AlarmRecord, order: str) -> list[Any]:
    """The row's key in `order` (what `after` takes to go on after it)."""
    if order == "object":
        return [rec.object_class, rec.object_name]
    return [keys.alarm_urgency(rec.state, rec.retry_count, rec.next_attempt_ms),
            rec.object_class, rec.object_name]


def execution_row(rec: ExecutionRecord) -> dict[str, Any]:
    """An execution as the listings show it (`Executions.list`'s rows)."""
    return {"execution_id": rec.id, "name": rec.name, "status": rec.status.value,
            "blocked_on": rec.blocked_on, "updated_ms": rec.updated_ms, "saga": rec.saga,
            "paused": rec.paused is not None}


def execution_cursor(rec: ExecutionRecord) -> list[Any]:
    return [keys.execution_urgency(rec.status.value, rec.updated_ms), rec.id]


def cursor(listing: str, order: str, args: dict[str, Any]) -> keys.Cursor | None:
    """The `after` of a query, checked against the order it pages (or ProtocolError)."""
    value = args.get("after")
    if value is None:
        return None
    try:
        return keys.check_cursor(f"{listing}.{order}", value)
    except ValueError as exc:
        raise ProtocolError(f"{listing}: 'after' must be a cursor this listing gave (its "
                            f"'cursors'), as given: {exc}") from None


def unkeyed(listing: str, why: str, args: dict[str, Any]) -> None:
    """Refuse `after` where the listing is built by a bounded sort (it pages by offset)."""
    if args.get("after") is not None:
        served = ", ".join(f"sort={k}" for k in KEYED[listing])
        raise ProtocolError(f"{listing}: {why}, this listing pages by offset, not 'after' "
                            f"(which pages the orders an index serves: {served}, no filter "
                            "that the index cannot serve)")


class OpsService:
    """The commands and queries of the ops channel; `deadline_s` bounds each answer."""

    def __init__(self, runtime: Runtime, deadline_s: float = DEADLINE_S,
                 refusals: RefusalLedger | None = None) -> None:
        if not deadline_s > 0:
            raise ValueError(f"the command deadline is seconds > 0, not {deadline_s!r}")
        self.rt = runtime
        self.refusals = refusals or RefusalLedger()
        self.totals = CountCache()
        self.deadline_s = deadline_s
        # Commands run in tasks of their own, so that one past its deadline is left to
        # finish after it was answered; `close()` ends whatever is left at shutdown.
        self.tasks = Supervisor(None, "ops commands")
        self._tools = ExecutionTools(runtime)
        self._operator_tools = OperatorTools(runtime)  # audits its commands itself
        self.fleet = FleetView(runtime)  # the nodes, cached: the header asks every tick
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[Any]]] = {
            "rearm": self._rearm, "fire_now": self._fire_now,
            "clear_dead_letter": self._clear_dead_letter, "inject_fault": self._inject_fault,
            "clear_fault": self._clear_fault, "send_callback": self._send_callback,
            "alarms": self.alarms, "alarm": self._alarm, "objects": self.objects,
            "executions": self.executions, "execution": self._execution,
            "audit": self._audit, "faults": self._faults, "snapshot": self._snapshot,
            "nodes": self.fleet.query,
        }

    async def run(self, cmd: Command, session: Session) -> Any:
        """Apply a command within its deadline; raises `AlarmtopError`/`ProtocolError`
        with a clear message. A command (not a query) is audited whatever happens.

        The runtime's plugins hear it start and end (`on_command_start/end`), in this
        task: the work it does (object events, executions) happens within it."""
        hooks = self.rt.hooks
        if not (hooks.on_command_start or hooks.on_command_end):
            return await self._run(cmd, session)
        start = hook_info.CommandInfo(cmd.op, _target(cmd.args), session.role,
                                      session.address, not cmd.needs_operator,
                                      self.rt.clock.now_ms())
        hooks.fire(hooks.on_command_start, start)
        outcome = hook_info.Outcome.OK
        error: BaseException | None = None
        try:
            return await self._run(cmd, session)
        except BaseException as exc:
            # A command past its deadline may still finish: no outcome, rather than error.
            abandoned = isinstance(exc, CommandTimeout)
            outcome = hook_info.Outcome.ABANDONED if abandoned else hook_info.Outcome.ERROR
            error = exc
            raise
        finally:
            hooks.fire(hooks.on_command_end, hook_info.CommandEndInfo(
                start, outcome, self.rt.clock.now_ms(), error))

    async def _run(self, cmd: Command, session: Session) -> Any:
        if not cmd.needs_operator:
            try:
                async with asyncio.timeout(self.deadline_s):
                    if cmd.op in TOOL_QUERIES:
                        return await self._tools.run(cmd.op, cmd.args, session.address,
                                                     session.role)
                    if cmd.op in OPERATOR_QUERIES:
                        return await self._operator_tools.run(cmd.op, cmd.args,
                                                              session.address, session.role)
                    return await self._handlers[cmd.op](cmd.args)
            except TimeoutError:
                raise CommandTimeout(f"{cmd.op}: no answer within the {self.deadline_s:g} s "
                                     "deadline; nothing was changed (a query changes "
                                     "nothing)") from None
        if session.role != "operator":
            error = f"{cmd.op} needs the operator role; this connection is a {session.role}"
            await self._refuse(session, cmd.op, cmd.args, error)
            raise PermissionError(error)
        answer = _Answer()
        work = self.tasks.spawn(self._apply(cmd, session, answer), name=f"ops {cmd.op}",
                                report=False)
        done, _ = await asyncio.wait({work}, timeout=self.deadline_s + ANSWER_GRACE_S)
        if not done and not answer.claim(late=True):
            # It ended meanwhile and is writing its row: its own outcome is the answer.
            done, _ = await asyncio.wait({work}, timeout=ANSWER_GRACE_S)
        if done:
            return work.result()
        target = _target(cmd.args)
        error = (f"{cmd.op}{' ' + target if target else ''}: no outcome within the "
                 f"{self.deadline_s:g} s command deadline; it was left to finish rather "
                 "than cut off halfway, and its outcome will be in the server log")
        if answer.late:
            await self._record(session, cmd.op, cmd.args, "failed", error)
        raise CommandTimeout(error)

    async def _apply(self, cmd: Command, session: Session, answer: _Answer) -> Any:
        """The command itself, waiting for a busy object no longer than its deadline."""
        started = time.monotonic()
        try:
            with patience(self.deadline_s):
                if cmd.op in EXECUTION_OPS:  # the runtime audits these
                    data = await self._execution_action(cmd, session)
                else:
                    data = await self._handlers[cmd.op](cmd.args)
        except Exception as exc:
            if cmd.op not in EXECUTION_OPS and answer.claim():
                await self._record(session, cmd.op, cmd.args, "failed", str(exc))
            elif answer.late:
                self._log_late(cmd, started, f"failed: {exc}")
            raise
        if cmd.op not in EXECUTION_OPS and answer.claim():
            await self._record(session, cmd.op, cmd.args, "ok", None, _summary(data))
        elif answer.late:
            self._log_late(cmd, started, "done")
        return data

    def _log_late(self, cmd: Command, started: float, outcome: str) -> None:
        target = _target(cmd.args)
        log.warning("%s%s, answered as timed out after %g s, ended %.1f s after it began: "
                    "%s", cmd.op, f" {target}" if target else "", self.deadline_s,
                    time.monotonic() - started, safe_text(outcome))

    async def close(self, grace_s: float | None = None) -> int:
        """End the commands still running (at shutdown, as a crash would end them);
        how many were left behind."""
        return await self.tasks.close(grace_s)

    async def refused(self, session: Session, msg: Hello | Command | ProtocolError,
                      error: str) -> None:
        """Audit a frame refused before it ran (bad input, unknown op, over the rate
        limit), unless it was a query, or named no op at all."""
        if isinstance(msg, Hello):
            return
        op, fields = (msg.op, msg.args) if isinstance(msg, Command) else (msg.op, msg.fields)
        if op is None or op in QUERY_OPS:
            return
        await self._refuse(session, op, fields, error)

    async def _refuse(self, session: Session, op: str, fields: dict[str, Any],
                      error: str) -> None:
        """Audit a refusal: a row of its own, or counted in its window's summary."""
        action = op if op in OPS else "unknown_op"
        key = (host_of(session.address), session.role)
        if self.refusals.note(key, action, self.rt.clock.now_ms(), session.address, error):
            await self._record(session, op, fields, "refused", error)
        await self.flush_refusals()

    async def flush_refusals(self, everything: bool = False) -> int:
        """Write the summary rows of the refusal windows that have ended (`everything`:
        of all of them, at shutdown); how many rows."""
        ledger = self.refusals
        summaries = ledger.take_all() if everything else ledger.take(self.rt.clock.now_ms())
        for summary in summaries:
            await self._record_summary(summary)
        return len(summaries)

    async def _record_summary(self, summary: Summary) -> None:
        detail = {"outcome": "refused", "count": summary.count, "ops": dict(summary.ops),
                  "from_ms": summary.start_ms, "to_ms": summary.end_ms,
                  "clients": summary.clients, "error": safe_text(summary.last_error)}
        await self.rt.audit.record(summary.host, "refused_commands", None,
                                   summary.text(self.refusals.full_rows), ok=False,
                                   role=summary.role, detail=detail)

    async def _record(self, session: Session, op: str, fields: dict[str, Any], outcome: str,
                     error: str | None, data: Any = None) -> None:
        # An unknown op is stored under one action name: the op as sent (any text) goes
        # in the detail, so that no client names event types or floods the action list.
        action = op if op in OPS else "unknown_op"
        detail: dict[str, Any] = {"outcome": outcome}
        if action != op:
            detail["op"] = safe_text(op)
        if error is not None:
            detail["error"] = safe_text(error)
        if data is not None:
            detail["result"] = data
        await self.rt.audit.record(session.address, action, _target(fields),
                                   safe_text(fields.get("reason")), ok=outcome == "ok",
                                   role=session.role, detail=detail)

    # -- objects and alarms ---------------------------------------------------------------

    async def _rearm(self, args: dict[str, Any]) -> Any:
        cls, name = split_object(args["object"])
        return alarm_row(await self.rt.rearm(cls, name, at_ms=args.get("at_ms")))

    async def _fire_now(self, args: dict[str, Any]) -> Any:
        cls, name = split_object(args["object"])
        return alarm_row(await self.rt.fire_now(cls, name))

    async def _clear_dead_letter(self, args: dict[str, Any]) -> Any:
        cls, name = split_object(args["object"])
        return alarm_row(await self.rt.clear_dead_letter(cls, name))

    async def _inject_fault(self, args: dict[str, Any]) -> Any:
        times = None if args.get("always") else args.get("times", 1)
        fid = self.rt.faults.inject(args["target"], args["kind"], times,
                                    seconds=args.get("seconds"), step=args.get("step"),
                                    point=args.get("point"))
        return {"fault_id": fid}

    async def _clear_fault(self, args: dict[str, Any]) -> Any:
        self.rt.faults.clear(args["fault_id"])
        return {"fault_id": args["fault_id"]}

    async def _send_callback(self, args: dict[str, Any]) -> Any:
        outcome = args.get("outcome", "success")
        ex = self.rt.executions
        if outcome == "success":
            await ex.send_callback_success(args["callback_id"], args.get("payload"))
        elif outcome == "failure":
            await ex.send_callback_failure(args["callback_id"],
                                           args.get("error_type") or "CallbackError",
                                           args.get("message") or "")
        elif outcome == "heartbeat":
            await ex.send_callback_heartbeat(args["callback_id"])
        else:
            raise ProtocolError("send_callback: outcome is 'success', 'failure' or "
                                f"'heartbeat', not {outcome!r}")
        return {"callback_id": args["callback_id"], "outcome": outcome}

    async def _execution_action(self, cmd: Command, session: Session) -> Any:
        if cmd.op in OPERATOR_COMMANDS:
            return await self._operator_tools.run(cmd.op, cmd.args, session.address,
                                                  session.role)
        if cmd.op in RUNTIME_AUDITED:
            return await self._tools.run(cmd.op, cmd.args, session.address, session.role)
        ex, eid = self.rt.executions, cmd.args["execution_id"]
        reason = cmd.args.get("reason")
        kw: dict[str, Any] = {"actor": session.address, "role": session.role}
        if cmd.op == "retry_compensation":
            return await ex.retry_compensation(eid, reason=reason, **kw)
        if cmd.op == "resolve":
            return await ex.resolve(eid, cmd.args["note"], reason=reason, **kw)
        if cmd.op == "abort":
            return await ex.abort(eid, reason or "", **kw)
        return await ex.hand_to_human(eid, reason or "", **kw)

    # -- queries --------------------------------------------------------------------------

    async def alarms(self, args: dict[str, Any]) -> Any:
        limit, offset = args.get("limit", DEFAULT_PAGE), args.get("offset", 0)
        state, text = args.get("state"), args.get("filter")
        if state is not None and state not in ALARM_STATES:
            raise ProtocolError(f"alarms: state is one of {', '.join(ALARM_STATES)}, "
                                f"not {state!r}")
        sort, desc = check_sort("alarms", args.get("sort")), bool(args.get("desc"))
        total = await self._total(("alarms", state, text), text,
                                  lambda: self.rt.count_alarms(state, text))
        order = keyed_order("alarms", sort)
        if order is not None:
            after = cursor("alarms", order, args)
            found = await self.rt.alarm_records(limit, offset, state=state, contains=text,
                                                after=after, order=order, desc=desc)
            policy = self.rt.policy_for
            return {"rows": [record_row(r, policy(r.object_class)) for r in found],
                    "offset": offset, "total": total,
                    "cursors": [alarm_cursor(r, order) for r in found]}
        unkeyed("alarms", f"sorted by {sort}", args)
        check_scan("alarms", total, f"sorting by {sort}")
        every = [alarm_row(r) for r in await self.rt.alarms(None, 0, state=state,
                                                             contains=text)]
        rows = window(sort_rows("alarms", every, sort, desc), offset, limit)
        return {"rows": rows, "offset": offset, "total": total}

    async def _total(self, key: tuple[Any, ...], text: str | None,
                     count: Callable[[], Awaitable[int]]) -> int:
        """A listing's total: the counters' without a text; with one, a walk of the rows,
        reused for a moment when there are many (`CountCache`)."""
        if not text:
            return await count()
        counters = self.rt.counters()
        rows = sum(counters.alarms.values()) + counters.known + sum(
            counters.executions.values())
        now = time.monotonic()
        total = self.totals.get(key, counters, rows, now)
        if total is None:
            total = await count()
            self.totals.put(key, counters, now, total)
        return total

    async def _alarm(self, args: dict[str, Any]) -> Any:
        cls, name = split_object(args["object"])
        status = await self.rt.alarm(cls, name)
        return None if status is None else alarm_row(status)

    async def objects(self, args: dict[str, Any]) -> Any:
        """Every object the runtime knows of: with storage, with an alarm, an execution
        (class `Execution`), from storage's index of them, and the resident ones that
        have nothing stored yet (merged in by key). By name, by key, at any depth;
        sorted by another column, bounded (`MAX_SCAN`)."""
        limit, offset = args.get("limit", DEFAULT_PAGE), args.get("offset", 0)
        text = args.get("filter")
        sort, desc = check_sort("objects", args.get("sort")), bool(args.get("desc"))
        resident = {k for k in self.rt.resident_objects() if contains(text, f"{k[0]}/{k[1]}")}
        only_resident = sorted(resident - await self.rt.backend.alarm_rows.known_among(
            sorted(resident)), reverse=desc)
        total = await self._total(("objects", text), text,
                                  lambda: self.rt.count_objects(text)) + len(only_resident)
        if keyed_order("objects", sort) is not None:
            after = cursor("objects", "object", args)
            entries = await self.rt.objects(after, limit, offset=offset, contains=text,
                                            desc=desc)
            keys = [(e.object_class, e.object_name) for e in entries]
            extra = resident_in_page(keys, only_resident, None if after is None
                                     else (after[0], after[1]), limit, desc)
            merged = sorted([*entries, *(_bare(k) for k in extra)],
                            key=lambda e: (e.object_class, e.object_name),
                            reverse=desc)[:limit]
            return {"rows": [self._object_row(e, resident) for e in merged],
                    "offset": offset, "resident": len(self.rt.resident_objects()),
                    "total": total, "cursors": [[e.object_class, e.object_name]
                                                for e in merged]}
        unkeyed("objects", f"sorted by {sort}", args)
        check_scan("objects", total, f"sorting by {sort}")
        every = [*await self.rt.objects(None, -1, contains=text),
                 *(_bare(k) for k in only_resident)]
        rows = [self._object_row(e, resident) for e in every]
        rows = window(sort_rows("objects", rows, sort, desc), offset, limit)
        return {"rows": rows, "offset": offset, "resident": len(self.rt.resident_objects()),
                "total": total}

    def _object_row(self, e: ObjectEntry, resident: set[tuple[str, str]]) -> dict[str, Any]:
        key = (e.object_class, e.object_name)
        return {"object": f"{key[0]}/{key[1]}", "resident": key in resident,
                # an execution's log is in the runtime's database, not a file of its own
                "storage": e.stored or e.execution,
                "sockets": self.rt.sockets.count(key),
                "alarm_ms": e.next_attempt_ms, "alarm_state": e.alarm_state,
                "alarm_paused": e.alarm_paused}

    async def executions(self, args: dict[str, Any]) -> Any:
        limit, offset = args.get("limit", DEFAULT_PAGE), args.get("offset", 0)
        status, text = args.get("status"), args.get("filter")
        sort, desc = check_sort("executions", args.get("sort")), bool(args.get("desc"))
        counts = dict(self.rt.counters().executions)
        total = await self._total(("executions", status, text), text,
                                  lambda: self.rt.count_executions(status, text))
        if keyed_order("executions", sort) is not None:
            after = cursor("executions", "urgency", args)
            recs = await self.rt.execution_page(after, limit, offset=offset, status=status,
                                                contains=text, desc=desc)
            return {"rows": [execution_row(r) for r in recs], "offset": offset,
                    "counts": counts, "total": total,
                    "cursors": [execution_cursor(r) for r in recs]}
        unkeyed("executions", f"sorted by {sort}", args)
        check_scan("executions", total, f"sorting by {sort}")
        every = [execution_row(r) for r in await self.rt.execution_page(
            None, -1, status=status, contains=text)]
        rows = window(sort_rows("executions", every, sort, desc), offset, limit)
        return {"rows": rows, "offset": offset, "counts": counts, "total": total}

    async def _execution(self, args: dict[str, Any]) -> Any:
        return await self.rt.executions.describe(args["execution_id"])

    async def _audit(self, args: dict[str, Any]) -> Any:
        """The audit log, newest first, with how many rows it holds (its retention prunes
        the oldest, so the newest row's `seq` is no count of them). A callback's
        target is its opaque id: `execution_id` says whose it is, and `target=` of an
        execution finds its callbacks' rows too. By time, by key; filtered or sorted
        by another column, bounded (`MAX_SCAN`): the execution of a callback's id is
        read from the id, which no index holds."""
        limit, offset = args.get("limit", DEFAULT_PAGE), args.get("offset", 0)
        text, target = args.get("filter"), args.get("target")
        sort, desc = check_sort("audit", args.get("sort")), args.get("desc", True)
        store = self.rt.backend.audit_rows
        total = await store.audit_count()
        if keyed_order("audit", sort) is not None and not text and not target:
            after = cursor("audit", "seq", args)
            found = await store.audit_page(after, limit, offset=offset, desc=bool(desc))
            return {"rows": [_audit_row(r) for r in found], "offset": offset,
                    "total": total, "cursors": [[r["seq"]] for r in found]}
        unkeyed("audit", "with a filter, a target or a sort by another column", args)
        check_scan("audit", total, "a filter, a target or a sort")
        every = [_audit_row(r) for r in await store.audit_page(None, max(total, 1))]
        every = [r for r in every if (not target or target in (r["target"],
                                                               r.get("execution_id")))
                 and contains(text, r["action"], r["target"], r.get("execution_id"),
                              r["actor"], r["reason"], r.get("node"))]
        rows = window(sort_rows("audit", every, sort, bool(desc)), offset, limit)
        return {"rows": rows, "offset": offset, "total": len(every)}

    async def _faults(self, args: dict[str, Any]) -> Any:
        text, target = args.get("filter"), args.get("target")
        sort, desc = check_sort("faults", args.get("sort")), bool(args.get("desc"))
        every = [f for f in self.rt.faults.list() if (not target or f["target"] == target)
                 and contains(text, f["id"], f["target"], f["kind"], f.get("step"))]
        offset = args.get("offset", 0)
        limit = args.get("limit", len(every))
        rows = window(sort_rows("faults", every, sort, desc), offset, limit)
        return {"rows": rows, "offset": offset, "total": len(every)}

    async def _snapshot(self, args: dict[str, Any]) -> Any:
        return await self.snapshot()

    async def counts(self) -> dict[str, Any]:
        """The header's counts: from the counters storage keeps with its writes, so a
        tick costs the same with a thousand alarms or a million (no query at all)."""
        c = self.rt.counters()
        alarms = {state: c.alarms.get(state, 0) for state in ALARM_STATES}
        executions = dict(c.executions)
        return {"alarms": alarms, "near_exhaustion": self.rt.near_exhaustion(c),
                "objects": c.stored, "known": c.known,
                "resident": len(self.rt.resident_objects()),
                "executions": executions, "needs_human": executions.get("needs_human", 0),
                "faults": len(self.rt.faults.list()), "nodes": await self.fleet.summary()}

    async def snapshot(self) -> dict[str, Any]:
        """The most urgent page of everything, plus counts: what a new client sees first."""
        return {"type": "snapshot", "at_ms": self.rt.clock.now_ms(),
                "counts": await self.counts(),
                "alarms": (await self.alarms({"limit": SNAPSHOT_ROWS}))["rows"],
                "executions": (await self.executions({"limit": SNAPSHOT_ROWS}))["rows"],
                "faults": self.rt.faults.list()}


def _audit_row(row: dict[str, Any]) -> dict[str, Any]:
    """An audit row, with the execution a callback's opaque id belongs to."""
    pair = decode_callback_id(row["target"]) if row.get("target") else None
    return {**row, "execution_id": pair[0]} if pair else row


def safe_text(value: Any, limit: int = MAX_AUDIT_TEXT) -> str | None:
    """Client text as the audit log may keep it: a string of valid Unicode (a lone
    surrogate becomes "?"; a value that is not a string, its repr), at most `limit`
    characters; None stays None."""
    if value is None:
        return None
    text = value if isinstance(value, str) else repr(value)
    text = text.encode("utf-8", "replace").decode("utf-8")  # lone surrogates -> "?"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _target(fields: dict[str, Any]) -> str | None:
    for key in TARGET_FIELDS:
        if key in fields:
            return safe_text(fields[key])
    return None


def _summary(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: data[k] for k in list(data)[:8] if k not in ("attempts",)}
    return data


def _bare(key: tuple[str, str]) -> ObjectEntry:
    """A resident object with nothing stored yet."""
    return ObjectEntry(key[0], key[1], False, key[0] == EXECUTION_CLASS, None, None)


__all__ = ["AlarmtopError", "OpsService", "Session"]
