"""alarmtop's core runtime: durable objects, their storage and alarms."""

from alarmtop.core.alarms.policy import AlarmState, Attempt, RetryPolicy, next_delay
from alarmtop.core.alarms.status import AlarmStatus
from alarmtop.core.clock import Clock, SystemClock, VirtualClock
from alarmtop.core.errors import AlarmtopError
from alarmtop.core.events import Event, EventBus
from alarmtop.core.faults import InjectedFault
from alarmtop.core.logs import JsonFormatter, configure_logging
from alarmtop.core.objects.base import AlarmInfo, DurableObject, ObjectContext
from alarmtop.core.runtime import Runtime, Stub
from alarmtop.core.storage.postgres.backend import PostgresBackend

__all__ = [
    "AlarmInfo", "AlarmState", "AlarmStatus", "AlarmtopError", "Attempt", "Clock",
    "DurableObject", "Event", "EventBus", "InjectedFault", "JsonFormatter", "ObjectContext",
    "PostgresBackend", "RetryPolicy", "Runtime", "Stub", "SystemClock", "VirtualClock",
    "configure_logging", "next_delay",
]
