"""A Lambda runtime-emulator shim for the tests: a handler of the real AWS SDK in a
process of its own, behind the emulator's invoke contract, as `register_lambda(...,
endpoint=...)` calls it.

Run as ``python -m tests.server.lambda_shim PORT_FILE MODULE:HANDLER CALLS_FILE``: it
serves `POST /2015-03-31/functions/function/invocations` on a free port of
127.0.0.1 (written to PORT_FILE once it listens), calls the handler with the JSON
body and a Lambda context, and answers its JSON value (or, if it raises, the
`{errorType, errorMessage}` the emulator answers). The handler's SDK checkpoints
through boto3's Lambda client, configured by the environment as on Lambda
(`AWS_ENDPOINT_URL_LAMBDA`, `AWS_ACCESS_KEY_ID`, ...); each call it makes to the
Lambda API is appended to CALLS_FILE.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
import traceback
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3

INVOKE_PATH = "/2015-03-31/functions/function/invocations"


class Context:
    """What a Lambda handler's `context` offers."""

    def __init__(self, request_id: str) -> None:
        self.aws_request_id = request_id
        self.function_name = "remote"
        self.function_version = "$LATEST"
        self.invoked_function_arn = "arn:aws:lambda:us-east-1:000000000000:function:remote"
        self.memory_limit_in_mb = 128
        self.log_group_name = "/aws/lambda/remote"
        self.log_stream_name = "shim"
        self._deadline = time.time() + 900

    def get_remaining_time_in_millis(self) -> int:
        return max(0, round((self._deadline - time.time()) * 1000))


def main(argv: list[str]) -> None:
    port_file, target, calls_file = Path(argv[0]), argv[1], Path(argv[2])
    module, _, attr = target.partition(":")
    handler = getattr(importlib.import_module(module), attr)
    boto3.setup_default_session()
    assert boto3.DEFAULT_SESSION is not None

    def record(event_name: str, **_: Any) -> None:
        with calls_file.open("a") as f:
            f.write(event_name.rsplit(".", 1)[-1] + "\n")
    boto3.DEFAULT_SESSION.events.register("before-call.lambda", record)

    class Invocations(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # the name http.server calls
            if self.path != INVOKE_PATH:
                self.send_error(404)
                return
            event = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            request_id = self.headers.get("Lambda-Runtime-Aws-Request-Id") or str(uuid.uuid4())
            try:
                answer: Any = handler(event, Context(request_id))
            except Exception as exc:
                answer = {"errorType": type(exc).__name__, "errorMessage": str(exc),
                          "stackTrace": traceback.format_exc().splitlines()}
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            print(format % args, file=sys.stderr, flush=True)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Invocations)
    port_file.write_text(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
