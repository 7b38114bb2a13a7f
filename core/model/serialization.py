"""JSON checks at the edges of an object: arguments, results, stored values."""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

from alarmtop.core.model.errors import InvalidAlarmTime, NotSerializable


def to_json(value: Any, what: str) -> str:
    """Encode `value`, or raise `NotSerializable` naming `what` and the culprit."""
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise NotSerializable(what, str(exc)) from None


def json_copy(value: Any, what: str) -> Any:
    """A deep copy through JSON, so caller and object never share mutable state."""
    return json.loads(to_json(value, what))


def alarm_time_ms(value: Any) -> int:
    """Epoch milliseconds from an int/float or an aware datetime."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidAlarmTime(
                "set_alarm() got a naive datetime; pass an aware one, e.g. "
                "datetime.now(timezone.utc), or epoch milliseconds")
        return round(value.timestamp() * 1000)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidAlarmTime(
            f"set_alarm() takes epoch milliseconds or an aware datetime, not "
            f"{type(value).__name__} {value!r}")
    if not math.isfinite(value) or value < 0 or value > 2**53:
        raise InvalidAlarmTime(f"set_alarm() got {value!r}; use epoch milliseconds "
                               "between 0 and 2**53")
    return round(value)
