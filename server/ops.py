"""The ops channel's commands and queries, run through the one command table.

Every op is a `CommandSpec` of `commands.COMMANDS`: its role says who may run it,
its audit rule who writes its row, its handler what it does. Every frame that
names a command (anything but a query) is one row of the audit log, with role,
client address, time, command, target, reason and outcome (`ok`, `failed`, or
`refused`: wrong role, bad input, unknown op, over the rate limit), and is
announced as an `operator.*` event: what an operator did, tried or was stopped
from doing. This service writes the rows of the `Audit.SERVER` commands and of
every refusal; the runtime writes those of the `Audit.RUNTIME` ones when it runs
them. Text that came from the client is made safe to store first (valid Unicode,
bounded), so no frame can skip its row. Queries are not audited: the console sends
them on its own, many a second.

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
then left to finish on its own, and its late outcome is logged. (A command the
runtime audits writes its row when it ends; one that passes its deadline after it
started therefore has a second row, the runtime's, with its outcome.) A query
past its deadline is simply cancelled: it changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from alarmtop.core import Runtime
from alarmtop.core.model import hook_info
from alarmtop.core.model.errors import AlarmtopError, CommandTimeout
from alarmtop.core.ops import Supervisor, patience
from alarmtop.server.commands import COMMANDS, QUERY_OPS
from alarmtop.server.listing_commands import counts, snapshot
from alarmtop.server.protocol import Audit, ProtocolError, Request
from alarmtop.server.refusals import RefusalLedger, Summary, host_of
from alarmtop.server.rows import audit_target, safe_text
from alarmtop.server.services import Services, Spec
from alarmtop.server.wire import Command, Hello

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


class OpsService:
    """The commands and queries of the ops channel; `deadline_s` bounds each answer."""

    def __init__(self, runtime: Runtime, deadline_s: float = DEADLINE_S,
                 refusals: RefusalLedger | None = None) -> None:
        if not deadline_s > 0:
            raise ValueError(f"the command deadline is seconds > 0, not {deadline_s!r}")
        self.rt = runtime
        self.services = Services.of(runtime)
        self.fleet = self.services.fleet
        self.refusals = refusals or RefusalLedger()
        self.deadline_s = deadline_s
        # Commands run in tasks of their own, so that one past its deadline is left to
        # finish after it was answered; `close()` ends whatever is left at shutdown.
        self.tasks = Supervisor(None, "ops commands")

    async def run(self, cmd: Command, session: Session) -> Any:
        """Apply a command within its deadline; raises `AlarmtopError`/`ProtocolError`
        with a clear message. A command (not a query) is audited whatever happens.

        The runtime's plugins hear it start and end (`on_command_start/end`), in this
        task: the work it does (object events, executions) happens within it."""
        hooks = self.rt.hooks
        if not (hooks.on_command_start or hooks.on_command_end):
            return await self._run(cmd, session)
        start = hook_info.CommandInfo(cmd.op, audit_target(cmd.args), session.role,
                                      session.address, cmd.op in QUERY_OPS,
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
        spec = cmd.spec
        if not spec.role.admits(session.role):
            error = f"{cmd.op} needs the {spec.role} role; this connection is a {session.role}"
            if spec.audit is not Audit.QUERY:
                await self._refuse(session, cmd.op, cmd.args, error)
            raise PermissionError(error)
        request = Request(cmd.args, session.address, session.role)
        if spec.audit is Audit.QUERY:
            return await self._query(spec, request)
        answer = _Answer()
        work = self.tasks.spawn(self._apply(spec, request, answer), name=f"ops {cmd.op}",
                                report=False)
        done, _ = await asyncio.wait({work}, timeout=self.deadline_s + ANSWER_GRACE_S)
        if not done and not answer.claim(late=True):
            # It ended meanwhile and is writing its row: its own outcome is the answer.
            done, _ = await asyncio.wait({work}, timeout=ANSWER_GRACE_S)
        if done:
            return work.result()
        target = audit_target(cmd.args)
        error = (f"{cmd.op}{' ' + target if target else ''}: no outcome within the "
                 f"{self.deadline_s:g} s command deadline; it was left to finish rather "
                 "than cut off halfway, and its outcome will be in the server log")
        if answer.late:
            await self._record(session, cmd.op, cmd.args, "failed", error,
                               spec.audit_detail(cmd.args, None))
        raise CommandTimeout(error)

    async def _query(self, spec: Spec, request: Request) -> Any:
        """A query within the deadline; past it, cancelled (it changes nothing)."""
        try:
            async with asyncio.timeout(self.deadline_s):
                return await spec.handler(self.services, request)
        except TimeoutError:
            raise CommandTimeout(f"{spec.op}: no answer within the {self.deadline_s:g} s "
                                 "deadline; nothing was changed (a query changes "
                                 "nothing)") from None

    async def _apply(self, spec: Spec, request: Request, answer: _Answer) -> Any:
        """The command itself, waiting for a busy object no longer than its deadline;
        its audit row, by its rule, unless its deadline answered first."""
        started = time.monotonic()
        session = Session(request.role, request.actor)
        ours = spec.audit is Audit.SERVER
        try:
            with patience(self.deadline_s):
                data = await spec.handler(self.services, request)
        except Exception as exc:
            if ours and answer.claim():
                await self._record(session, spec.op, request.args, "failed", str(exc),
                                   spec.audit_detail(request.args, None))
            elif answer.late:
                self._log_late(spec.op, request.args, started, f"failed: {exc}")
            raise
        if ours and answer.claim():
            await self._record(session, spec.op, request.args, "ok", None,
                               spec.audit_detail(request.args, data))
        elif answer.late:
            self._log_late(spec.op, request.args, started, "done")
        return data

    def _log_late(self, op: str, args: dict[str, Any], started: float, outcome: str) -> None:
        target = audit_target(args)
        log.warning("%s%s, answered as timed out after %g s, ended %.1f s after it began: "
                    "%s", op, f" {target}" if target else "", self.deadline_s,
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
        action = op if op in COMMANDS else "unknown_op"
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
                      error: str | None, more: dict[str, Any] | None = None) -> None:
        """The one writer of the rows this service audits: a command's outcome (with
        what its spec adds, `more`), or a refusal."""
        # An unknown op is stored under one action name: the op as sent (any text) goes
        # in the detail, so that no client names event types or floods the action list.
        action = op if op in COMMANDS else "unknown_op"
        detail: dict[str, Any] = {"outcome": outcome}
        if action != op:
            detail["op"] = safe_text(op)
        if error is not None:
            detail["error"] = safe_text(error)
        detail.update(more or {})
        await self.rt.audit.record(session.address, action, audit_target(fields),
                                   safe_text(fields.get("reason")), ok=outcome == "ok",
                                   role=session.role, detail=detail)

    async def counts(self) -> dict[str, Any]:
        """The header's counts (`listing_commands.counts`), for the feed."""
        return await counts(self.services)

    async def snapshot(self) -> dict[str, Any]:
        """What a new client sees first (`listing_commands.snapshot`), for the feed."""
        return await snapshot(self.services)


__all__ = ["DEADLINE_S", "AlarmtopError", "OpsService", "Session"]
