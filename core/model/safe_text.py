"""Text and values made safe to store: an odd character must never let a row be
skipped (an audit row above all). Pure."""

from __future__ import annotations

from typing import Any


def safe_text(text: Any) -> str | None:
    """`text` as a string that can always be stored: lone surrogates become U+FFFD."""
    if text is None:
        return None
    out = str(text)
    try:
        out.encode("utf-8")
    except UnicodeEncodeError:
        out = out.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return out


def safe_value(value: Any) -> Any:
    """A JSON-ready copy of `value` with every string made safe to store."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {safe_text(k): safe_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [safe_value(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return safe_text(repr(value))
