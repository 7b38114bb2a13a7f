"""The commands on durable executions: the saga's way out (retry its compensation,
resolve by hand, abort, hand to a human), pause and resume, redrive and fork,
callbacks by hand; and two queries, the replay check and the execution's timers.

The runtime audits the execution actions itself, when it runs them (one row each,
whatever the outcome, with the client's address as actor and its role): they are
`Audit.RUNTIME`. `send_callback` reaches the callback API, which keeps no audit
log: the ops service audits it. The queries change nothing and are open to viewers.
"""

from __future__ import annotations

from typing import Any

from alarmtop.server.protocol import OPTIONAL_TEXT, Audit, Field, ProtocolError, Request
from alarmtop.server.services import Services, command, query

DEFAULT_TIMERS_PAGE = 100
EXECUTION_ID = Field(str, True, "the execution's id")
RUNTIME = Audit.RUNTIME
CALLBACK_FIELDS = {"callback_id": Field(str),
                   "outcome": Field(str, False, "success (default), failure (or heartbeat: "
                                    "send_callback)"),
                   "payload": Field(object, False), "error_type": OPTIONAL_TEXT,
                   "message": OPTIONAL_TEXT}


def actor_and_role(request: Request) -> dict[str, Any]:
    """What the runtime's audit row of an action says of who did it: the client's
    address, and its role."""
    return {"actor": request.actor, "role": request.role}


async def retry_compensation(services: Services, request: Request) -> Any:
    args = request.args
    return await services.rt.executions.retry_compensation(
        args["execution_id"], reason=args.get("reason"), **actor_and_role(request))


async def resolve(services: Services, request: Request) -> Any:
    args = request.args
    return await services.rt.executions.resolve(
        args["execution_id"], args["note"], reason=args.get("reason"),
        **actor_and_role(request))


async def abort(services: Services, request: Request) -> Any:
    args = request.args
    return await services.rt.executions.abort(
        args["execution_id"], args.get("reason") or "", **actor_and_role(request))


async def hand_to_human(services: Services, request: Request) -> Any:
    args = request.args
    return await services.rt.executions.hand_to_human(
        args["execution_id"], args.get("reason") or "", **actor_and_role(request))


async def pause(services: Services, request: Request) -> Any:
    args = request.args
    return await services.rt.executions.pause(
        args["execution_id"], args.get("reason"), **actor_and_role(request))


async def resume(services: Services, request: Request) -> Any:
    args = request.args
    return await services.rt.executions.resume(
        args["execution_id"], reason=args.get("reason"), **actor_and_role(request))


async def redrive(services: Services, request: Request) -> Any:
    args = request.args
    return await services.rt.executions.redrive(
        args["execution_id"], args.get("version"), force=bool(args.get("force")),
        reason=args.get("reason"), **actor_and_role(request))


async def fork(services: Services, request: Request) -> Any:
    args = request.args
    return await services.rt.executions.fork(
        args["execution_id"], args["from_step"], args.get("input"),
        args.get("new_execution_id"), args.get("version"), force=bool(args.get("force")),
        reason=args.get("reason"), **actor_and_role(request))


async def complete_callback(services: Services, request: Request) -> Any:
    args = request.args
    return await services.rt.executions.complete_callback(
        args["callback_id"], args.get("outcome") or "success", args.get("payload"),
        error_type=args.get("error_type") or "CallbackError",
        message=args.get("message") or "", reason=args.get("reason"),
        **actor_and_role(request))


async def send_callback(services: Services, request: Request) -> Any:
    args, executions = request.args, services.rt.executions
    outcome = args.get("outcome", "success")
    if outcome == "success":
        await executions.send_callback_success(args["callback_id"], args.get("payload"))
    elif outcome == "failure":
        await executions.send_callback_failure(args["callback_id"],
                                               args.get("error_type") or "CallbackError",
                                               args.get("message") or "")
    elif outcome == "heartbeat":
        await executions.send_callback_heartbeat(args["callback_id"])
    else:
        raise ProtocolError("send_callback: outcome is 'success', 'failure' or "
                            f"'heartbeat', not {outcome!r}")
    return {"callback_id": args["callback_id"], "outcome": outcome}


async def replay_check(services: Services, request: Request) -> Any:
    return await services.rt.executions.replay_check(request.args["execution_id"],
                                                     request.args.get("version"))


async def execution_timers(services: Services, request: Request) -> Any:
    args = request.args
    rows = await services.rt.executions.timers(args.get("limit", DEFAULT_TIMERS_PAGE),
                                               args.get("after"), args.get("execution_id"))
    return {"rows": rows, "next": rows[-1]["key"] if rows else None}


SPECS = [
    command("send_callback", CALLBACK_FIELDS, send_callback,
            "answer a callback as its service would: success, failure or heartbeat"),
    command("retry_compensation", {"execution_id": Field(str)}, retry_compensation,
            "run a saga's failed compensation again", audit=RUNTIME),
    command("resolve", {"execution_id": Field(str), "note": Field(str)}, resolve,
            "mark a saga that needs a human as resolved by hand", audit=RUNTIME),
    command("abort", {"execution_id": Field(str)}, abort, "stop an execution for good",
            audit=RUNTIME),
    command("hand_to_human", {"execution_id": Field(str)}, hand_to_human,
            "give an execution to a person", audit=RUNTIME),
    command("pause", {"execution_id": EXECUTION_ID}, pause,
            "hold an execution between steps", audit=RUNTIME),
    command("resume", {"execution_id": EXECUTION_ID}, resume, "let a paused execution go on",
            audit=RUNTIME),
    command("redrive", {"execution_id": EXECUTION_ID, "version": OPTIONAL_TEXT,
                        "force": Field(bool, False, "run even if the replay check diverges")},
            redrive, "run a failed execution again from where it failed", audit=RUNTIME),
    command("fork", {"execution_id": EXECUTION_ID,
                     "from_step": Field(str, True, "a step name used once, or an op id"),
                     "input": Field(object, False, "the fork's input (default: the source's)"),
                     "new_execution_id": OPTIONAL_TEXT, "version": OPTIONAL_TEXT,
                     "force": Field(bool, False)},
            fork, "start a new execution from a step of another", audit=RUNTIME),
    command("complete_callback", CALLBACK_FIELDS, complete_callback,
            "complete a callback by hand, audited", audit=RUNTIME),
    query("replay_check", {"execution_id": EXECUTION_ID, "version": OPTIONAL_TEXT},
          replay_check, "whether an execution's history replays on its code (or `version`)"),
    query("execution_timers", {"limit": Field(int, False), "after": Field(list, False),
                               "execution_id": OPTIONAL_TEXT},
          execution_timers, "the pending timers of executions, soonest first"),
]
