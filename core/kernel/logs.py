"""Where alarmtop's log records go: plain lines or JSON lines on stderr.

What the records say (message and fields) is `model.log_records`.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any


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
    """Send alarmtop's logs to stderr, as JSON lines when `json_lines` is true.

    Plain lines carry the message only: it holds the facts the fields hold."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("alarmtop")
    root.handlers[:] = [handler]
    root.setLevel(level)
