"""What the handlers log, as CloudWatch would hold it for one execution.

On Lambda (JSON log format) both what a handler prints and what it logs through the
SDK's loggers reach CloudWatch, and the conformance runner keeps the lines whose
JSON carries the execution's ARN (`durableExecutionArn` or `executionArn`). Here
the handlers run in worker threads of this process: `LogTap` takes the lines
printed to stdout and the log records the SDK's loggers make (as the JSON lines
Lambda would write), in one order, for `LogValidator`.
"""

from __future__ import annotations

import io
import itertools
import json
import logging
import sys
import threading
from types import TracebackType
from typing import Any

_SKIP = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message"}


class _Lines(io.TextIOBase):
    def __init__(self, tap: LogTap) -> None:
        self._tap = tap
        self._part = ""

    def write(self, text: str) -> int:
        with self._tap.lock:
            self._part += text
            *lines, self._part = self._part.split("\n")
        for line in lines:
            self._tap.add(line)
        return len(text)


class _Records(logging.Handler):
    def __init__(self, tap: LogTap) -> None:
        super().__init__(logging.INFO)
        self._tap = tap

    def emit(self, record: logging.LogRecord) -> None:
        if not hasattr(record, "executionArn"):
            return
        extra = {k: v for k, v in record.__dict__.items() if k not in _SKIP}
        self._tap.add(json.dumps({"level": record.levelname, "message": record.getMessage(),
                                  **extra}, default=str))


class LogTap:
    """`with LogTap() as tap:` ... `tap.records(arn)` (see the module docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._lines: list[tuple[int, str]] = []
        self._seq = itertools.count()
        self._stdout: Any = None
        self._handler = _Records(self)
        self._level = logging.WARNING

    def add(self, line: str) -> None:
        if line.strip():
            with self.lock:
                self._lines.append((next(self._seq), line))

    def __enter__(self) -> LogTap:
        self._stdout, sys.stdout = sys.stdout, _Lines(self)  # type: ignore[assignment]
        root = logging.getLogger()
        self._level = root.level
        root.setLevel(logging.INFO)
        root.addHandler(self._handler)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        sys.stdout = self._stdout
        root = logging.getLogger()
        root.removeHandler(self._handler)
        root.setLevel(self._level)

    def records(self, arn: str) -> list[dict[str, Any]]:
        """The execution's lines, as the runner's CloudWatch query returns them."""
        out = []
        with self.lock:
            lines = list(self._lines)
        for seq, line in lines:
            try:
                fields = json.loads(line)
            except ValueError:
                continue
            if isinstance(fields, dict) and arn in (fields.get("durableExecutionArn"),
                                                    fields.get("executionArn")):
                out.append({"message": line, "timestamp": seq, "ingestionTime": seq})
        return out
