"""The runtime `alarmtop serve --app tests.server.lambda_app:build` runs in the tests of
the Lambda API over HTTP: real AWS SDK handlers, registered with `register_lambda`.

- `steps`: `{"n": N}` -> N steps, their results as a list;
- `cb`: a callback named `approval` (timeout and heartbeat from the input, 0: none),
  then a step: `"approved:<result>"`;
- `remote`: the handler behind the endpoint `ALARMTOP_TEST_ENDPOINT` (when set),
  a process of its own that checkpoints back through the Lambda API.

`ALARMTOP_TEST_RESPONSE_BYTES` makes the response limit small: an invocation's state
then comes in pages, and the SDK reads the rest with GetDurableExecutionState.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from alarmtop.core import AwsLimits, AwsOptions, Runtime
from alarmtop.core.model.alarm_policy import RetryPolicy
from tests.kernel.executions import aws_handlers as h

# A failed invocation of `remote` runs again at once, twice: the tests of a handler
# that does not answer reach its dead letter in a second or two.
REMOTE_RETRIES = RetryPolicy(max_retries=2, initial_delay_s=0.1, max_delay_s=0.2)


def build(data_dir: Path, backend: Any = None) -> Runtime:
    timeout = float(os.environ.get("ALARMTOP_TEST_INVOCATION_TIMEOUT_S", "900"))
    limits = AwsLimits(response_bytes=int(os.environ.get("ALARMTOP_TEST_RESPONSE_BYTES",
                                                          6 * 1024 * 1024)))
    rt = Runtime(data_dir, backend=backend, sweep_interval=1.0,
                 aws=AwsOptions(limits=limits, invocation_timeout_s=timeout, liveness_s=0.5))
    rt.register_lambda("steps", h.many_steps)
    rt.register_lambda("cb", h.callback_then_step)
    endpoint = os.environ.get("ALARMTOP_TEST_ENDPOINT")
    if endpoint:
        rt.register_lambda("remote", None, endpoint=endpoint, retries=REMOTE_RETRIES)
    return rt
