"""Bulk actions as the console knows them: actions, selections, batches. Pure.

A bulk action runs on the server as a durable batch (`bulk_start`): on keys the
operator marked, or on what a selection by query matched when it was confirmed.
The console follows each batch through the `bulk.progress` and `bulk.finished`
events of the feed's event tail and through `bulk` / `bulks` queries (after a
reconnect too); `BulkBook` merges both. Events and answers can arrive out of
order, so counts never go back and an ended batch never runs again.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from alarmtop.tui.formatting import count


@dataclass(frozen=True)
class BulkAction:
    action: str  # the server's name
    label: str  # what the operator picks: "Re-arm"
    done: str  # what a finished item is: "re-armed"
    note: bool = False  # needs a note (resolve)
    applies: tuple[str, ...] = ()  # the states or statuses it is for ("" in none: any)


ACTIONS: dict[str, tuple[BulkAction, ...]] = {
    "alarms": (
        BulkAction("rearm", "Re-arm", "re-armed"),
        BulkAction("fire_now", "Fire now", "fired"),
        BulkAction("clear_dead_letter", "Clear dead letter", "cleared", applies=("dead",)),
        BulkAction("pause_alarm", "Pause alarm", "paused"),
        BulkAction("resume_alarm", "Resume alarm", "resumed"),
        BulkAction("clear_faults", "Clear faults", "cleared of faults"),
    ),
    "executions": (
        BulkAction("retry_compensation", "Retry compensation", "retried",
                   applies=("needs_human",)),
        BulkAction("resolve", "Resolve by hand", "resolved", note=True,
                   applies=("needs_human",)),
        BulkAction("abort", "Abort", "aborted"),
        BulkAction("pause", "Pause", "paused"),
        BulkAction("resume", "Resume", "resumed"),
        BulkAction("redrive", "Redrive", "redriven", applies=("failed", "timed_out")),
        BulkAction("clear_faults", "Clear faults", "cleared of faults"),
    ),
}
STATES = {"alarms": ("pending", "retrying", "dead", "paused"),
          "executions": ("running", "suspended", "needs_human", "failed", "timed_out",
                         "aborted", "succeeded")}
LIVE = frozenset({"preparing", "running", "cancelling"})  # then done, failed or cancelled
MAX_FAILURES = 500  # kept per batch: the first ones (the rest are counted)


def action_of(kind: str, action: str) -> BulkAction:
    for a in ACTIONS.get(kind, ()):
        if a.action == action:
            return a
    raise ValueError(f"{action!r} is not a bulk action on {kind}; actions: "
                     f"{', '.join(a.action for a in ACTIONS.get(kind, ()))}")


# -- when: a time in a selection -----------------------------------------------------------

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(text: str) -> int:
    """"90s", "1h30m", "2.5m", "500ms" in ms; ValueError saying how to write one."""
    s = text.strip().lower().replace(" ", "")
    if not s or _PART.sub("", s):
        raise ValueError(f"{text.strip()!r} is not a duration: write e.g. 30s, 5m, 1h30m, 2d")
    return round(sum(float(n) * _UNITS[u] for n, u in _PART.findall(s)))


def parse_when(text: str, now_ms: int) -> int | None:
    """A time in a selection's range: empty (no bound), "now", "-10m" or "10m ago" (in
    the past), "+2h", "in 2h" or "2h" (ahead), or an ISO time (UTC unless it says)."""
    s = text.strip().lower()
    if not s:
        return None
    if s == "now":
        return now_ms
    if s.endswith("ago"):
        return now_ms - parse_duration(s[:-3])
    if s.startswith("-"):
        return now_ms - parse_duration(s[1:])
    ahead = s[1:] if s.startswith("+") else s[2:] if s.startswith("in") else s
    try:
        return now_ms + parse_duration(ahead)
    except ValueError:
        pass
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text.strip()!r} is not a time: write now, -10m (ago), +2h (ahead) "
                         "or 2027-01-15T08:00 (UTC)") from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return int(at.timestamp() * 1000)


def selection(kind: str, fields: dict[str, str], now_ms: int) -> dict[str, Any]:
    """The server's selection dict from the query form's fields (as typed); ValueError
    naming the field that is wrong."""
    out: dict[str, Any] = {"kind": kind}
    state = fields.get("state", "").strip()
    if state:
        if state not in STATES[kind]:
            raise ValueError(f"state is one of {', '.join(STATES[kind])}, not {state!r}")
        out["state" if kind == "alarms" else "status"] = state
    for name in ("class", "name", "error"):
        if fields.get(name, "").strip():
            out[name] = fields[name].strip()
    for bound in ("due", "updated") if kind == "alarms" else ("updated",):
        lo, hi = (_when(fields, f"{bound}_{end}", now_ms) for end in ("from", "to"))
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"{bound}: 'from' is after 'to'")
        for end, value in (("from", lo), ("to", hi)):
            if value is not None:
                out[f"{bound}_{end}_ms"] = value
    return out


def _when(fields: dict[str, str], name: str, now_ms: int) -> int | None:
    try:
        return parse_when(fields.get(name, ""), now_ms)
    except ValueError as exc:
        raise ValueError(f"{name.replace('_', ' ')}: {exc}") from None


# -- batches -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    batch_id: str
    action: str = "?"
    total: int = 0
    done: int = 0
    failed: int = 0
    left: int = 0
    status: str = "running"
    failures: tuple[tuple[str, str], ...] = ()  # (key, error), first ones first
    kind: str | None = None
    cancelled: int = 0  # items a cancel left undone

    @property
    def live(self) -> bool:
        return self.status in LIVE

    @property
    def finished_items(self) -> int:
        return self.done + self.failed

    def merged(self, data: dict[str, Any]) -> Batch:
        """This batch with what an event or an answer says about it."""
        status = str(data.get("status") or self.status)
        if not self.live and status in LIVE:
            status = self.status  # an old answer does not restart an ended batch
        total = _int(data, "total", self.total)
        done = max(self.done, _int(data, "done", 0))
        failed = max(self.failed, _int(data, "failed", 0))
        cancelled = max(self.cancelled, _int(data, "cancelled", 0))
        # Counts taken from the newest of what came: what is left follows from them.
        left = total - done - failed - cancelled if total else _int(data, "left", self.left)
        return replace(self, action=str(data.get("action") or self.action), total=total,
                       done=done, failed=failed, left=max(0, left), status=status,
                       cancelled=cancelled,
                       failures=_failures(_failures(self.failures, data.get("failures")),
                                          data.get("recent_failures")),
                       kind=data.get("kind") or self.kind)


def _int(data: dict[str, Any], name: str, default: int) -> int:
    value = data.get(name)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else default


def _failures(have: tuple[tuple[str, str], ...], new: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(new, list):
        return have
    seen = {k for k, _ in have}
    out = list(have)
    for item in new:
        if not isinstance(item, dict):
            continue
        key = _key_text(item.get("key"))
        if key not in seen and len(out) < MAX_FAILURES:
            seen.add(key)
            out.append((key, str(item.get("error") or "?")))
    return tuple(out)


def _key_text(key: Any) -> str:
    if isinstance(key, list):
        return "/".join(str(k) for k in key)
    return str(key)


def progress_text(b: Batch) -> str:
    """"rearm b7: 412 of 1,000 done, 3 failed, 585 left (running)"."""
    text = (f"{b.action} {b.batch_id}: {count(b.done)} of {count(b.total)} done, "
            f"{count(b.failed)} failed, {count(b.left)} left")
    if b.cancelled:
        text += f", {count(b.cancelled)} cancelled"
    return f"{text} ({b.status})"


def batch_id_of(data: Any) -> str | None:
    """The batch id an event's data (`batch_id`) or a `bulk` / `bulk_start` answer (the
    batch row: `id`) names; None when it names none."""
    if not isinstance(data, dict):
        return None
    bid = data.get("batch_id") or data.get("id")
    return bid if isinstance(bid, str) and bid else None


@dataclass
class BulkBook:
    """Every batch this console has heard of, by id (bounded: the newest `keep`)."""

    keep: int = 50
    batches: dict[str, Batch] = field(default_factory=dict)
    # Starts sent without an answer (the connection dropped, the deadline passed while
    # the server went on): their client token, by what they asked.
    unanswered: dict[str, str] = field(default_factory=dict)

    def start_token(self, args: dict[str, Any]) -> str:
        """The client token for a `bulk_start` of `args`: a new one, or the one of the
        same start sent before without an answer, so that the server answers with that
        batch (if it began) instead of starting a second one over the same items."""
        asked = json.dumps(args, sort_keys=True, default=str)
        return self.unanswered.setdefault(asked, f"console-{uuid.uuid4().hex}")

    def start_answered(self, args: dict[str, Any]) -> None:
        """The start of `args` was answered (started, or refused): its token is spent."""
        self.unanswered.pop(json.dumps(args, sort_keys=True, default=str), None)

    def apply(self, data: dict[str, Any]) -> Batch | None:
        """Merge an event's data or a `bulk` answer; the batch as it is now."""
        bid = batch_id_of(data)
        if bid is None:
            return None
        batch = self.batches.pop(bid, None) or Batch(bid)
        self.batches[bid] = batch = batch.merged(data)
        while len(self.batches) > self.keep:
            oldest = next((k for k, v in self.batches.items() if not v.live),
                          next(iter(self.batches)))
            del self.batches[oldest]
        return batch

    def apply_event(self, event: dict[str, Any]) -> Batch | None:
        kind = str(event.get("type", ""))
        if not kind.startswith("bulk."):
            return None
        data = dict(event.get("data") or {})
        if kind == "bulk.finished" and "status" not in data:
            data["status"] = "done"
        return self.apply(data)

    def running(self) -> list[Batch]:
        return [b for b in self.batches.values() if b.live]

    def latest(self) -> Batch | None:
        """The batch to show first: the newest running one, else the newest."""
        live = self.running()
        if live:
            return live[-1]
        return next(reversed(self.batches.values()), None)
