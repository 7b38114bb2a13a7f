"""`OperatorTools`: the one door of the ops surface (`runtime.ops`), what `server/`
uses to act and read: alarm actions, queries and pages, execution tools, bulk, the
timers board, the audit log and faults. It holds the parts; it decides nothing."""

from __future__ import annotations

from dataclasses import dataclass

from alarmtop.core.kernel.faults import FaultRegistry
from alarmtop.core.ops.alarm_actions import AlarmActions
from alarmtop.core.ops.audit import AuditLog
from alarmtop.core.ops.bulk import BulkService
from alarmtop.core.ops.executions import Executions
from alarmtop.core.ops.queries import Queries
from alarmtop.core.ops.timers_board import TimersBoard


@dataclass(frozen=True)
class OperatorTools:
    """The operator's tools of one runtime."""

    alarms: AlarmActions
    queries: Queries
    executions: Executions
    bulk: BulkService
    board: TimersBoard
    audit: AuditLog
    faults: FaultRegistry
