"""`alarmtop serve` as a real process, against what would have ended it or doubled it:
a second server on the same data folder (another port) is one clear line and a
non-zero exit, while the first runs on alone; a handler that raises SystemExit or
KeyboardInterrupt fails its attempt, and the process lives on to retry it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alarmtop.core import AlarmInfo, DurableObject, Runtime
from tests.server.test_quit_in_time import wait_for
from tests.tui.test_cli_mistakes import ROOT, RUN_S, env_without_tokens

APP = "tests.server.test_serve_process_guards:build_runtime"
SERVING = "alarmtop: serving"
RETRIED = "quitter: retry ran"


class Quitter(DurableObject):
    async def arm(self, delay_ms: int) -> None:
        await self.ctx.storage.set_alarm(self.ctx.now_ms() + delay_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        if info.retry_count == 0:
            raise SystemExit(3)
        if info.retry_count == 1:
            raise KeyboardInterrupt
        print(RETRIED, file=sys.stderr, flush=True)


class Hog(DurableObject):
    """An alarm handler that blocks the event loop for a minute."""

    async def arm(self, delay_ms: int) -> None:
        await self.ctx.storage.set_alarm(self.ctx.now_ms() + delay_ms)

    async def alarm(self, info: AlarmInfo) -> None:
        if info.retry_count == 0:
            print(HOGGING, file=sys.stderr, flush=True)
            time.sleep(60)  # noqa: ASYNC251 - the mistake under test


HOGGING = "hog: blocking the loop"


def build_runtime(data_dir: Path) -> Runtime:
    from alarmtop.core import RetryPolicy
    rt = Runtime(data_dir, retry_policy=RetryPolicy(initial_delay_s=0.1))
    rt.register(Quitter)
    rt.register(Hog)
    return rt


def serve(data: Path, log: Path) -> subprocess.Popen[str]:
    with log.open("w") as err:
        return subprocess.Popen(
            [sys.executable, "-c", "import sys; from alarmtop.tui.cli import main; "
             "sys.exit(main())", "serve", "--app", APP, "--data-dir", str(data),
             "--port", "0"],
            cwd=ROOT, env=env_without_tokens(), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=err, text=True)


def stop(proc: subprocess.Popen[str]) -> int:
    if proc.poll() is None:
        proc.terminate()
        try:
            return proc.wait(timeout=RUN_S)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def test_a_second_serve_on_the_same_data_folder_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = serve(data, tmp_path / "first.log")
    try:
        wait_for(tmp_path / "first.log", first, SERVING)
        second = serve(data, tmp_path / "second.log")
        try:
            code = second.wait(timeout=RUN_S)
        finally:
            stop(second)
        text = (tmp_path / "second.log").read_text()
        assert code != 0, text
        lines = [line for line in text.splitlines() if line.strip()]
        assert len(lines) == 1, text
        assert lines[0].startswith("alarmtop serve: the data folder") and \
            "in use by another alarmtop runtime" in lines[0], text
        assert f"process {first.pid}" in lines[0], text
        assert first.poll() is None  # the first one runs on
    finally:
        assert stop(first) == 0, (tmp_path / "first.log").read_text()


def test_a_handler_raising_system_exit_does_not_end_serve(tmp_path: Path) -> None:
    data, log = tmp_path / "data", tmp_path / "serve.log"

    async def arm() -> None:
        async with build_runtime(data) as rt:
            await rt.get(Quitter, "q").arm(1500)
    asyncio.run(arm())
    proc = serve(data, log)
    try:
        wait_for(log, proc, RETRIED)
        time.sleep(0.2)
        assert proc.poll() is None, log.read_text()
    finally:
        code = stop(proc)
    text = log.read_text()
    assert code == 0, text
    assert "Traceback" not in text, text

    async def after() -> None:
        async with build_runtime(data) as rt:
            assert await rt.alarm(Quitter, "q") is None  # the third attempt succeeded
    asyncio.run(after())


def test_serve_prunes_the_audit_log_as_its_flags_say(tmp_path: Path) -> None:
    data, log = tmp_path / "data", tmp_path / "serve.log"

    async def fill() -> None:
        async with build_runtime(data) as rt:
            for i in range(5):
                await rt.audit.record("tester", "rearm", f"Quitter/{i}")
    asyncio.run(fill())
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from alarmtop.tui.cli import main; "
             "sys.exit(main())", "serve", "--app", APP, "--data-dir", str(data),
             "--port", "0", "--audit-max-rows", "2", "--audit-retention-days", "off"],
            cwd=ROOT, env=env_without_tokens(), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=err, text=True)
    try:
        wait_for(log, proc, SERVING)
        deadline = time.monotonic() + RUN_S
        while "audit log: 3 rows pruned" not in log.read_text() and \
                time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
    finally:
        assert stop(proc) == 0, log.read_text()

    async def after() -> None:
        async with build_runtime(data) as rt:
            assert [r["target"] for r in await rt.audit.list()] == ["Quitter/4", "Quitter/3"]
    asyncio.run(after())


def test_the_audit_retention_flags() -> None:
    from alarmtop.tui.cli import UNSET, build_serve_parser
    parser = build_serve_parser()
    args = parser.parse_args(["--demo"])
    assert args.audit_retention_days is UNSET and args.audit_max_rows is UNSET
    args = parser.parse_args(["--demo", "--audit-retention-days", "7.5", "--audit-max-rows",
                              "off"])
    assert (args.audit_retention_days, args.audit_max_rows) == (7.5, None)
    for bad in (["--audit-retention-days", "0"], ["--audit-max-rows", "2.5"],
                ["--audit-max-rows", "-3"], ["--audit-retention-days", "soon"]):
        with pytest.raises(SystemExit):
            parser.parse_args(["--demo", *bad])


def test_sigterm_ends_serve_within_2_s_while_a_handler_blocks_the_loop(tmp_path: Path) -> None:
    """The loop never sees the signal: the exit promise is kept by the watchdog thread,
    which names the handler holding the loop."""
    import signal
    data, log = tmp_path / "data", tmp_path / "serve.log"

    async def arm() -> None:
        async with build_runtime(data) as rt:
            await rt.get(Hog, "h").arm(1500)
    asyncio.run(arm())
    proc = serve(data, log)
    try:
        wait_for(log, proc, HOGGING)
        time.sleep(0.3)
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=RUN_S)
        took = time.monotonic() - began
    finally:
        stop(proc)
    text = log.read_text()
    print(f"\nalarmtop serve ended {took * 1000:.0f} ms after SIGTERM, its loop blocked")
    assert code == 0, text
    assert took < 3 * 2.0, (took, text)
    assert "held by Hog/h.alarm() at" in text, text

    async def after() -> None:  # the attempt cut off is retried, as after a crash
        async with build_runtime(data) as rt:
            status = await rt.alarm(Hog, "h")
            assert status is not None and status.state in ("retrying", "running"), status
    asyncio.run(after())
