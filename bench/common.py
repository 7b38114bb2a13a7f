"""Shared helpers of the benchmark scripts: repeats, statistics, memory, output.

Each measured run can go to its own child process (`run_child`), so that peak RSS
belongs to that run alone and no state leaks between repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100) by nearest rank; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return float(ordered[rank])


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mb() -> float:
    """Resident set size now, from /proc (Linux)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def base_parser(doc: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure (>= 3)")
    parser.add_argument("--dir", default=None,
                        help="where the SQLite files go (default: a temporary folder; "
                             "keep it on the disk you want to measure)")
    parser.add_argument("--json", action="store_true", help="also print all results as JSON")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return parser


def work_dir(base: str | None, prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


def run_child(script: str, args: Sequence[str]) -> dict[str, Any]:
    """Run `script --child ...` in a fresh interpreter; its last stdout line is JSON."""
    proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise SystemExit(f"child run failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def run_child_body(body: Any, profile: str | None) -> dict[str, Any]:
    """Run a child's `asyncio` body, under pyinstrument when `profile` names a file
    (HTML there, text beside it)."""
    import asyncio

    if not profile:
        return dict(asyncio.run(body))
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.0005, async_mode="disabled")
    profiler.start()
    result = asyncio.run(body)
    profiler.stop()
    Path(profile).write_text(profiler.output_html())
    Path(profile).with_suffix(".txt").write_text(
        profiler.output_text(unicode=False, show_all=False))
    return dict(result)


def emit_child(result: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


class Table:
    """Figures collected over repeats, printed as median, min and max."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.rows: dict[str, list[float]] = {}
        self.units: dict[str, str] = {}

    def add(self, name: str, value: float, unit: str = "") -> None:
        self.rows.setdefault(name, []).append(value)
        self.units[name] = unit

    def print(self) -> None:
        print(f"\n== {self.title}")
        print(f"{'figure':<44}{'median':>14}{'min':>14}{'max':>14}  unit   (n)")
        for name, values in self.rows.items():
            med, lo, hi = statistics.median(values), min(values), max(values)
            print(f"{name:<44}{_fmt(med):>14}{_fmt(lo):>14}{_fmt(hi):>14}  "
                  f"{self.units[name]:<6} ({len(values)})")
        sys.stdout.flush()

    def as_dict(self) -> dict[str, Any]:
        return {name: {"median": statistics.median(v), "min": min(v), "max": max(v),
                       "unit": self.units[name], "runs": v}
                for name, v in self.rows.items()}


def _fmt(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def run_in_fresh_dirs(script: str, args: Any, prefix: str, opts: dict[str, Any], table: Table,
                      labels: dict[str, str], units: dict[str, str],
                      say: Callable[[dict[str, Any]], str]) -> None:
    """Run `script`'s child `--repeats` times (at least 3), each in a fresh process on a
    fresh data dir (under `--dir`), add each result to `table` and print it."""
    for _ in range(max(3, args.repeats)):
        root = work_dir(args.dir, prefix)
        child_opts = {"dir": str(root / "data"), **opts}
        try:
            result = run_child(script, ["--child", json.dumps(child_opts)])
        finally:
            shutil.rmtree(root, ignore_errors=True)
        for key, value in result.items():
            table.add(labels[key], value, units[key])
        print(f"  {say(result)}", file=sys.stderr)
    table.print()
