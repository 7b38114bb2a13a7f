"""alarmtop.testing: test your own objects and executions on a virtual clock.

Installed with alarmtop, a pytest plugin (entry point `pytest11`, no conftest
needed) gives every test:

* `virtual_clock`: a fresh `VirtualClock`.
* `alarmtop_runtime`: a started `Runtime` on that clock and a temporary data dir
  of the test's own, stopped after the test. `@pytest.mark.alarmtop(register=[
  MyObject, my_handler], **runtime_options)` registers classes and
  `@durable_execution` handlers and passes options to `Runtime`
  (`policies={"MyObject": RetryPolicy(...)}` too); `rt.register(...)` works after
  start as well.
* `alarmtop_runtime_factory`: `await factory(*classes_and_handlers, **options)`
  for more than one runtime in a test (they share the data dir, as a restart
  would), each stopped after the test.

The fixtures that start runtimes are async: they need pytest-asyncio
(`pip install 'alarmtop[testing]'`) and work in its auto mode and in strict mode
(mark the tests `@pytest.mark.asyncio`). Without pytest-asyncio, `virtual_clock`
still works and the async fixtures fail saying what to install.

Helpers (this module; no pytest needed): `until`, `until_dead`, `until_status`,
`waiting_callback`, `send_callback`, `fail_callback`, `attempts`, `ladder`,
`inject_fault`. Those that wait advance the virtual clock and raise `NotReached`
within a bound instead of looping forever.
"""

from alarmtop.testing.helpers import (
    DAY_S,
    FINISHED,
    Fault,
    GiveUp,
    NotReached,
    attempts,
    describe_alarm,
    describe_execution,
    fail_callback,
    inject_fault,
    ladder,
    send_callback,
    until,
    until_dead,
    until_status,
    virtual_clock_of,
    waiting_callback,
)

START_MS = 1_800_000_000_000  # where `virtual_clock` starts: 2027-01-15T08:00:00Z

__all__ = [
    "DAY_S", "FINISHED", "START_MS", "Fault", "GiveUp", "NotReached", "attempts",
    "describe_alarm", "describe_execution", "fail_callback", "inject_fault", "ladder",
    "send_callback", "until", "until_dead", "until_status", "virtual_clock_of",
    "waiting_callback",
]
