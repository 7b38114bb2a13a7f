"""Pure formatting for the console: durations, counts, states, sparklines.

No Textual in here, so every rule about what an operator reads is unit-tested.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

STATE_LABEL = {"dead": "DEAD", "retrying": "RETRYING", "running": "RUNNING",
               "pending": "PENDING", "near": "NEAR-EXH"}
STATE_STYLE = {"DEAD": "bold white on red", "NEAR-EXH": "bold black on yellow",
               "RETRYING": "bold yellow", "RUNNING": "bold cyan", "PENDING": "green",
               "NEEDS-HUMAN": "bold white on magenta"}
EXEC_STYLE = {"needs_human": "bold white on magenta", "failed": "bold red",
              "timed_out": "bold red", "aborted": "red", "running": "bold cyan",
              "suspended": "yellow", "succeeded": "green"}
SAGA_MARK = {"compensated": "✓", "resolved": "✎", "failed": "✗", "compensating": "…",
             "pending": "·", "kept": "●"}
# kept: the saga ended without compensating the entry (its effect stands, as meant).
SAGA_STYLE = {"compensated": "green", "resolved": "cyan", "failed": "bold red",
              "compensating": "yellow", "pending": "", "kept": "blue"}
SPARK = "▁▂▃▄▅▆▇█"
# After a state or status: the alarm or execution is paused (its state is unchanged).
PAUSED_MARK = " ‖"


def duration(ms: float | None) -> str:
    """Compact and signed the way `top` users read it: 0.4s, 3m05s, 2h10m, 3d4h."""
    if ms is None:
        return "-"
    sign = "-" if ms < 0 else ""
    s = abs(ms) / 1000
    if s < 10:
        return f"{sign}{s:.1f}s"
    if s < 60:
        return f"{sign}{int(s)}s"
    m, s = divmod(int(s), 60)
    if m < 60:
        return f"{sign}{m}m{s:02d}s"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{sign}{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{sign}{d}d{h}h"


def relative(at_ms: int | None, now_ms: int) -> str:
    """'in 3.1s' for the future, '2m05s ago' for the past, '-' for nothing."""
    if at_ms is None:
        return "-"
    delta = at_ms - now_ms
    if abs(delta) < 50:
        return "now"
    return f"in {duration(delta)}" if delta > 0 else f"{duration(-delta)} ago"


def ago(at_ms: int | None, now_ms: int) -> str:
    """`relative` for a time that has passed: a change the server made a moment after
    the console's clock last heard from it reads "now", not "in 0.1s"."""
    return relative(None if at_ms is None else min(at_ms, now_ms), now_ms)


def count(n: int) -> str:
    return f"{n:,}"


def alarm_label(row: dict[str, Any]) -> str:
    if row.get("near_exhaustion"):
        return STATE_LABEL["near"]
    return STATE_LABEL.get(str(row.get("state")), str(row.get("state", "?")).upper())


def urgency(row: dict[str, Any]) -> tuple[int, int, int]:
    """Sort key: dead, near exhaustion, retrying, running, then soonest due."""
    label = alarm_label(row)
    rank = {"DEAD": 0, "NEAR-EXH": 1, "RETRYING": 2, "RUNNING": 3}.get(label, 4)
    due = row.get("next_attempt_ms") or row.get("scheduled_ms") or 0
    return (rank, -int(row.get("retry_count") or 0), int(due))


def retry_text(row: dict[str, Any]) -> str:
    return f"{row.get('retry_count', 0)}/{row.get('max_retries', '?')}"


def first_line(text: str | None, width: int = 60) -> str:
    if not text:
        return "-"
    line = text.strip().splitlines()[0] if text.strip() else "-"
    return line if len(line) <= width else line[: width - 1] + "…"


def shorten_name(text: str, width: int) -> str:
    """A name ("Class/name", "handler/id") cut to `width` by what tells it apart from its
    neighbours: the part after the slash stays whole and the class gives way
    ("LeaseLed…/tenant-42"); when even that does not fit, or there is no slash, the
    middle goes ("tenant-4…0442"). Cut at the end, five tenants of one ledger all read
    "LeaseLedger/tenan…" at 80 columns."""
    if len(text) <= width or width < 2:
        return text[:max(width, 0)]
    head, slash, tail = text.rpartition("/")
    room = width - len(tail) - 1  # what is left for the part before the slash
    if slash and room >= 2:
        return f"{head[:room - 1]}…/{tail}"
    if slash and width >= len(tail) + 2:
        return f"…/{tail}"
    keep = width - 1
    front = keep - keep // 2
    return f"{text[:front]}…{text[len(text) - keep // 2:]}" if keep // 2 else text[:front] + "…"


def alarm_cells(row: dict[str, Any], now_ms: int,
                error_width: int = 48) -> tuple[str, str, str, str, str, str]:
    """state, object, due in, retry, next try, last error (cut to `error_width`)."""
    state = alarm_label(row)
    due = "-" if state in ("DEAD", "RETRYING", "NEAR-EXH") else relative(
        row.get("next_attempt_ms"), now_ms)
    nxt = relative(row.get("next_attempt_ms"), now_ms) if state in (
        "RETRYING", "NEAR-EXH") else "-"
    return (paused_label(state, row), str(row.get("object", "?")), due, retry_text(row), nxt,
            first_line(row.get("last_error"), error_width))


def paused_label(label: str, row: dict[str, Any]) -> str:
    """A state or status label, marked when the row is paused."""
    return label + PAUSED_MARK if row.get("paused") else label


def saga_line(stack: Sequence[dict[str, Any]]) -> str:
    """notify_partners ✓ compensated | open_viewing_page ✗ failed | reserve · pending"""
    return " | ".join(f"{e.get('name')} {SAGA_MARK.get(str(e.get('state')), '?')} "
                      f"{e.get('state')}" for e in stack) or "-"


def sparkline(values: Sequence[float], width: int = 12) -> str:
    vals = list(values)[-width:]
    if not vals:
        return ""
    top = max(vals) or 1
    return "".join(SPARK[min(len(SPARK) - 1, int(v / top * (len(SPARK) - 1)))] for v in vals)


def execution_cells(row: dict[str, Any], now_ms: int,
                    width: int = 160) -> tuple[str, str, str, str]:
    """status, execution, what it waits on / its saga (cut to `width`), updated."""
    status = str(row.get("status", "?"))
    label = "NEEDS-HUMAN" if status == "needs_human" else status.upper()
    detail = row.get("blocked_on") or ""
    if row.get("saga") and status in ("needs_human", "failed", "aborted"):
        # What failed, then the stack; the failure's own message (in parentheses) is in
        # the detail pane: at the front it pushed the stack out of the column.
        detail = f"{detail.split(' (', 1)[0]}  saga: {saga_line(row['saga'])}".strip()
    if row.get("paused"):
        detail = f"paused; {detail}" if detail else "paused"
    return (paused_label(label, row), f"{row.get('name')}/{row.get('execution_id')}",
            first_line(detail, width), ago(row.get("updated_ms"), now_ms))


def object_cells(row: dict[str, Any], now_ms: int,
                 width: int = 40) -> tuple[str, str, str, str, str, str]:
    """object (cut to `width`), where, storage, sockets, alarm, alarm state."""
    return (first_line(str(row.get("object", "?")), width),
            "resident" if row.get("resident") else "hibernated",
            "yes" if row.get("storage", True) else "no", str(row.get("sockets", 0)),
            relative(row.get("alarm_ms"), now_ms),
            str(row.get("alarm_state") or "-") + (PAUSED_MARK if row.get("alarm_paused")
                                                 else ""))


def clock_text(ms: int | None) -> str:
    """HH:MM:SS (UTC) of a time in ms, as an audit or event row shows it."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%H:%M:%S")


def paused_text(row: dict[str, Any], now_ms: int) -> str:
    """A paused alarm in words: since when, who paused it and why when the detail
    says (`paused_by`, `paused_reason`), and what the pause means."""
    since = row.get("paused_ms")
    out = "PAUSED" + (f" since {clock_text(since)} UTC ({relative(since, now_ms)})"
                      if since is not None else "")
    if row.get("paused_by"):
        out += f" by {row['paused_by']}"
    if row.get("paused_reason"):
        out += f": {first_line(row['paused_reason'], 80)}"
    elif "paused_reason" in row:
        out += ", no reason given"
    return out + "\nnothing fires until it is resumed (p); its retry count is kept"


def audit_target(row: dict[str, Any]) -> str:
    """A callback's opaque id is shown as the execution it belongs to."""
    if row.get("execution_id"):
        return f"{row['execution_id']} (callback)"
    return str(row.get("target") or "-")


def audit_cells(row: dict[str, Any],
                width: int = 40) -> tuple[str, str, str, str, str, str, str, str]:
    """when, node (which ran it), who, role, action, target, ok, reason (cut to `width`;
    a snooze's says by how much first)."""
    raw = row.get("detail")
    detail: dict[str, Any] = raw if isinstance(raw, dict) else {}
    reason = row.get("reason")
    if isinstance(detail.get("by_ms"), int):
        reason = f"by {duration(detail['by_ms'])}" + (f": {reason}" if reason else "")
    return (clock_text(row.get("at_ms")), str(row.get("node") or "-"),
            str(row.get("actor", "?")), row.get("role") or "-",
            str(row.get("action", "?")), audit_target(row),
            "ok" if row.get("ok") else "refused", first_line(reason, width))


def fault_cells(row: dict[str, Any],
                width: int = 30) -> tuple[str, str, str, str, str, str]:
    """id, target, kind, remaining, triggered, step/point/seconds (cut to `width`)."""
    extra = " ".join(str(v) for v in (row.get("step"), row.get("point"), row.get("seconds"))
                     if v)
    return (str(row.get("id")), str(row.get("target")), str(row.get("kind")),
            "always" if row.get("remaining") is None else str(row["remaining"]),
            str(row.get("triggered", 0)), first_line(extra, width) if extra else "-")


def pretty_json(value: Any, max_lines: int = 12) -> tuple[str, int]:
    """Indented JSON of `value` cut to `max_lines` (an ellipsis line says how many more),
    and how many lines the whole has."""
    lines = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False,
                       default=str).splitlines()
    if len(lines) <= max_lines:
        return "\n".join(lines), len(lines)
    shown = lines[:max_lines - 1]
    return "\n".join([*shown, f"… {len(lines) - len(shown)} more lines"]), len(lines)


def outcome(detail: dict[str, Any]) -> str:
    """What an execution came to, beyond its status: the result's own status when it has
    one (a festival "cancelled" or "streaming"), else the error, else a short result."""
    result, error = detail.get("result"), detail.get("error")
    if isinstance(result, dict):
        for key in ("status", "outcome", "state"):
            if isinstance(result.get(key), str):
                return str(result[key])
    if error:
        return first_line(f"{error.get('ErrorType')}: {error.get('ErrorMessage')}", 80)
    if result is None:
        return "-"
    return first_line(json.dumps(result, ensure_ascii=False, default=str), 60)


def event_time(ev: dict[str, Any]) -> str:
    """HH:MM:SS.mmm of a history event's ISO `EventTimestamp` ('-' when it has none)."""
    stamp = ev.get("EventTimestamp")
    if not isinstance(stamp, str):
        return "-"
    try:
        at = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp[:12]
    return at.strftime("%H:%M:%S.%f")[:12]
