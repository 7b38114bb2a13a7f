"""What the console knows: a snapshot merged with deltas. Pure, no Textual.

The console never holds everything: it keeps the most urgent alarms the server
sent (bounded), the executions it was told about, a bounded event log and a
short history of fire and failure counts for the sparklines.

It also counts, per kind of listing (`KINDS`), the frames that changed something of
that kind (`versions`): a view re-queries the window it shows from the server when
the version of its kind moved since its last query. Rows in a delta only say what
changed; where a row now belongs in a view's order (or whether it belongs at all,
or which rows came in instead) only the server knows.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

from alarmtop.tui.formatting import urgency

MAX_ALARMS = 500
MAX_EXECUTIONS = 500
MAX_EVENTS = 1000
HISTORY = 60
KINDS = ("alarms", "executions", "objects", "faults", "audit", "events", "nodes")
# Event types by prefix, and the listings whose rows they change.
EVENT_KINDS = (("alarm.", ("alarms", "objects")), ("object.", ("objects",)),
               ("socket.", ("objects",)), ("execution.", ("executions", "objects")),
               ("operator.", ("audit",)), ("fault.", ("faults",)))


def kinds_touched(frame: dict[str, Any], faults_before: list[dict[str, Any]],
                  nodes_before: Any = None) -> set[str]:
    """The listings a frame may have changed (a snapshot: all of them). The fleet's
    nodes changed when the node summary the frame counts did (`nodes_before`)."""
    kind = frame.get("type")
    if kind == "snapshot":
        return set(KINDS)
    if kind != "delta":
        return set()
    touched: set[str] = set()
    if frame.get("alarms") or frame.get("alarms_changed"):
        touched |= {"alarms", "objects"}
    if frame.get("executions") or frame.get("executions_changed"):
        touched |= {"executions", "objects"}
    if "faults" in frame and frame["faults"] != faults_before:
        touched.add("faults")
    if "counts" in frame and (frame["counts"] or {}).get("nodes") != nodes_before:
        touched.add("nodes")
    for ev in frame.get("events", []):
        touched.add("events")
        kind_of = str(ev.get("type", ""))
        for prefix, kinds in EVENT_KINDS:
            if kind_of.startswith(prefix):
                touched.update(kinds)
    return touched


@dataclass
class ConsoleState:
    role: str | None = None
    connected: bool = False
    status: str = "connecting"
    now_ms: int = 0
    seq: int = 0
    events_total: int = 0  # how many events ever arrived (the log itself is bounded)
    _frame_now: int = 0
    _frame_at: float | None = None
    counts: dict[str, Any] = field(default_factory=dict)
    alarms: dict[str, dict[str, Any]] = field(default_factory=dict)
    executions: dict[str, dict[str, Any]] = field(default_factory=dict)
    faults: list[dict[str, Any]] = field(default_factory=list)
    events: collections.deque[dict[str, Any]] = field(
        default_factory=lambda: collections.deque(maxlen=MAX_EVENTS))
    fires: collections.deque[int] = field(
        default_factory=lambda: collections.deque([0] * HISTORY, maxlen=HISTORY))
    failures: collections.deque[int] = field(
        default_factory=lambda: collections.deque([0] * HISTORY, maxlen=HISTORY))
    lateness: collections.deque[int] = field(  # worst start lateness (ms) per delta
        default_factory=lambda: collections.deque([0] * HISTORY, maxlen=HISTORY))
    versions: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))

    def advance_local(self, monotonic_s: float) -> None:
        """Move `now_ms` on by the local time passed since the last frame."""
        if self._frame_at is not None:
            self.now_ms = self._frame_now + int((monotonic_s - self._frame_at) * 1000)

    def apply(self, frame: dict[str, Any], monotonic_s: float | None = None) -> bool:
        """Merge one frame; True when something visible changed."""
        for touched in kinds_touched(frame, self.faults, self.counts.get("nodes")):
            self.versions[touched] += 1
        if frame.get("at_ms"):
            self._frame_now, self._frame_at = int(frame["at_ms"]), monotonic_s
        kind = frame.get("type")
        if kind == "welcome":
            self.role, self.connected, self.status = frame.get("role"), True, "connected"
            return True
        if kind == "snapshot":
            self.alarms = {r["object"]: r for r in frame.get("alarms", [])}
            self.executions = {r["execution_id"]: r for r in frame.get("executions", [])}
            self._common(frame)
            return True
        if kind == "delta":
            for row in frame.get("alarms", []):
                if row.get("state") == "none":
                    self.alarms.pop(row["object"], None)
                else:
                    self.alarms[row["object"]] = row
            for row in frame.get("executions", []):
                self.executions[row["execution_id"]] = row
            self.events.extend(frame.get("events", []))
            self.events_total += len(frame.get("events", []))
            self.fires.append(int(frame.get("fires", 0)))
            self.failures.append(int(frame.get("failures", 0)))
            self.lateness.append(max((int(e["data"].get("lateness_ms") or 0)
                                      for e in frame.get("events", [])
                                      if e.get("type") == "alarm.fired"), default=0))
            self._common(frame)
            self._trim()
            return True
        return False

    def _common(self, frame: dict[str, Any]) -> None:
        self.now_ms = int(frame.get("at_ms") or self.now_ms)
        self.seq = int(frame.get("seq") or self.seq)
        self.counts = frame.get("counts") or self.counts
        self.faults = frame.get("faults", self.faults)

    def _trim(self) -> None:
        if len(self.alarms) > MAX_ALARMS:
            keep = sorted(self.alarms.values(), key=urgency)[:MAX_ALARMS]
            self.alarms = {r["object"]: r for r in keep}
        if len(self.executions) > MAX_EXECUTIONS:
            keep = sorted(self.executions.values(), key=lambda r: -(r.get("updated_ms") or 0))
            self.executions = {r["execution_id"]: r for r in keep[:MAX_EXECUTIONS]}
