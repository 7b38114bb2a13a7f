"""What the parts of `runtime.bulk` share: the runtime's collaborators, the limits,
the item decisions made from a record alone, and how a run is cut short."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from alarmtop.core.fleet.routing import Routing
from alarmtop.core.kernel.alarms.scheduler import AlarmScheduler
from alarmtop.core.kernel.events import EventBus
from alarmtop.core.kernel.faults import FaultRegistry
from alarmtop.core.kernel.run_state import RunState
from alarmtop.core.kernel.supervisor import Supervisor
from alarmtop.core.model import alarm_pause, alarm_policy
from alarmtop.core.model.alarm_policy import AlarmKey, AlarmRecord, AlarmState
from alarmtop.core.model.bulk_progress import Progress
from alarmtop.core.model.errors import (
    InvalidArgument,
    NoAlarm,
    NodeUnreachable,
    NotFound,
    StorageError,
)
from alarmtop.core.ops.alarm_actions import AlarmActions
from alarmtop.core.ops.audit import AuditLog
from alarmtop.core.ops.executions import Executions
from alarmtop.core.ports import Clock, ExecutionLog, OperatorRows

CHUNK = 2_000  # open items read at a time
# Items per transaction at most, whatever the throttle: the runtime's own alarm
# commits queue behind a group's on the one writer, and a group of a thousand
# (three thousand rows with its outcomes and audit) holds them for tens of ms.
WRITE_GROUP = 200
# A batch gives way to the alarms it shares the runtime database with: each group
# is sized to fit before the next due alarm (`pacing`), looked at this often.
YIELD_STEP_S = 0.001
PREVIEW_SAMPLE = 20
CANCEL_ANSWER_S = 2.0  # a cancel answers by then, ended or still "cancelling"
# A runner cut short by storage or the fleet (see `_run`) goes on after this, doubling
# up to RETRY_MAX_S while it gets nowhere (wall time).
RETRY_FIRST_S = 0.1
RETRY_MAX_S = 5.0
FAILURES_SHOWN = 100
# The alarm action of an item sent one by one, as `AlarmActions.routed` names it.
RUNTIME_ACTION = {"rearm": "re-arm", "fire_now": "fire", "clear_dead_letter": "clear",
                   "pause_alarm": "pause", "resume_alarm": "resume"}


@dataclass(frozen=True)
class BulkParts:
    """The runtime's parts a batch works with, handed over by the runtime."""

    store: OperatorRows
    execution_log: ExecutionLog
    audit: AuditLog
    clock: Clock
    events: EventBus
    tasks: Supervisor
    scheduler: AlarmScheduler
    routing: Routing
    alarms: AlarmActions
    executions: Executions
    faults: FaultRegistry
    nodes: Callable[[], Awaitable[list[dict[str, Any]]]]
    node_id: str  # "local" on a backend that is no fleet's
    # How often a fleet's node looks for nodes that went (a third of a lease, as its
    # lease keeper renews); None on a backend that is no fleet's.
    watch_period_s: float | None
    state: RunState


class BatchNotFound(NotFound):
    def __init__(self, batch_id: str) -> None:
        super().__init__(f"no bulk batch {batch_id!r}; rt.bulk.list() (ops: bulks) lists them")


def split_key(key: str) -> AlarmKey:
    cls, _, name = key.partition("/")
    return cls, name


def decide(action: str, rec: AlarmRecord | None, key: AlarmKey, now_ms: int,
           at_ms: int | None) -> alarm_policy.Transition:
    """An alarm item's change, from its record alone (pure); raises with the reason the
    item fails."""
    if rec is None:
        raise NoAlarm(key[0], key[1], action.replace("_", " "))
    if action == "rearm":
        return alarm_policy.rearm(rec, now_ms if at_ms is None else at_ms)
    if action == "fire_now":
        alarm_pause.refuse_fire_now(rec)
        return alarm_policy.fire_now(rec, now_ms)
    if action == "clear_dead_letter":
        if rec.state is not AlarmState.DEAD:
            raise InvalidArgument(f"{key[0]}/{key[1]}'s alarm is {rec.state.value}, not a dead "
                                  "letter; nothing cleared")
        return alarm_policy.delete_alarm(rec)
    raise InvalidArgument(f"{action} is not decided from the record")


class Stopping(Exception):
    """The runtime stops under a runner: what it did not run stays open, for the next
    start or another node, as when the stop cancels the runner."""


# What cuts an item short without it having run: its owner not reached, or a write
# refused (a lease lost, PostgreSQL away). The item stays open and the runner goes on
# after a pause (`_run`), rather than failing it for good.
CutShort = StorageError | NodeUnreachable
CUT_SHORT = (StorageError, NodeUnreachable)


def raise_left_open(results: Sequence[object]) -> None:
    """After a group's outcomes are written: stop the run if some items were left open,
    on the stop (`Stopping`) first, else on the first error that cut one short."""
    if any(isinstance(r, Stopping) for r in results):
        raise Stopping
    for r in results:
        if isinstance(r, CUT_SHORT):
            raise r


class Runner:
    """One batch being worked through on this node."""

    def __init__(self, batch: dict[str, Any]) -> None:
        self.batch = batch
        self.cancelled = False
        self.task: asyncio.Task[None] | None = None
        self.progress: Progress | None = None
        self.cancel_reason: str | None = None
        self.lost = False  # another node took the batch over: this runner stops


def action_name(action: Any) -> str:
    return action if isinstance(action, str) and action.isidentifier() and len(action) < 40 \
        else "unknown"


def text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None
