"""alarmtop's core runtime: durable objects, their storage and alarms."""

from alarmtop.core.kernel.clock import SystemClock, VirtualClock
from alarmtop.core.kernel.events import Event, EventBus
from alarmtop.core.kernel.executions.aws.service import AwsOptions
from alarmtop.core.kernel.logs import JsonFormatter, configure_logging
from alarmtop.core.kernel.objects.durable_object import AlarmInfo, DurableObject, ObjectContext
from alarmtop.core.kernel.objects.sockets import HibernatableWebSocket
from alarmtop.core.model.alarm_policy import AlarmState, Attempt, RetryPolicy, next_delay
from alarmtop.core.model.alarm_status import AlarmStatus
from alarmtop.core.model.aws_limits import AwsLimits
from alarmtop.core.model.errors import AlarmtopError
from alarmtop.core.model.faults import InjectedFault
from alarmtop.core.ports import Clock
from alarmtop.core.runtime import Runtime, Stub
from alarmtop.core.storage.postgres.backend import PostgresBackend

__all__ = [
    "AlarmInfo", "AlarmState", "AlarmStatus", "AlarmtopError", "Attempt", "AwsLimits",
    "AwsOptions", "Clock",
    "DurableObject", "Event", "EventBus", "HibernatableWebSocket", "InjectedFault",
    "JsonFormatter", "ObjectContext", "PostgresBackend", "RetryPolicy", "Runtime", "Stub",
    "SystemClock", "VirtualClock", "configure_logging", "next_delay",
]
