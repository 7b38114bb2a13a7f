"""The ops channel's one command table: every command and query, by op.

Each handler module declares its own commands (`SPECS`) next to their handlers;
they are gathered here, and an op declared twice stops the import. `wire` checks
frames against this table, `ops` dispatches through it, and the console builds its
requests from it: the table describes what this server serves and what this
console knows.
"""

from __future__ import annotations

from alarmtop.server import (
    alarm_commands,
    bulk_commands,
    execution_commands,
    listing_commands,
    timer_commands,
)
from alarmtop.server.protocol import Audit, Role, spec_table
from alarmtop.server.services import Spec

COMMANDS: dict[str, Spec] = spec_table(
    alarm_commands.SPECS, execution_commands.SPECS, timer_commands.SPECS,
    bulk_commands.SPECS, listing_commands.SPECS)
OPERATOR_OPS = frozenset(op for op, spec in COMMANDS.items() if spec.role is Role.OPERATOR)
QUERY_OPS = frozenset(op for op, spec in COMMANDS.items() if spec.audit is Audit.QUERY)
