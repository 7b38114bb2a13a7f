"""An execution as an operator reads it: pure, from the `execution` query's answer.

Status and outcome first (a cancelled festival and a streaming one both end
SUCCEEDED: the result says which), then input and result as indented JSON (cut
when long), the saga stack with each entry's state, the callbacks with their
ids, and the timestamped history.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from alarmtop.tui.formatting import (
    EXEC_STYLE,
    SAGA_MARK,
    SAGA_STYLE,
    ago,
    event_time,
    first_line,
    outcome,
    pretty_json,
)

EVENT_STYLE = {"Failed": "red", "TimedOut": "red", "Succeeded": "green", "Started": "cyan",
               "Completed": "dim", "Stopped": "red"}
JSON_LINES = 8  # input and result longer than this are cut in the side pane


def event_summary(ev: dict[str, Any]) -> str:
    """What a history event's details say in one line: its error, its retry."""
    kind = str(ev.get("EventType", "?"))
    details = ev.get(f"{kind}Details") or {}
    parts = []
    err = (details.get("Error") or {}).get("Payload") or {}
    if err:
        parts.append(f"{first_line(err.get('ErrorType', ''), 40)}: "
                     f"{first_line(err.get('ErrorMessage', ''), 80)}")
    retry = details.get("RetryDetails") or {}
    if "NextAttemptDelaySeconds" in retry:
        parts.append(f"retry in {retry['NextAttemptDelaySeconds']}s")
    return "  ".join(parts)


def event_style(kind: str) -> str:
    return next((s for suffix, s in EVENT_STYLE.items() if kind.endswith(suffix)), "")


def history_cells(ev: dict[str, Any]) -> tuple[str, str, str, str, str]:
    """#, time, event, name, detail: one history event as a table row."""
    return (str(ev.get("EventId", "?")), event_time(ev), str(ev.get("EventType", "?")),
            str(ev.get("Name") or ev.get("Id") or ""), event_summary(ev) or "-")


def event_line(ev: dict[str, Any]) -> Text:
    num, at, kind, name, summary = history_cells(ev)
    line = Text(f"{num:>4} ", style="dim")
    line.append(f"{at} ", style="dim")
    line.append(f"{kind:<22}", style=event_style(kind))
    line.append(f" {name}")
    if summary != "-":
        line.append(f"  {summary}", style="red" if "Error" in summary or ":" in summary
                    else "yellow")
    return line


def summary_text(d: dict[str, Any], now_ms: int) -> Text:
    out = Text(f"{d.get('name')}/{d['execution_id']}  ", style="bold")
    status = str(d.get("status", "?"))
    out.append(f" {status.upper()} ", style=EXEC_STYLE.get(status, ""))
    out.append(f"  outcome: {outcome(d)}\n")
    out.append(f"v{d.get('version', '?')}  invocations {d.get('invocations', '?')}  "
               f"started {ago(d.get('created_ms'), now_ms)}  "
               f"updated {ago(d.get('updated_ms'), now_ms)}  "
               f"ended {ago(d.get('ended_ms'), now_ms)}\n", style="dim")
    if d.get("paused"):
        out.append(f"PAUSED ({d.get('paused_reason') or 'no reason given'}, "
                   f"{ago(d.get('paused_ms'), now_ms)}): it runs nothing until resumed "
                   "(p); its timers keep their due times\n", style="bold magenta")
    if d.get("redrives") or d.get("forked_from"):
        out.append(_lineage(d) + "\n", style="cyan")
    if d.get("blocked_on"):
        out.append(f"waiting on: {d['blocked_on']}\n", style="yellow")
    if d.get("human_hold"):
        out.append(f"held for a human: {d['human_hold']}\n", style="magenta")
    if d.get("error"):
        err = d["error"]
        out.append(f"error: {err.get('ErrorType')}: {err.get('ErrorMessage')}\n", style="red")
    return out


def _lineage(d: dict[str, Any]) -> str:
    parts = []
    if d.get("redrives"):
        parts.append(f"redriven {d['redrives']} time{'s' if d['redrives'] != 1 else ''}")
    source = d.get("forked_from")
    if isinstance(source, dict):
        parts.append(f"forked from {source.get('ExecutionId')} at operation "
                     f"{source.get('FromOperationId')}")
    elif source:
        parts.append(f"forked from {source}")
    return "; ".join(parts)


def json_text(label: str, value: Any, max_lines: int | None = JSON_LINES) -> Text:
    """`label` and the indented JSON of `value`, cut to `max_lines` (None: whole)."""
    body, lines = pretty_json(value, max_lines or 10**9)
    out = Text(f"{label}", style="bold")
    out.append(f"  ({lines} line{'s' if lines != 1 else ''})\n" if lines > 1 else "\n",
               style="dim")
    for line in body.splitlines():
        out.append(f"  {line}\n", style="dim" if line.startswith("… ") else "")
    return out


def saga_text(saga: list[dict[str, Any]]) -> Text:
    out = Text("saga stack (top first)\n", style="bold")
    if not saga:
        out.append("  no compensation pushed\n", style="dim")
    for e in saga:
        state = str(e.get("state"))
        out.append(f"  {SAGA_MARK.get(state, '?')} {e.get('name', '?'):<24} {state}",
                   style=SAGA_STYLE.get(state, ""))
        if e.get("note"):
            out.append(f"  note: {e['note']}", style="cyan")
        if e.get("error"):
            out.append(f"  {first_line(e['error'], 70)}", style="red")
        out.append("\n")
    return out


def callbacks_text(callbacks: list[dict[str, Any]]) -> Text:
    out = Text("callbacks\n", style="bold")
    if not callbacks:
        out.append("  none\n", style="dim")
    for c in callbacks:
        out.append(f"  {c.get('name') or '-':<28} {c.get('status', '?'):<10} "
                   f"{c.get('kind', ''):<14} ")
        out.append(f"{c.get('callback_id')}\n", style="dim")
    return out


def callback_cells(c: dict[str, Any]) -> tuple[str, str, str, str]:
    """name, status, kind, id: one callback as a row of the detail's table."""
    return (str(c.get("name") or "-"), str(c.get("status", "?")), str(c.get("kind", "")),
            str(c.get("callback_id")))


def detail_text(d: dict[str, Any] | None, now_ms: int) -> Text:
    """The whole execution for the side pane: every history event, the pane scrolls."""
    if d is None:
        return Text("select an execution to see its timeline and saga", style="dim")
    out = summary_text(d, now_ms)
    out.append("\n")
    out.append_text(json_text("input", d.get("input")))
    out.append_text(json_text("result", d.get("result")))
    out.append("\n")
    out.append_text(saga_text(d.get("saga") or []))
    out.append("\n")
    out.append_text(callbacks_text(d.get("callbacks") or []))
    history = d.get("history") or []
    out.append(f"\nhistory ({len(history)} events; enter: full detail)\n", style="bold")
    for ev in history:
        out.append_text(event_line(ev))
        out.append("\n")
    return out
