"""The worker process of `isolation="process"`: one invocation at a time, as the parent
asks, its handler's two calls to the service sent back over the connection.

Messages (tuples) on the duplex connection:

- parent -> worker: `("invoke", request)` (a dict: target, paths, durable, payload,
  context), `("stop",)`;
- worker -> parent: `("call", method, args)` (answered `("ok", answer)` or
  `("error", AwsServiceError.to_dict())`), `("log", line)` (a line the handler
  printed, or a log record of the SDK's loggers as the JSON line Lambda writes),
  `("done", output)`, `("raised", error_object)`.

A handler that ends its process (`os._exit`, a crash) closes the connection: the
parent sees the invocation fail as AWS records it (`Runtime.ExitError`) and
starts another worker for the next one.
"""

from __future__ import annotations

import io
import json
import logging
import sys
import threading
import time
from typing import Any

from alarmtop.core.kernel.executions.aws import sdk
from alarmtop.core.kernel.executions.aws.functions import load_target
from alarmtop.core.kernel.executions.aws.invoker import call_plain
from alarmtop.core.model.aws_errors import AwsServiceError
from alarmtop.core.model.execution_errors import error_object

_RECORD_FIELDS = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message"}


class _Channel:
    """The worker's side of the connection, shared by the SDK's threads."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self._send = threading.Lock()
        self._call = threading.Lock()

    def send(self, *message: Any) -> None:
        with self._send:
            self.conn.send(message)

    def call(self, method: str, *args: Any) -> dict[str, Any]:
        with self._call:  # one request at a time: the answer is the next message
            self.send("call", method, args)
            kind, answer = self.conn.recv()
        if kind == "error":
            raise AwsServiceError.from_dict(answer)
        return dict(answer)


class _Lines(io.TextIOBase):
    def __init__(self, channel: _Channel) -> None:
        self._channel = channel
        self._part = ""

    def write(self, text: str) -> int:
        self._part += text
        *lines, self._part = self._part.split("\n")
        for line in lines:
            self._channel.send("log", line)
        return len(text)


class _Records(logging.Handler):
    """The SDK's log records with an execution ARN, as Lambda's JSON log lines."""

    def __init__(self, channel: _Channel) -> None:
        super().__init__(logging.INFO)
        self._channel = channel

    def emit(self, record: logging.LogRecord) -> None:
        if hasattr(record, "executionArn"):
            extra = {k: v for k, v in record.__dict__.items() if k not in _RECORD_FIELDS}
            self._channel.send("log", json.dumps(
                {"level": record.levelname, "message": record.getMessage(), **extra},
                default=str))


def _invoke(request: dict[str, Any], channel: _Channel) -> dict[str, Any]:
    for path in reversed(request.get("paths") or []):
        if path not in sys.path:
            sys.path.insert(0, path)
    handler = load_target(request["target"])
    ctx = request["context"]
    deadline = float(ctx["deadline_s"])
    context = sdk.LambdaContext(ctx["function"], ctx["version"], ctx["arn"],
                                ctx["request_id"],
                                lambda: max(0, round((deadline - time.time()) * 1000)))
    payload = request["payload"]
    if not request["durable"]:
        return call_plain(handler, payload, context)
    out = handler(sdk.invocation_event(payload, sdk.InProcessClient(channel.call)), context)
    return dict(out)


def serve(conn: Any) -> None:
    """The worker's loop (the target of its process)."""
    channel = _Channel(conn)
    sys.stdout = _Lines(channel)
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.addHandler(_Records(channel))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message[0] != "invoke":
            return
        try:
            channel.send("done", _invoke(message[1], channel))
        except BaseException as exc:  # the handler raised: the invocation failed
            channel.send("raised", error_object(exc))
