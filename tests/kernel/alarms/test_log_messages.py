"""What a user who configured no logging reads: every fact is in the message itself.

Python's last-resort handler prints WARNING and above as the bare message, so an
alarm failure that said only "alarm failed" hid the object, the attempt and the
error in fields nobody saw. These tests run a real runtime on a VirtualClock and
read the messages as they are logged, without calling `set_level` or
`configure_logging` (caplog sees what the default WARNING threshold lets through);
one runs a program in a fresh interpreter and reads its stderr. The structured
fields stay for JSON logs.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from alarmtop.core import (
    AlarmInfo,
    DurableObject,
    JsonFormatter,
    RetryPolicy,
    VirtualClock,
    configure_logging,
)
from alarmtop.core.durable import DurableContext, Duration, durable_execution
from alarmtop.core.model.errors import CorruptDatabase
from alarmtop.core.model.log_records import (
    alarm_failed_message,
    dead_letters_message,
    execution_message,
)
from alarmtop.examples.festival import FestivalServices, build_festival
from tests.conftest import RuntimeFactory

ERROR_AT = "ValueError: backend said no (at alarm:"


class Fails(DurableObject):
    async def arm(self) -> None:
        await self.ctx.storage.set_alarm(self.ctx.now_ms())

    async def alarm(self, info: AlarmInfo) -> None:
        raise ValueError("backend said no")


class Slow(DurableObject):
    async def arm(self) -> None:
        await self.ctx.storage.set_alarm(self.ctx.now_ms())

    async def alarm(self, info: AlarmInfo) -> None:
        await self.ctx.sleep(3600)


class Box(DurableObject):
    async def put(self, key: str, value: str) -> None:
        await self.ctx.storage.put(key, value)

    async def get(self, key: str) -> object:
        return await self.ctx.storage.get(key)


@durable_execution(name="boom")
async def boom(event: dict[str, object], ctx: DurableContext) -> None:
    raise ValueError("bad input")


@durable_execution(name="slow", timeout=60)
async def slow(event: dict[str, object], ctx: DurableContext) -> None:
    await ctx.wait(Duration(3600))


def damage(path: Path) -> None:
    path.write_bytes(b"not a database" * 512)


def messages(caplog: pytest.LogCaptureFixture, event: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if getattr(r, "alarmtop", {}).get("event") == event]


# -- the messages, pure -------------------------------------------------------------------

def test_an_alarm_failure_names_object_attempt_and_error() -> None:
    assert alarm_failed_message("Flaky/payments-0", 3, 7, "RuntimeError: down", False) == (
        "alarm failed: Flaky/payments-0, attempt 3 of 7: RuntimeError: down")


def test_the_last_failure_says_it_became_a_dead_letter_and_how_to_rearm_it() -> None:
    assert alarm_failed_message("Flaky/payments-0", 7, 7, "RuntimeError: down", True) == (
        "alarm failed: Flaky/payments-0, attempt 7 of 7: RuntimeError: down; that was the "
        "last attempt: the alarm is a dead letter until an operator re-arms it "
        "(rt.rearm('Flaky', 'payments-0'), or r in the console)")


def test_the_dead_letter_reminder_names_the_first_few() -> None:
    assert dead_letters_message(1, ["A/a"]).startswith(
        "1 dead letter waits for an operator: A/a (rt.dead_letters() lists them;")
    assert dead_letters_message(5, ["A/a", "A/b", "B/c"]).startswith(
        "5 dead letters wait for an operator: A/a, A/b, B/c and 2 more (")


def test_routine_execution_events_are_not_logged() -> None:
    for event in ("execution.started", "execution.suspended", "execution.succeeded",
                  "execution.aborted"):
        assert execution_message(event, "e1", "h", None, None) is None


# -- a real runtime -----------------------------------------------------------------------

async def test_every_attempt_of_a_default_ladder_is_one_readable_line(
        make_runtime: RuntimeFactory, clock: VirtualClock,
        caplog: pytest.LogCaptureFixture) -> None:
    """The default policy: 7 attempts over 126 s, warnings, then the dead letter as an
    error; the JSON line keeps the fields alerting keys on."""
    rt = await make_runtime(Fails)
    await rt.get(Fails, "payments-0").arm()
    await clock.advance(200)
    records = [r for r in caplog.records
               if getattr(r, "alarmtop", {}).get("event") == "alarm.failed"]
    lines = [r.getMessage() for r in records]
    assert [line.split(ERROR_AT)[0] for line in lines] == [
        f"alarm failed: Fails/payments-0, attempt {n} of 7: " for n in range(1, 8)]
    assert all(ERROR_AT in line for line in lines)
    assert lines[-1].endswith("; that was the last attempt: the alarm is a dead letter until "
                              "an operator re-arms it (rt.rearm('Fails', 'payments-0'), or r "
                              "in the console)")
    assert [r.levelno for r in records] == [logging.WARNING] * 6 + [logging.ERROR]
    last = json.loads(JsonFormatter().format(records[-1]))
    assert last["message"] == lines[-1]
    assert (last["object"], last["retry_count"], last["max_retries"], last["last_attempt"]) == (
        "Fails/payments-0", 6, 6, True)


async def test_an_attempt_cut_short_by_a_stop_says_so_at_the_next_start(
        make_runtime: RuntimeFactory, clock: VirtualClock,
        caplog: pytest.LogCaptureFixture) -> None:
    first = await make_runtime(Slow)
    await first.get(Slow, "s").arm()
    await clock.advance(1)
    await first.stop()
    await make_runtime(Slow)
    assert messages(caplog, "alarm.failed") == [
        "alarm failed: Slow/s, attempt 1 of 7: the runtime stopped while the handler ran "
        "(crash or shutdown)"]


async def test_the_sweeper_reminds_of_dead_letters_by_name(
        make_runtime: RuntimeFactory, clock: VirtualClock,
        caplog: pytest.LogCaptureFixture) -> None:
    rt = await make_runtime(Fails, sweep_interval=30,
                            policies={"Fails": RetryPolicy(max_retries=0)})
    for name in ("b", "a"):
        await rt.get(Fails, name).arm()
    await clock.advance(31)
    assert messages(caplog, "alarm.dead_letters") == [
        "2 dead letters wait for an operator: Fails/a, Fails/b (rt.dead_letters() lists "
        "them; rt.rearm(...), or r in the console, re-arms one)"]


async def test_a_failed_execution_is_logged_with_its_error(
        make_runtime: RuntimeFactory, clock: VirtualClock,
        caplog: pytest.LogCaptureFixture) -> None:
    rt = await make_runtime()
    rt.register_execution(boom)
    rt.register_execution(slow)
    await rt.executions.start("boom", {}, execution_id="b1")
    await rt.executions.start("slow", {}, execution_id="s1")
    await clock.advance(120)
    assert messages(caplog, "execution.failed") == [
        "execution b1 (boom) failed: ValueError: bad input"]
    assert messages(caplog, "execution.timed_out") == [
        "execution s1 (slow) timed out: Execution.Timeout: execution ran longer than 60s"]
    [record] = [r for r in caplog.records if r.getMessage().startswith("execution b1")]
    assert record.levelno == logging.ERROR
    assert json.loads(JsonFormatter().format(record))["error"] == {
        "ErrorType": "ValueError", "ErrorMessage": "bad input"}


async def test_an_execution_that_needs_a_human_says_why_and_what_to_do(
        make_runtime: RuntimeFactory, clock: VirtualClock,
        caplog: pytest.LogCaptureFixture) -> None:
    rt = await make_runtime()
    rt.register_execution(build_festival(FestivalServices(rt.ledger)))
    rt.faults.inject("x", "compensation_fail", None, step="compensate_open_viewing_page")
    await rt.executions.start("festival-stream", {"eventId": "x", "startsInSeconds": 3600},
                              execution_id="x")
    await clock.advance(0)
    [cb] = [c for c in (await rt.executions.describe("x"))["callbacks"]
            if c["name"] == "verdict"]
    await rt.executions.send_callback_success(cb["callback_id"], "cancel")
    await clock.advance(10)
    [line] = messages(caplog, "execution.needs_human")
    assert line.startswith("execution x (festival-stream) needs a human: "
                           "compensate_open_viewing_page failed (injected fault ")
    assert line.endswith("; an operator resolves it by hand, retries a failed compensation "
                         "or aborts it (rt.executions.resolve / retry_compensation / abort, "
                         "or h, R, a in the console)")


@pytest.mark.sqlite_only  # reads the SQLite files themselves
async def test_a_quarantined_object_database_is_named_with_what_to_do(
        make_runtime: RuntimeFactory, caplog: pytest.LogCaptureFixture) -> None:
    old = await make_runtime(Box)
    await old.get(Box, "victim").put("k", "v")
    await old.stop()
    path: Path = old.backend.object_path("Box", "victim")  # type: ignore[attr-defined]
    damage(path)
    rt = await make_runtime(Box)
    with pytest.raises(CorruptDatabase):
        await rt.get(Box, "victim").get("k")
    [line] = messages(caplog, "storage.quarantined")
    assert line.startswith("the database of object Box/victim is damaged (")
    assert f"): {path} moved to {rt.data_dir / 'quarantine'}" in line
    assert line.endswith(".json is deleted to let it start empty)")
    assert f"the object refuses events until a good copy is restored to {path}" in line


def test_a_program_without_logging_configuration_prints_the_lines(tmp_path: Path) -> None:
    """The real thing: a fresh interpreter, no logging set up, stderr as the user sees it."""
    program = textwrap.dedent("""
        import asyncio
        from alarmtop.core import AlarmInfo, DurableObject, RetryPolicy, Runtime, VirtualClock

        class Flaky(DurableObject):
            async def arm(self):
                await self.ctx.storage.set_alarm(self.ctx.now_ms())

            async def alarm(self, info: AlarmInfo):
                raise RuntimeError("payment backend down")

        async def main():
            clock = VirtualClock()
            rt = Runtime("data", clock=clock)
            rt.register(Flaky, retry_policy=RetryPolicy(max_retries=1))
            async with rt:
                await rt.get(Flaky, "payments-0").arm()
                await clock.advance(10)

        asyncio.run(main())
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    done = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    error = "RuntimeError: payment backend down (at alarm:10)"
    assert done.stderr.splitlines() == [
        f"alarm failed: Flaky/payments-0, attempt 1 of 2: {error}",
        f"alarm failed: Flaky/payments-0, attempt 2 of 2: {error}; that was the last "
        "attempt: the alarm is a dead letter until an operator re-arms it "
        "(rt.rearm('Flaky', 'payments-0'), or r in the console)"]


@pytest.fixture
def alarmtop_logger() -> Iterator[logging.Logger]:
    """The package logger, put back as it was after `configure_logging` changed it."""
    logger = logging.getLogger("alarmtop")
    handlers, level = logger.handlers[:], logger.level
    yield logger
    logger.handlers[:] = handlers
    logger.setLevel(level)


@pytest.mark.parametrize("json_lines", [False, True], ids=["plain", "json"])
async def test_configured_logs_are_the_sentence_or_its_fields(
        make_runtime: RuntimeFactory, clock: VirtualClock, json_lines: bool,
        alarmtop_logger: logging.Logger, capsys: pytest.CaptureFixture[str]) -> None:
    """Plain lines end with the message (the fields would only repeat it); JSON lines
    carry the message and every field as top-level keys."""
    configure_logging(json_lines=json_lines)
    rt = await make_runtime(Fails, policies={"Fails": RetryPolicy(max_retries=0)})
    await rt.get(Fails, "f").arm()
    await clock.advance(1)
    [line] = [x for x in capsys.readouterr().err.splitlines() if "alarm" in x]
    head = f"alarm failed: Fails/f, attempt 1 of 1: {ERROR_AT}"
    if not json_lines:
        assert f" ERROR alarmtop.alarms: {head}" in line
        assert line.endswith("(rt.rearm('Fails', 'f'), or r in the console)")
        return
    record = json.loads(line)
    assert record["message"].startswith(head)
    assert (record["level"], record["event"], record["object"], record["last_attempt"]) == (
        "error", "alarm.failed", "Fails/f", True)
    assert record["error"].startswith(ERROR_AT)


async def test_an_alarm_whose_shard_moved_as_it_was_popped_is_one_line_without_a_trace(
        make_runtime: RuntimeFactory, caplog: pytest.LogCaptureFixture) -> None:
    """In a fleet, a shard may move between an alarm's pop and its attempt's write:
    nothing was kept and the new owner runs it. That is said in one warning line,
    not as an error with a traceback; an attempt that could not be written for any
    other reason still is one."""
    from alarmtop.core.model.alarm_policy import AlarmRecord, AlarmState
    from alarmtop.core.model.errors import LeaseLost, StorageError
    rt = await make_runtime()
    rec = AlarmRecord("Job", "j1", 5, AlarmState.PENDING, 0, None, None)
    rt.scheduler._dispatch_failed(rec, LeaseLost("this node (a) no longer holds shard(s) [3]"))
    rt.scheduler._dispatch_failed(rec, StorageError("the disk is full"))
    moved, failed = [r for r in caplog.records if "Job/j1" in r.getMessage()]
    assert (moved.levelno, moved.exc_info) == (logging.WARNING, None)
    assert moved.getMessage() == ("alarm of Job/j1 not run here: this node (a) no longer "
                                  "holds shard(s) [3]")
    assert failed.levelno == logging.ERROR and failed.exc_info is not None
