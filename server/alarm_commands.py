"""The commands on object alarms and faults: re-arm, fire now, clear a dead letter,
pause, resume and snooze an object's alarm; inject and clear a fault.

All are an operator's and audited by the ops service (one row each, whatever the
outcome). A snooze's row says by how much it was asked for (`by_ms`) and, when it
is done, where it moved the alarm to (`until_ms`); the pause, resume and snooze
rows keep no result, the others a short one.
"""

from __future__ import annotations

from typing import Any

from alarmtop.server.protocol import (
    BY_MS,
    OPTIONAL_TEXT,
    Field,
    Request,
    no_result,
    split_object,
)
from alarmtop.server.rows import alarm_row, snooze_detail
from alarmtop.server.services import Services, command

OBJECT = Field(str, True, "the object, 'Class/name'")


async def rearm(services: Services, request: Request) -> Any:
    cls, name = split_object(request.args["object"])
    return alarm_row(await services.rt.rearm(cls, name, at_ms=request.args.get("at_ms")))


async def fire_now(services: Services, request: Request) -> Any:
    cls, name = split_object(request.args["object"])
    return alarm_row(await services.rt.fire_now(cls, name))


async def clear_dead_letter(services: Services, request: Request) -> Any:
    cls, name = split_object(request.args["object"])
    return alarm_row(await services.rt.clear_dead_letter(cls, name))


async def pause_alarm(services: Services, request: Request) -> Any:
    cls, name = split_object(request.args["object"])
    return alarm_row(await services.rt.pause_alarm(cls, name, reason=request.args.get("reason")))


async def resume_alarm(services: Services, request: Request) -> Any:
    cls, name = split_object(request.args["object"])
    return alarm_row(await services.rt.resume_alarm(cls, name, reason=request.args.get("reason")))


async def snooze_alarm(services: Services, request: Request) -> Any:
    cls, name = split_object(request.args["object"])
    return alarm_row(await services.rt.snooze_alarm(cls, name, request.args["by_ms"],
                                                    reason=request.args.get("reason")))


async def inject_fault(services: Services, request: Request) -> Any:
    args = request.args
    times = None if args.get("always") else args.get("times", 1)
    fault_id = services.rt.faults.inject(args["target"], args["kind"], times,
                                         seconds=args.get("seconds"), step=args.get("step"),
                                         point=args.get("point"))
    return {"fault_id": fault_id}


async def clear_fault(services: Services, request: Request) -> Any:
    services.rt.faults.clear(request.args["fault_id"])
    return {"fault_id": request.args["fault_id"]}


SPECS = [
    command("rearm", {"object": Field(str), "at_ms": Field(int, False)}, rearm,
            "re-arm an object's alarm, now or at `at_ms`"),
    command("fire_now", {"object": Field(str)}, fire_now, "fire an object's alarm now"),
    command("clear_dead_letter", {"object": Field(str)}, clear_dead_letter,
            "drop a dead alarm without running it"),
    command("inject_fault", {"target": Field(str), "kind": Field(str),
                             "times": Field(int, False), "seconds": Field((int, float), False),
                             "step": OPTIONAL_TEXT, "point": OPTIONAL_TEXT,
                             "always": Field(bool, False)}, inject_fault,
            "make an object's alarm or an execution's step fail or stall"),
    command("clear_fault", {"fault_id": Field(str)}, clear_fault, "remove an injected fault"),
    command("pause_alarm", {"object": OBJECT}, pause_alarm, "hold an object's alarm",
            audit_detail=no_result),
    command("resume_alarm", {"object": OBJECT}, resume_alarm,
            "let a paused alarm run again", audit_detail=no_result),
    command("snooze_alarm", {"object": OBJECT, "by_ms": BY_MS}, snooze_alarm,
            "move an object's alarm later", audit_detail=snooze_detail),
]
