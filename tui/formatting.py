"""Pure formatting for the console: durations, counts, states, sparklines.

No Textual in here, so every rule about what an operator reads is unit-tested.
"""

from __future__ import annotations

from collections.abc import Sequence
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
             "pending": "·"}
SPARK = "▁▂▃▄▅▆▇█"


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


def alarm_cells(row: dict[str, Any], now_ms: int) -> tuple[str, str, str, str, str, str]:
    """state, object, due in, retry, next try, last error."""
    state = alarm_label(row)
    due = "-" if state in ("DEAD", "RETRYING", "NEAR-EXH") else relative(
        row.get("next_attempt_ms"), now_ms)
    nxt = relative(row.get("next_attempt_ms"), now_ms) if state in (
        "RETRYING", "NEAR-EXH") else "-"
    return (state, str(row.get("object", "?")), due, retry_text(row), nxt,
            first_line(row.get("last_error"), 48))


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


def execution_cells(row: dict[str, Any], now_ms: int) -> tuple[str, str, str, str]:
    """status, execution, what it waits on / its saga, updated."""
    status = str(row.get("status", "?"))
    label = "NEEDS-HUMAN" if status == "needs_human" else status.upper()
    detail = row.get("blocked_on") or ""
    if row.get("saga") and status in ("needs_human", "failed", "aborted"):
        detail = f"{detail}  saga: {saga_line(row['saga'])}".strip()
    return (label, f"{row.get('name')}/{row.get('execution_id')}", first_line(detail, 160),
            relative(row.get("updated_ms"), now_ms))
