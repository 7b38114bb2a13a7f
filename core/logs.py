"""Structured logs on the standard `logging` module.

Records carry their fields in `record.alarmtop` (a dict). `JsonFormatter` writes
one JSON object per line with those fields at the top level, so alerting can key
on, say, `event == "alarm.failed" and last_attempt`.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

ALARM_LOG = logging.getLogger("alarmtop.alarms")
RUNTIME_LOG = logging.getLogger("alarmtop.runtime")


def log_event(logger: logging.Logger, level: int, message: str, **fields: Any) -> None:
    logger.log(level, message, extra={"alarmtop": fields})


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update(getattr(record, "alarmtop", {}))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure_logging(json_lines: bool = False, level: int = logging.INFO) -> None:
    """Send alarmtop's logs to stderr, as JSON lines when `json_lines` is true."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s: %(message)s %(alarmtop)s", defaults={"alarmtop": ""}))
    root = logging.getLogger("alarmtop")
    root.handlers[:] = [handler]
    root.setLevel(level)
