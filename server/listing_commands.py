"""The queries: pages of alarms, objects, executions, the audit log, faults and nodes;
one alarm or execution in full; the snapshot a new client sees first.

Queries change nothing, are not audited, and anyone may run them: the console
sends them on its own, many a second. They page and filter, so a client never
receives the whole world: by key in the orders an index serves (`after`, any
depth costs what the first page does), else by a bounded sort (`listing.py`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from alarmtop.core.model import keys
from alarmtop.core.model.operations import EXECUTION_CLASS
from alarmtop.core.model.storage_values import ObjectEntry
from alarmtop.server.listing import (
    KEYED,
    check_scan,
    check_sort,
    contains,
    keyed_order,
    resident_in_page,
    sort_rows,
    window,
)
from alarmtop.server.protocol import (
    AFTER,
    OPTIONAL_TEXT,
    PAGED,
    SORTED,
    Field,
    ProtocolError,
    Request,
    split_object,
)
from alarmtop.server.rows import (
    alarm_cursor,
    alarm_row,
    audit_row,
    execution_cursor,
    execution_row,
    record_row,
)
from alarmtop.server.services import Services, query

DEFAULT_PAGE = 50
ALARM_STATES = ("pending", "running", "retrying", "dead")
SNAPSHOT_ROWS = 50
PAUSE_SCAN = 5000  # audit rows read back, at most, for who paused an alarm and why
AUDIT_READ = 200  # audit rows read at a time looking for a pause


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


async def total(services: Services, key: tuple[Any, ...], text: str | None,
                count: Callable[[], Awaitable[int]]) -> int:
    """A listing's total: the counters' without a text; with one, a walk of the rows,
    reused for a moment when there are many (`CountCache`)."""
    if not text:
        return await count()
    counters = services.rt.counters()
    rows = sum(counters.alarms.values()) + counters.known + sum(counters.executions.values())
    now = time.monotonic()
    found = services.totals.get(key, counters, rows, now)
    if found is None:
        found = await count()
        services.totals.put(key, counters, now, found)
    return found


async def alarms(services: Services, request: Request) -> Any:
    args, rt = request.args, services.rt
    limit, offset = args.get("limit", DEFAULT_PAGE), args.get("offset", 0)
    state, text = args.get("state"), args.get("filter")
    if state is not None and state not in ALARM_STATES:
        raise ProtocolError(f"alarms: state is one of {', '.join(ALARM_STATES)}, "
                            f"not {state!r}")
    sort, desc = check_sort("alarms", args.get("sort")), bool(args.get("desc"))
    count = await total(services, ("alarms", state, text), text,
                        lambda: rt.count_alarms(state, text))
    order = keyed_order("alarms", sort)
    if order is not None:
        after = cursor("alarms", order, args)
        found = await rt.alarm_records(limit, offset, state=state, contains=text,
                                       after=after, order=order, desc=desc)
        return {"rows": [record_row(r, rt.policy_for(r.object_class)) for r in found],
                "offset": offset, "total": count,
                "cursors": [alarm_cursor(r, order) for r in found]}
    unkeyed("alarms", f"sorted by {sort}", args)
    check_scan("alarms", count, f"sorting by {sort}")
    every = [alarm_row(r) for r in await rt.alarms(None, 0, state=state, contains=text)]
    return {"rows": window(sort_rows("alarms", every, sort, desc), offset, limit),
            "offset": offset, "total": count}


async def alarm(services: Services, request: Request) -> Any:
    """One alarm in full; a paused one also says who paused it and why
    (`paused_by`, `paused_reason`: None when no audit row says)."""
    cls, name = split_object(request.args["object"])
    status = await services.rt.alarm(cls, name)
    if status is None:
        return None
    row = alarm_row(status)
    if status.paused_ms is not None:
        row.update(await pause_of(services, row["object"], status.paused_ms))
    return row


async def pause_of(services: Services, obj: str, since_ms: int) -> dict[str, Any]:
    """Who paused `obj`'s alarm and why, from the audit row of that pause (the
    console's, or a bulk item's): the rows are read newest first, back to the
    pause's time at most (and `PAUSE_SCAN` rows), as the record keeps no reason."""
    store, after, read = services.rt.backend.audit_rows, None, 0
    while read < PAUSE_SCAN:
        rows = await store.audit_page(after, AUDIT_READ)
        for r in rows:
            if int(r["at_ms"]) < since_ms:
                return {"paused_by": None, "paused_reason": None}
            if r["action"] == "pause_alarm" and r["target"] == obj and r["ok"]:
                return {"paused_by": r["actor"], "paused_reason": r["reason"]}
        if len(rows) < AUDIT_READ:
            break
        after, read = keys.check_cursor("audit.seq", [rows[-1]["seq"]]), read + len(rows)
    return {"paused_by": None, "paused_reason": None}


async def objects(services: Services, request: Request) -> Any:
    """Every object the runtime knows of: with storage, with an alarm, an execution
    (class `Execution`), from storage's index of them, and the resident ones that
    have nothing stored yet (merged in by key). By name, by key, at any depth;
    sorted by another column, bounded (`MAX_SCAN`)."""
    args, rt = request.args, services.rt
    limit, offset = args.get("limit", DEFAULT_PAGE), args.get("offset", 0)
    text = args.get("filter")
    sort, desc = check_sort("objects", args.get("sort")), bool(args.get("desc"))
    resident = {k for k in rt.resident_objects() if contains(text, f"{k[0]}/{k[1]}")}
    only_resident = sorted(resident - await rt.backend.alarm_rows.known_among(
        sorted(resident)), reverse=desc)
    count = await total(services, ("objects", text), text,
                        lambda: rt.count_objects(text)) + len(only_resident)
    answer: dict[str, Any] = {"offset": offset, "resident": len(rt.resident_objects()),
                              "total": count}
    if keyed_order("objects", sort) is not None:
        after = cursor("objects", "object", args)
        entries = await rt.objects(after, limit, offset=offset, contains=text, desc=desc)
        page = [(e.object_class, e.object_name) for e in entries]
        extra = resident_in_page(page, only_resident, None if after is None
                                 else (after[0], after[1]), limit, desc)
        merged = sorted([*entries, *(bare(k) for k in extra)],
                        key=lambda e: (e.object_class, e.object_name), reverse=desc)[:limit]
        return {"rows": [object_row(services, e, resident) for e in merged], **answer,
                "cursors": [[e.object_class, e.object_name] for e in merged]}
    unkeyed("objects", f"sorted by {sort}", args)
    check_scan("objects", count, f"sorting by {sort}")
    every = [*await rt.objects(None, -1, contains=text), *(bare(k) for k in only_resident)]
    rows = [object_row(services, e, resident) for e in every]
    return {"rows": window(sort_rows("objects", rows, sort, desc), offset, limit), **answer}


def object_row(services: Services, e: ObjectEntry,
               resident: set[tuple[str, str]]) -> dict[str, Any]:
    key = (e.object_class, e.object_name)
    return {"object": f"{key[0]}/{key[1]}", "resident": key in resident,
            # an execution's log is in the runtime's database, not a file of its own
            "storage": e.stored or e.execution,
            "sockets": services.rt.sockets.count(key),
            "alarm_ms": e.next_attempt_ms, "alarm_state": e.alarm_state,
            "alarm_paused": e.alarm_paused}


def bare(key: tuple[str, str]) -> ObjectEntry:
    """A resident object with nothing stored yet."""
    return ObjectEntry(key[0], key[1], False, key[0] == EXECUTION_CLASS, None, None)


async def executions(services: Services, request: Request) -> Any:
    args, rt = request.args, services.rt
    limit, offset = args.get("limit", DEFAULT_PAGE), args.get("offset", 0)
    status, text = args.get("status"), args.get("filter")
    sort, desc = check_sort("executions", args.get("sort")), bool(args.get("desc"))
    counts = dict(rt.counters().executions)
    count = await total(services, ("executions", status, text), text,
                        lambda: rt.count_executions(status, text))
    if keyed_order("executions", sort) is not None:
        after = cursor("executions", "urgency", args)
        recs = await rt.execution_page(after, limit, offset=offset, status=status,
                                       contains=text, desc=desc)
        return {"rows": [execution_row(r) for r in recs], "offset": offset,
                "counts": counts, "total": count,
                "cursors": [execution_cursor(r) for r in recs]}
    unkeyed("executions", f"sorted by {sort}", args)
    check_scan("executions", count, f"sorting by {sort}")
    every = [execution_row(r) for r in await rt.execution_page(
        None, -1, status=status, contains=text)]
    rows = window(sort_rows("executions", every, sort, desc), offset, limit)
    return {"rows": rows, "offset": offset, "counts": counts, "total": count}


async def execution(services: Services, request: Request) -> Any:
    return await services.rt.executions.describe(request.args["execution_id"])


async def audit(services: Services, request: Request) -> Any:
    """The audit log, newest first, with how many rows it holds (its retention prunes
    the oldest, so the newest row's `seq` is no count of them). A callback's
    target is its opaque id: `execution_id` says whose it is, and `target=` of an
    execution finds its callbacks' rows too. By time, by key; filtered or sorted
    by another column, bounded (`MAX_SCAN`): the execution of a callback's id is
    read from the id, which no index holds."""
    args = request.args
    limit, offset = args.get("limit", DEFAULT_PAGE), args.get("offset", 0)
    text, target = args.get("filter"), args.get("target")
    sort, desc = check_sort("audit", args.get("sort")), args.get("desc", True)
    store = services.rt.backend.audit_rows
    count = await store.audit_count()
    if keyed_order("audit", sort) is not None and not text and not target:
        after = cursor("audit", "seq", args)
        found = await store.audit_page(after, limit, offset=offset, desc=bool(desc))
        return {"rows": [audit_row(r) for r in found], "offset": offset,
                "total": count, "cursors": [[r["seq"]] for r in found]}
    unkeyed("audit", "with a filter, a target or a sort by another column", args)
    check_scan("audit", count, "a filter, a target or a sort")
    every = [audit_row(r) for r in await store.audit_page(None, max(count, 1))]
    every = [r for r in every if (not target or target in (r["target"],
                                                           r.get("execution_id")))
             and contains(text, r["action"], r["target"], r.get("execution_id"),
                          r["actor"], r["reason"], r.get("node"))]
    rows = window(sort_rows("audit", every, sort, bool(desc)), offset, limit)
    return {"rows": rows, "offset": offset, "total": len(every)}


async def faults(services: Services, request: Request) -> Any:
    args = request.args
    text, target = args.get("filter"), args.get("target")
    sort, desc = check_sort("faults", args.get("sort")), bool(args.get("desc"))
    every = [f for f in services.rt.faults.list() if (not target or f["target"] == target)
             and contains(text, f["id"], f["target"], f["kind"], f.get("step"))]
    offset = args.get("offset", 0)
    rows = window(sort_rows("faults", every, sort, desc), offset,
                  args.get("limit", len(every)))
    return {"rows": rows, "offset": offset, "total": len(every)}


async def nodes(services: Services, request: Request) -> Any:
    return await services.fleet.query(request.args)


async def counts(services: Services) -> dict[str, Any]:
    """The header's counts: from the counters storage keeps with its writes, so a
    tick costs the same with a thousand alarms or a million (no query at all)."""
    rt = services.rt
    c = rt.counters()
    executions_by_status = dict(c.executions)
    return {"alarms": {state: c.alarms.get(state, 0) for state in ALARM_STATES},
            "near_exhaustion": rt.near_exhaustion(c), "objects": c.stored, "known": c.known,
            "resident": len(rt.resident_objects()), "executions": executions_by_status,
            "needs_human": executions_by_status.get("needs_human", 0),
            "faults": len(rt.faults.list()), "nodes": await services.fleet.summary()}


async def snapshot(services: Services, request: Request | None = None) -> dict[str, Any]:
    """The most urgent page of everything, plus counts: what a new client sees first."""
    first = Request({"limit": SNAPSHOT_ROWS}, "", "")
    return {"type": "snapshot", "at_ms": services.rt.clock.now_ms(),
            "counts": await counts(services),
            "alarms": (await alarms(services, first))["rows"],
            "executions": (await executions(services, first))["rows"],
            "faults": services.rt.faults.list()}


FILTERED = {"filter": OPTIONAL_TEXT}
SPECS = [
    # Listings page with offset/limit, or by key with `after` (the orders an index
    # serves answer with `cursors`), and take `sort` (a column's real value, see
    # server/listing.py) and `desc`.
    query("alarms", {**PAGED, "state": OPTIONAL_TEXT, **FILTERED, **SORTED, **AFTER}, alarms,
          "a page of alarms, most urgent first"),
    query("alarm", {"object": Field(str)}, alarm, "one alarm in full"),
    query("objects", {**PAGED, **FILTERED, **SORTED, **AFTER}, objects,
          "a page of the objects the runtime knows"),
    query("executions", {**PAGED, "status": OPTIONAL_TEXT, **FILTERED, **SORTED, **AFTER},
          executions, "a page of executions, most in need of a person first"),
    query("execution", {"execution_id": Field(str)}, execution,
          "one execution in full: history, saga, callbacks"),
    query("audit", {**PAGED, **FILTERED, "target": OPTIONAL_TEXT, **SORTED, **AFTER}, audit,
          "a page of the audit log, newest first"),
    query("faults", {**PAGED, **FILTERED, "target": OPTIONAL_TEXT, **SORTED}, faults,
          "the injected faults"),
    query("snapshot", {}, snapshot, "the most urgent page of everything, with counts"),
    query("nodes", {**PAGED, **FILTERED, **SORTED}, nodes, "the fleet's nodes"),
]
