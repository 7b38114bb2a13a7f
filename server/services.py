"""What the ops commands' handlers work with (the runtime, and the server's own
caches), and the two ways a handler module declares its commands: `command` (an
operator's, audited) and `query` (anyone's, not audited)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from alarmtop.core import Runtime
from alarmtop.server.fleet_view import FleetView
from alarmtop.server.listing import CountCache
from alarmtop.server.protocol import (
    OPTIONAL_TEXT,
    Audit,
    AuditDetail,
    CommandSpec,
    Field,
    Request,
    Role,
    result_summary,
)


@dataclass(frozen=True)
class Services:
    """Handed to every handler with its request; one per ops service."""

    rt: Runtime
    fleet: FleetView  # the nodes, cached: the header asks every tick
    totals: CountCache = field(default_factory=CountCache)  # listings' filtered totals

    @classmethod
    def of(cls, runtime: Runtime) -> Services:
        return cls(runtime, FleetView(runtime))


Spec = CommandSpec[Services]  # a command of this server's table
Handler = Callable[[Services, Request], Awaitable[Any]]


def command(op: str, fields: dict[str, Field], handler: Handler, doc: str, *,
            audit: Audit = Audit.SERVER, audit_detail: AuditDetail = result_summary) -> Spec:
    """An operator's command: `fields`, then the optional `reason` every command takes
    (kept in its audit row)."""
    return Spec(op, {**fields, "reason": OPTIONAL_TEXT}, Role.OPERATOR, audit, handler, doc,
                audit_detail)


def query(op: str, fields: dict[str, Field], handler: Handler, doc: str) -> Spec:
    """A query: anyone may run it, and it is not audited."""
    return Spec(op, fields, Role.VIEWER, Audit.QUERY, handler, doc)
