"""A fake ops backend for the console: fixed frames, fixed answers, no time, no network.

`FakeOpsClient` implements the `OpsClient` protocol: it sends a welcome, one
snapshot and a few deltas (every `at_ms` fixed at `NOW`), then stays quiet; it
answers the console's queries from the fixed data below and records operator
commands. With `frozen_console_clock()` the console's own countdown does not
move either, so what it draws is the same on every run: the snapshot tests and
`make_screenshots.py` use it. `SCENES` says how to reach each view.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any
from unittest import mock

from textual.css.query import NoMatches
from textual.pilot import Pilot
from textual.widgets import Button, DataTable, Input, RichLog, Static

from alarmtop.server.listing import check_sort, sort_rows
from alarmtop.tui.app import AlarmtopApp
from alarmtop.tui.formatting import urgency

NOW = 1_800_000_000_000  # 2027-01-15 08:00:00 UTC
TARGET = "demo@127.0.0.1:8765"
SIZE = (160, 48)
SMALL = (80, 24)
S = 1000  # one second in ms
FIRES = [3, 5, 8, 12, 9, 6, 4, 7, 11, 14, 10, 6]
FAILURES = [0, 1, 0, 0, 2, 1, 0, 0, 1, 3, 1, 1]
FAULT_ERROR = ("injected fault f1 (compensation_fail) on hsf-day2/"
               "compensate_open_viewing_page")


def attempts(n: int, first_ms: int, error: str) -> list[dict[str, Any]]:
    """`n` failed attempts, each 0.8 s long, the ladder doubling from 0.5 s."""
    out, at, gap = [], first_ms, 500
    for i in range(1, n + 1):
        out.append({"start_ms": at, "end_ms": at + 800, "error": f"{error} (attempt {i})"})
        at, gap = at + 800 + gap, gap * 2
    return out


def alarm(ref: str, state: str, *, due_ms: int, retry: int = 0, max_retries: int = 6,
          error: str | None = None, tries: int = 0, near: bool = False) -> dict[str, Any]:
    cls, name = ref.split("/", 1)
    history = attempts(tries, due_ms - 120 * S, error or "") if tries else []
    return {"object_class": cls, "object_name": name, "object": ref, "scheduled_ms": due_ms,
            "state": state, "retry_count": retry, "max_retries": max_retries,
            "next_attempt_ms": None if state == "dead" else due_ms,
            "last_error": history[-1]["error"] if history else error,
            "attempts": history, "near_exhaustion": near}


ALARMS = [
    alarm("Flaky/payments-7", "dead", due_ms=NOW - 40 * S, retry=6, tries=7,
          error="RuntimeError: downstream unavailable"),
    alarm("LeaseLedger/tenant-42", "retrying", due_ms=NOW + 63_800, retry=5, tries=5,
          near=True, error="RuntimeError: revocation service timed out"),
    alarm("ClickCounter/pricing", "retrying", due_ms=NOW + 3_100, retry=2, tries=2,
          error="OSError: flush failed, connection reset"),
    alarm("LeaseLedger/tenant-7", "pending", due_ms=NOW + 400),
    alarm("ClickCounter/home", "pending", due_ms=NOW + 1_700),
    alarm("LeaseLedger/tenant-3", "pending", due_ms=NOW + 12_000),
    alarm("LiveDashboard/main", "pending", due_ms=NOW + 125 * S),
    alarm("Execution/hsf-day1", "pending", due_ms=NOW + 3_594 * S, max_retries=8),
]
ALARMS.sort(key=urgency)

SAGA_STUCK = [
    {"name": "notify_partners", "state": "compensated", "step": "compensate_notify_partners"},
    {"name": "open_viewing_page", "state": "failed", "step": "compensate_open_viewing_page",
     "error": FAULT_ERROR},
    {"name": "reserve_streaming", "state": "pending", "step": "compensate_reserve_streaming"},
]
EXECUTIONS: list[dict[str, Any]] = [
    {"execution_id": "hsf-day2", "name": "festival-stream", "status": "needs_human",
     "blocked_on": f"needs a human: compensate_open_viewing_page failed ({FAULT_ERROR})",
     "updated_ms": NOW - 3 * S, "saga": SAGA_STUCK},
    {"execution_id": "hsf-day1", "name": "festival-stream", "status": "suspended",
     "blocked_on": "waiting for callback 'verdict'", "updated_ms": NOW - 6 * S,
     "saga": [{"name": n, "state": "pending", "step": f"compensate_{n}"}
              for n in ("notify_partners", "open_viewing_page", "reserve_streaming")]},
    {"execution_id": "hsf-day3", "name": "festival-stream", "status": "succeeded",
     "blocked_on": None, "updated_ms": NOW - 5 * S, "saga": []},
]
FAULTS: list[dict[str, Any]] = [
    {"id": "f1", "target": "hsf-day2", "kind": "compensation_fail", "times": None,
     "remaining": None, "seconds": None, "step": "compensate_open_viewing_page",
     "point": None, "triggered": 3, "created_ms": NOW - 9 * S},
    {"id": "f2", "target": "LeaseLedger/tenant-42", "kind": "alarm_raise", "times": 8,
     "remaining": 3, "seconds": None, "step": None, "point": None, "triggered": 5,
     "created_ms": NOW - 150 * S},
]
OBJECTS = [
    ("ClickCounter/home", True, 0), ("ClickCounter/pricing", True, 0),
    ("Execution/hsf-day1", False, 0), ("Execution/hsf-day2", False, 0),
    ("Flaky/payments-7", False, 0), ("LeaseLedger/tenant-3", True, 0),
    ("LeaseLedger/tenant-42", True, 0), ("LeaseLedger/tenant-7", False, 0),
    ("LiveDashboard/main", True, 3),
]
NODE = "demo-4242"  # the server's node id (host-pid), as its audit rows name it
AUDIT: list[dict[str, Any]] = [
    {"seq": 3, "at_ms": NOW - 20 * S, "node": NODE, "actor": "127.0.0.1:50412", "role": "operator",
     "action": "inject_fault", "target": "LeaseLedger/tenant-42", "reason": None, "ok": True},
    {"seq": 2, "at_ms": NOW - 75 * S, "node": NODE, "actor": "127.0.0.1:50412", "role": "operator",
     "action": "send_callback", "target": "cb1.WyJoc2YtZGF5MiIsIjQiXQ", "reason": None,
     "ok": True, "execution_id": "hsf-day2"},
    {"seq": 1, "at_ms": NOW - 95 * S, "node": NODE, "actor": "127.0.0.1:50398", "role": "viewer",
     "action": "rearm", "target": "Flaky/payments-7", "reason": "re-armed from the console",
     "ok": False},
]
COUNTS: dict[str, Any] = {"alarms": {"dead": 1, "retrying": 2, "pending": 5, "running": 0},
          "near_exhaustion": 1, "objects": 9, "resident": 5,
          "executions": {"needs_human": 1, "suspended": 1, "succeeded": 1},
          "needs_human": 1, "faults": 2}

# A fleet of three on PostgreSQL, seen from node-a: node-c stopped renewing 47 s ago.
NODES: list[dict[str, Any]] = [
    {"node_id": "node-a", "address": "10.0.0.11:7071", "started_ms": NOW - 3 * 3600 * S,
     "renewed_ms": NOW - 1_200, "stopped_ms": None, "shards": 32, "up": True,
     "renewed_ago_ms": 1_200, "this": True, "state": "up"},
    {"node_id": "node-b", "address": "10.0.0.12:7071", "started_ms": NOW - 3 * 3600 * S,
     "renewed_ms": NOW - 3_400, "stopped_ms": None, "shards": 32, "up": True,
     "renewed_ago_ms": 3_400, "this": False, "state": "up"},
    {"node_id": "node-c", "address": "10.0.0.13:7071", "started_ms": NOW - 2 * 3600 * S,
     "renewed_ms": NOW - 47 * S, "stopped_ms": None, "shards": 0, "up": False,
     "renewed_ago_ms": 47 * S, "this": False, "state": "down"},
]
FLEET_COUNTS: dict[str, Any] = {**COUNTS, "nodes": {"total": 3, "down": 1,
                                                    "node_id": "node-a", "fleet": True}}


INPUTS: dict[str, Any] = {
    eid: {"eventId": eid, "startsInSeconds": 3600,
          "partners": ["radio-one", "streamco", "ticket-hub"]}
    for eid in ("hsf-day1", "hsf-day2", "hsf-day3")}
RESULTS: dict[str, Any] = {"hsf-day3": {"status": "streaming", "verdict": "go",
                                        "stream": "rtmp://streamco/hsf-day3"}}


def event(type_: str, seconds_ago: float, **data: Any) -> dict[str, Any]:
    return {"type": type_, "at_ms": NOW - int(seconds_ago * S), "data": data}


EVENTS = [
    event("viewer.connected", 12, address="127.0.0.1:50412", role="operator"),
    event("alarm.fired", 11.5, object="LeaseLedger/tenant-3", retry_count=0),
    event("alarm.succeeded", 11.4, object="LeaseLedger/tenant-3"),
    event("alarm.set", 11.4, object="LeaseLedger/tenant-3", at_ms=NOW + 12_000),
    event("alarm.fired", 10, object="ClickCounter/pricing", retry_count=1),
    event("alarm.failed", 9.8, object="ClickCounter/pricing",
          error="OSError: flush failed, connection reset"),
    event("alarm.retry_scheduled", 9.8, object="ClickCounter/pricing", retry_count=2),
    event("fault.triggered", 9, target="LeaseLedger/tenant-42", kind="alarm_raise"),
    event("alarm.failed", 9, object="LeaseLedger/tenant-42",
          error="RuntimeError: revocation service timed out"),
    event("alarm.near_exhaustion", 9, object="LeaseLedger/tenant-42", retry_count=5),
    event("execution.step_failed", 6, execution_id="hsf-day2",
          step="compensate_open_viewing_page", attempt=3),
    event("execution.needs_human", 3, execution_id="hsf-day2",
          step="compensate_open_viewing_page"),
    event("alarm.dead", 2, object="Flaky/payments-7", retry_count=6),
    event("object.hibernated", 1, object="LeaseLedger/tenant-7"),
]


def stamp(ms: int) -> str:
    """An ISO timestamp, as the history model writes `EventTimestamp`."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def _history(*entries: tuple[str, str]) -> list[dict[str, Any]]:
    """Events 250 ms apart, the first a minute ago."""
    out: list[dict[str, Any]] = [{"EventId": 1, "EventType": "ExecutionStarted",
                                  "EventTimestamp": stamp(NOW - 60 * S)}]
    ids: dict[str, str] = {}  # each operation's id, in the order it first appears
    for kind, name in entries:
        ev: dict[str, Any] = {"EventId": len(out) + 1, "EventType": kind, "Name": name,
                              "EventTimestamp": stamp(NOW - 60 * S + 250 * len(out))}
        if name and not kind.startswith(("Execution", "Invocation")):
            ev["Id"] = ids.setdefault(name, str(len(ids) + 1))
        if kind == "StepFailed":
            ev["StepFailedDetails"] = {
                "Error": {"Payload": {"ErrorType": "alarmtop.core.InjectedFault",
                                      "ErrorMessage": FAULT_ERROR}},
                "RetryDetails": {"CurrentAttempt": 1, "NextAttemptDelaySeconds": 1}}
        out.append(ev)
    return out


FORWARD = [(k, n) for n in ("reserve_streaming", "open_viewing_page", "notify_partners")
           for k in ("StepStarted", "StepSucceeded")]
STUCK = "compensate_open_viewing_page"
DETAILS: dict[str, dict[str, Any]] = {
    "hsf-day2": {
        "version": "1", "invocations": 4, "human_hold": None, "error": None,
        "callbacks": [
            {"name": "verdict", "callback_id": "cb1.WyJoc2YtZGF5MiIsIjQiXQ",
             "status": "succeeded", "kind": "Callback"},
            {"name": STUCK, "callback_id": "cb1.WyJoc2YtZGF5MiIsIjgiXQ", "status": "started",
             "kind": "HumanDecision"}],
        "history": _history(*FORWARD, ("CallbackStarted", "verdict"),
                            ("InvocationCompleted", ""), ("CallbackSucceeded", "verdict"),
                            ("StepStarted", "record_cancellation"),
                            ("StepSucceeded", "record_cancellation"),
                            ("StepStarted", "compensate_notify_partners"),
                            ("StepSucceeded", "compensate_notify_partners"),
                            *[(k, STUCK) for _ in range(3) for k in ("StepStarted",
                                                                     "StepFailed")],
                            ("InvocationCompleted", "")),
    },
    "hsf-day1": {
        "version": "1", "invocations": 1, "human_hold": None, "error": None,
        "callbacks": [{"name": "verdict", "callback_id": "cb1.WyJoc2YtZGF5MSIsIjQiXQ",
                       "status": "started", "kind": "Callback"}],
        "history": _history(*FORWARD, ("CallbackStarted", "verdict"),
                            ("InvocationCompleted", "")),
    },
    "hsf-day3": {
        "version": "1", "invocations": 2, "human_hold": None, "error": None, "callbacks": [],
        "history": _history(*FORWARD, ("CallbackStarted", "verdict"),
                            ("CallbackSucceeded", "verdict"), ("StepStarted", "start_streaming"),
                            ("StepSucceeded", "start_streaming")),
    },
}


def timer(kind: str, target: str, due_ms: int, *, execution_id: str | None = None,
          op_id: str | None = None, name: str | None = None, state: str = "pending",
          paused: bool = False, retry: int | None = None) -> dict[str, Any]:
    return {"key": [due_ms, kind, target, op_id or ""], "kind": kind, "target": target,
            "object": None if execution_id else target, "execution_id": execution_id,
            "op_id": op_id, "name": name, "due_ms": due_ms, "state": state,
            "paused": paused, "retry_count": retry}


# The timers board: alarms, a retry, waits, a callback deadline; one overdue, one paused.
TIMERS = sorted([
    timer("alarm", "LeaseLedger/tenant-9", NOW - 40 * S, state="pending", retry=0),
    timer("retry", "ClickCounter/pricing", NOW + 3_100, state="retrying", retry=2),
    timer("alarm", "LeaseLedger/tenant-7", NOW + 400, retry=0),
    timer("alarm", "ClickCounter/home", NOW + 1_700, retry=0),
    timer("wait", "nap/n-12", NOW - 95 * S, execution_id="n-12", op_id="2", name="cool_down",
          state="suspended", paused=True),
    timer("retry", "LeaseLedger/tenant-42", NOW + 63_800, state="retrying", retry=5),
    timer("alarm", "LiveDashboard/main", NOW + 125 * S, retry=0),
    timer("callback_timeout", "festival-stream/hsf-day1", NOW + 3_594 * S,
          execution_id="hsf-day1", op_id="4", name="verdict", state="suspended"),
    timer("wait", "festival-stream/hsf-day1", NOW + 3_600 * S, execution_id="hsf-day1",
          op_id="5", name="until_doors_open", state="suspended"),
], key=lambda r: r["due_ms"])
REPLAY_DIVERGED: dict[str, Any] = {
    "clean": False, "version": "2", "summary": "replay diverged at operation 2",
    "replayed": 1, "recorded": 9, "stopped_at": None,
    "divergence": {"op_id": "2", "index": 1,
                   "recorded": {"type": "STEP", "kind": "Step", "name": "open_viewing_page"},
                   "current": {"type": "STEP", "kind": "Step", "name": "open_viewing_pages"}}}
BULK_SAMPLE = ["Flaky/payments-7", "Flaky/payments-8", "Flaky/payments-11",
               "Flaky/payments-12", "Flaky/payments-19"]
BULK: dict[str, Any] = {
    "batch_id": "b-0117", "action": "rearm", "kind": "alarms", "status": "running",
    "total": 1240, "done": 812, "failed": 3, "left": 425, "cancelled": 0, "in_flight": 32,
    "failures": [{"key": f"Flaky/payments-{n}", "error": error} for n, error in (
        (31, "NoAlarm: Flaky/payments-31 has no alarm (its object deleted it)"),
        (57, "InvalidArgument: Flaky/payments-57 is not a dead letter any more (pending)"),
        (88, "Busy: Flaky/payments-88 is held by another operator's action"))]}


def frames(counts: dict[str, Any] = COUNTS) -> list[dict[str, Any]]:
    """What the fake server sends: welcome, snapshot, then one delta per sparkline step."""
    out: list[dict[str, Any]] = [
        {"type": "welcome", "role": "operator", "protocol": 1},
        {"type": "snapshot", "at_ms": NOW, "seq": 0, "counts": counts, "alarms": ALARMS,
         "executions": EXECUTIONS, "faults": FAULTS}]
    per = -(-len(EVENTS) // len(FIRES))
    for i, (fires, failures) in enumerate(zip(FIRES, FAILURES), start=1):
        out.append({"type": "delta", "seq": i, "at_ms": NOW, "counts": counts, "alarms": [],
                    "executions": [], "events": EVENTS[(i - 1) * per:i * per],
                    "fires": fires, "failures": failures, "faults": FAULTS})
    return out


LAST_SEQ = len(FIRES)


class FakeOpsClient:
    """An `OpsClient` over the fixed data above; `commands` records what was asked."""

    def __init__(self, role: str = "operator", fleet: bool = False) -> None:
        self.role: str | None = None
        self._role = role
        self.fleet = fleet  # a fleet of three nodes (one down), not one SQLite node
        self.commands: list[tuple[str, dict[str, Any]]] = []
        self._closed = asyncio.Event()

    async def connect(self) -> None:
        self.role = self._role

    async def close(self) -> None:
        self._closed.set()

    async def frames(self) -> AsyncIterator[dict[str, Any]]:
        for frame in frames(FLEET_COUNTS if self.fleet else COUNTS):
            if frame["type"] == "welcome":
                frame = {**frame, "role": self._role}
            yield frame
        await self._closed.wait()  # then quiet, like a server with nothing to say

    async def request(self, op: str, **args: Any) -> Any:
        answer = getattr(self, f"_{op}", None)
        if answer is None:
            self.commands.append((op, args))
            return {"ok": True}
        return answer(**args)

    def _alarms(self, offset: int = 0, limit: int = 50, state: str | None = None,
                filter: str | None = None, sort: str | None = None,
                desc: bool = False) -> dict[str, Any]:
        rows = [r for r in ALARMS if (state is None or r["state"] == state)
                and (not filter or filter in r["object"])]
        return listed("alarms", rows, offset, limit, sort, desc)

    def _alarm(self, object: str) -> dict[str, Any] | None:
        return next((r for r in ALARMS if r["object"] == object), None)

    def _objects(self, offset: int = 0, limit: int = 50, filter: str | None = None,
                 sort: str | None = None, desc: bool = False) -> dict[str, Any]:
        by_ref = {a["object"]: a for a in ALARMS}
        rows = [{"object": ref, "resident": resident, "sockets": sockets,
                 "storage": True,
                 "alarm_ms": by_ref[ref]["scheduled_ms"] if ref in by_ref else None,
                 "alarm_state": by_ref[ref]["state"] if ref in by_ref else None}
                for ref, resident, sockets in OBJECTS if not filter or filter in ref]
        return {**listed("objects", rows, offset, limit, sort, desc),
                "resident": sum(1 for _, r, _ in OBJECTS if r)}

    def _executions(self, offset: int = 0, limit: int = 50, status: str | None = None,
                    filter: str | None = None, sort: str | None = None,
                    desc: bool = False) -> dict[str, Any]:
        rows = [r for r in EXECUTIONS if (status is None or r["status"] == status)
                and (not filter or filter in f"{r['name']}/{r['execution_id']}")]
        return {**listed("executions", rows, offset, limit, sort, desc),
                "counts": COUNTS["executions"]}

    def _execution(self, execution_id: str) -> dict[str, Any]:
        row = next(r for r in EXECUTIONS if r["execution_id"] == execution_id)
        return {**row, **DETAILS[execution_id], "input": INPUTS[execution_id],
                "result": RESULTS.get(execution_id), "created_ms": NOW - 60 * S,
                "ended_ms": NOW - 5 * S if row["status"] == "succeeded" else None}

    def _audit(self, offset: int = 0, limit: int = 50, filter: str | None = None,
               target: str | None = None, sort: str | None = None,
               desc: bool = True) -> dict[str, Any]:
        rows = [r for r in AUDIT if (not target or target in (r["target"],
                                                              r.get("execution_id")))
                and (not filter or filter in f"{r['action']} {r['target']} {r['actor']}")]
        return listed("audit", rows, offset, limit, sort, desc)

    def _timers(self, limit: int = 100, after: Any = None) -> dict[str, Any]:
        return {"rows": TIMERS[:limit], "next": None, "now_ms": NOW}

    def _replay_check(self, execution_id: str, version: str | None = None) -> dict[str, Any]:
        return REPLAY_DIVERGED

    def _bulk_preview(self, selection: dict[str, Any]) -> dict[str, Any]:
        return {"count": BULK["total"], "sample": BULK_SAMPLE}

    def _bulk_start(self, **args: Any) -> dict[str, Any]:
        self.commands.append(("bulk_start", args))
        return {**BULK, "done": 0, "failed": 0, "left": BULK["total"], "failures": []}

    def _bulk(self, batch_id: str) -> dict[str, Any]:
        return BULK

    def _faults(self, offset: int = 0, limit: int = 50, filter: str | None = None,
                target: str | None = None, sort: str | None = None,
                desc: bool = False) -> dict[str, Any]:
        rows = [f for f in FAULTS if (not target or f["target"] == target)
                and (not filter or filter in f"{f['id']} {f['target']} {f['kind']}")]
        return listed("faults", rows, offset, limit, sort, desc)

    def _nodes(self, offset: int = 0, limit: int = 50, filter: str | None = None,
               sort: str | None = None, desc: bool = False) -> dict[str, Any]:
        every = NODES if self.fleet else [{
            "node_id": NODE, "address": None, "shards": None, "up": True,
            "renewed_ago_ms": None, "this": True, "state": "up"}]
        rows = [r for r in every if not filter or filter in f"{r['node_id']} {r['address']}"]
        if sort is None:  # the server's own order: down ones first
            rows = sort_rows("nodes", rows, "state", False)
        return {**listed("nodes", rows, offset, limit, sort, desc), "now_ms": NOW,
                "node_id": "node-a" if self.fleet else NODE}


def listed(listing: str, rows: list[dict[str, Any]], offset: int, limit: int,
           sort: str | None, desc: bool) -> dict[str, Any]:
    """A page of `rows` in the order the server would give (its own sorting rules)."""
    if sort is not None:
        rows = sort_rows(listing, rows, check_sort(listing, sort), desc)
    return {"rows": rows[offset:offset + limit], "offset": offset, "total": len(rows)}


@contextlib.contextmanager
def frozen_console_clock() -> Iterator[None]:
    """Stop the console's local countdown: its `time.monotonic()` always says the same."""
    with mock.patch("alarmtop.tui.app.time", SimpleNamespace(monotonic=lambda: 1000.0)):
        yield


def fake_console(role: str = "operator", read_only: bool = False,
                 fleet: bool = False) -> AlarmtopApp:
    return AlarmtopApp(FakeOpsClient(role, fleet), target=TARGET, read_only=read_only)


# -- how to reach each view, shared by the snapshot tests and make_screenshots.py ----------


async def until(pilot: Pilot[Any], check: Callable[[], object], what: str) -> None:
    """Let the console run until `check()` holds (at least 20 s: a bound, not a pace). A
    screen just pushed may not have its widgets yet (NoMatches): not yet, not a failure."""
    for _ in range(1000):
        with contextlib.suppress(NoMatches):
            if check():
                return
        await pilot.pause(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def fed(pilot: Pilot[Any]) -> None:
    """Every fixed frame has been merged and drawn (the fake sends nothing after the
    last one; the console draws frames at its own pace)."""
    app = pilot.app
    assert isinstance(app, AlarmtopApp)
    await until(pilot, lambda: app.state.seq == LAST_SEQ and not app.pacer.stale,
                "the last fixed frame, drawn")


def rows(pilot: Pilot[Any], selector: str) -> int:
    return pilot.app.screen.query_one(selector, DataTable).row_count


def text_of(pilot: Pilot[Any], selector: str) -> str:
    return str(pilot.app.screen.query_one(selector, Static).content)


async def _idle_workers(pilot: Pilot[Any], busy: tuple[str, ...] = ("feed",)) -> None:
    """Only the worker groups `busy` still run (the feed; a key's worker while its form
    is up)."""
    await until(pilot, lambda: all(w.group in busy or w.is_finished
                                   for w in pilot.app.workers), "the console's workers")


def _scene(keys: str | tuple[str, ...], ready: Callable[[Pilot[Any]], object],
           between: Callable[[Pilot[Any]], object] = lambda p: True,
           busy: tuple[str, ...] = ("feed",)) -> Callable[[Pilot[Any]], Awaitable[None]]:
    """Press `keys` (waiting for `between` between two), then wait for `ready`."""
    async def run_before(pilot: Pilot[Any]) -> None:
        await fed(pilot)
        pressed = (keys,) if isinstance(keys, str) else keys
        for i, key in enumerate(pressed):
            if key:
                await pilot.press(key)
            if i < len(pressed) - 1:
                await until(pilot, lambda: between(pilot), f"the view after {key}")
        await until(pilot, lambda: ready(pilot), f"the view behind {keys or 'start'}")
        await _idle_workers(pilot, busy)
        # A focused input's cursor blinks (F's reason field): held shown, or the picture
        # depends on how long the scene took, past half a second on a loaded machine.
        for field in pilot.app.screen.query(Input):
            field.cursor_blink = False
        await pilot.pause()
    return run_before


@dataclass(frozen=True)
class Scene:
    name: str  # also the screenshot's file name
    what: str  # what the picture shows
    run_before: Callable[[Pilot[Any]], Awaitable[None]]
    fleet: bool = False  # the console's server is a node of a fleet of three, one down


def _selection(run: bool) -> Callable[[Pilot[Any]], Awaitable[None]]:
    """m in view 5, state "dead", Preview (and Run)."""
    async def run_before(pilot: Pilot[Any]) -> None:
        await fed(pilot)
        await pilot.press("5")
        await until(pilot, lambda: rows(pilot, "#alarm-page") == 1, "the dead letters")
        await pilot.press("m")
        await until(pilot, lambda: type(pilot.app.screen).__name__ == "SelectionDialog",
                    "the selection form")
        await pilot.press(*"dead")
        await pilot.press("enter")  # previews
        await until(pilot, lambda: "match" in text_of(pilot, "#preview"), "the preview")
        # The focus on a button: an input's cursor blinks, so no two pictures would match.
        pilot.app.screen.query_one("#ok", Button).focus()
        if run:
            pilot.app.screen.query_one("#ok", Button).press()
            await until(pilot, lambda: type(pilot.app.screen).__name__ ==
                        "BulkProgressScreen" and "812" in text_of(pilot, "#bulk-counts"),
                        "the progress")
            pilot.app.clear_notifications()  # its toast fades in: not the same frame twice
        await _idle_workers(pilot, ("feed", "actions"))  # m's worker waits for its form
        await pilot.pause()
    return run_before


def _detail_ready(p: Pilot[Any]) -> bool:
    screen = p.app.screen
    return type(screen).__name__ == "TargetScreen" and "outcome" in text_of(
        p, "#target-summary") and "saga stack" in text_of(p, "#target-saga")


SCENES = [
    Scene("overview", "header counts and sparklines, alarms by urgency (dead, near "
          "exhaustion, retrying, then soonest due), the needs-human saga first",
          _scene("", lambda p: rows(p, "#overview-alarms") == len(ALARMS)
                 and rows(p, "#overview-executions") == len(EXECUTIONS))),
    Scene("alarms", "the alarms page with the selected dead letter's seven attempts",
          _scene("2", lambda p: rows(p, "#alarm-page") == len(ALARMS)
                 and "#7" in text_of(p, "#attempts"))),
    Scene("executions", "executions with the needs-human festival's detail: outcome, "
          "input, saga stack, callbacks, history",
          _scene("3", lambda p: rows(p, "#execution-page") == len(EXECUTIONS)
                 and "saga stack" in text_of(p, "#execution-detail-text"))),
    Scene("execution-detail", "enter on the needs-human festival: the whole execution, "
          "scrollable, with its history, events, faults and audit rows in tabs",
          _scene(("3", "enter"), _detail_ready, lambda p: rows(p, "#execution-page") > 0)),
    Scene("objects", "objects: resident or hibernated, storage, sockets, alarm and state",
          _scene("4", lambda p: rows(p, "#object-page") == len(OBJECTS))),
    Scene("dead-letters", "dead letters only, with the attempts of the selected one",
          _scene("5", lambda p: rows(p, "#alarm-page") == 1
                 and "#7" in text_of(p, "#attempts"))),
    Scene("faults", "active faults: an always-on compensation failure and a counted one",
          _scene("6", lambda p: rows(p, "#fault-table") == len(FAULTS))),
    Scene("audit", "the audit log: when, who, role, action, target (a callback shown as "
          "its execution), ok or refused, reason",
          _scene("7", lambda p: rows(p, "#audit-table") == len(AUDIT))),
    Scene("events", "the live event log, failures in red and retries in yellow",
          _scene("8", lambda p: len(p.app.screen.query_one(RichLog).lines) == len(EVENTS))),
    Scene("nodes", "a fleet of three seen from node-a: node-c DOWN (no renewal for 47 s, "
          "its shards taken over), the header warning NODES 3 (1 DOWN)",
          _scene("0", lambda p: rows(p, "#node-table") == len(NODES)), fleet=True),
    Scene("help", "the help over the overview: every key and what it does",
          _scene("question_mark", lambda p: type(p.app.screen).__name__ == "HelpScreen")),
    Scene("timers", "the timers board (9): alarms, retries, waits and a callback deadline, "
          "soonest first, an overdue alarm flagged and a paused wait",
          _scene("9", lambda p: type(p.app.screen).__name__ == "TimersScreen"
                 and rows(p, "#timer-board") == len(TIMERS))),
    Scene("marked", "two alarms marked with space: the marks on their rows, the count in "
          "the title and the footer",
          _scene(("2", "space", "space"), lambda p: len(p.app.marks) == 2,
                 lambda p: rows(p, "#alarm-page") == len(ALARMS))),
    Scene("fork", "F on the needs-human festival: its operations, and the replay check "
          "against version 2 diverging at operation 2, so only Force fork is offered",
          _scene(("3", "F"), lambda p: type(p.app.screen).__name__ == "ForkDialog"
                 and "does NOT" in str(p.app.screen.query_one("#replay", Static).content),
                 lambda p: rows(p, "#execution-page") > 0, ("feed", "actions"))),
    Scene("selection", "m in the dead letters: a selection by query previewed (how many "
          "match, the first of them) before anything runs",
          _selection(run=False)),
    Scene("bulk-progress", "the batch run on that selection: done, failed, left, each "
          "failure with its reason, and cancel",
          _selection(run=True)),
]
SIZES = {"": SIZE, "-80x24": SMALL}  # screenshot name suffix: terminal size
