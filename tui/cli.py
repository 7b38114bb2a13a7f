"""The `alarmtop` command line.

`alarmtop --demo` runs the embedded demo runtime. Until the console lands it
prints the runtime's events, one line each; the same flag will open the console.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from alarmtop.core import Event, configure_logging


def format_event(event: Event) -> str:
    when = datetime.fromtimestamp(event.at_ms / 1000, tz=UTC).strftime("%H:%M:%S.%f")
    data = dict(event.data)
    obj = data.pop("object", "")
    rest = " ".join(f"{k}={v}" for k, v in data.items())
    return f"{when[:-3]}  {event.type:<24} {obj:<28} {rest}".rstrip()


async def _run_demo(data_dir: Path, duration: float | None) -> None:
    from alarmtop.examples.demo import build_demo_runtime, drive_demo

    rt = build_demo_runtime(data_dir)
    events = rt.events.subscribe()
    async with rt:
        driver = asyncio.create_task(drive_demo(rt))
        try:
            async with asyncio.timeout(duration):
                async for event in events:
                    print(format_event(event), flush=True)
        except TimeoutError:
            pass
        finally:
            driver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await driver


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="alarmtop", description="Watch and steer durable "
                                "objects, alarms and sagas.")
    p.add_argument("--demo", action="store_true", help="run the embedded demo runtime")
    p.add_argument("--data-dir", type=Path, help="where the demo keeps its data "
                   "(default: a fresh temporary folder)")
    p.add_argument("--duration", type=float, help="stop after this many seconds")
    p.add_argument("--log-json", action="store_true", help="structured logs as JSON lines")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(json_lines=args.log_json)
    if not args.demo:
        print("alarmtop: only --demo is available so far (the console and `serve` are "
              "being built); try: alarmtop --demo", file=sys.stderr)
        return 2
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="alarmtop-demo-"))
    print(f"alarmtop demo: data in {data_dir}; Ctrl-C to stop", file=sys.stderr)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_run_demo(data_dir, args.duration))
    return 0
