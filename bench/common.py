"""Shared helpers of the benchmark scripts: repeats, statistics, memory, output, and
what a run must say about itself (the machine, the configuration, the fsync rate).

Each measured run can go to its own child process (`run_child`), so that peak RSS
belongs to that run alone and no state leaks between repeats.

Honest figures, as the scripts print them:

- every figure is a median of at least 3 runs, with its min and max;
- a percentile is only computed from enough samples to mean what it says: at least
  `TAIL_ABOVE` samples must lie above it (p99 needs 200, p90 20), otherwise it is
  left out (`None`, printed "n/a") and the maximum is reported as the maximum;
- absolute figures are this machine's: each script prints the machine, its load
  and its fsync rate at the top (`print_config`);
- ratios against a peer pair runs of the same round (`rounds`, `paired_ratio`), so
  a ratio's min-max shows how much the machine moved between rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import resource
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TAIL_ABOVE = 2  # samples that must lie above a percentile for it to be reported


def samples_needed(p: float) -> int:
    """How many samples a p-th percentile needs (`TAIL_ABOVE` of them above it)."""
    if p <= 50:
        return 1
    return math.ceil(TAIL_ABOVE * 100 / (100 - p) - 1e-9)


def percentile(values: Sequence[float], p: float) -> float | None:
    """The p-th percentile (0-100) by nearest rank, or None when there are too few
    values for it to be more than the maximum under another name."""
    if len(values) < samples_needed(p):
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered) - 1e-9))  # nearest rank, from 1
    return float(ordered[min(rank, len(ordered)) - 1])


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mb() -> float:
    """Resident set size now, from /proc (Linux)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def loadavg() -> float:
    """The 1-minute load average."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def base_parser(doc: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure (>= 3)")
    parser.add_argument("--dir", default=None,
                        help="where the SQLite files go (default: a temporary folder; "
                             "keep it on the disk you want to measure)")
    parser.add_argument("--json", action="store_true", help="also print all results as JSON")
    parser.add_argument("--json-out", default=None, metavar="FILE",
                        help="write the results, the configuration and the ratios as JSON "
                             "to FILE (what bench/run_all.py reads)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return parser


def work_dir(base: str | None, prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


@contextlib.contextmanager
def work_area(base: str | None, prefix: str) -> Iterator[Path]:
    """A fresh folder, removed on the way out whatever the way: an error, Ctrl-C, or
    SIGTERM (turned into SystemExit here so that `finally` blocks run)."""
    exit_on_sigterm()
    root = work_dir(base, prefix)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def exit_on_sigterm() -> None:
    """Make SIGTERM raise SystemExit in the main thread, so clean-up code runs."""
    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, handler)


def run_child(script: str, args: Sequence[str]) -> dict[str, Any]:
    """Run `script --child ...` in a fresh interpreter; its last stdout line is JSON.
    On an interrupt, `subprocess.run` kills the child before re-raising."""
    proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise SystemExit(f"child run failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


class Profiling:
    """pyinstrument around the measured part of a child run only (not its set-up,
    which the profiler would slow past its deadline): `start()` where measuring
    starts, `stop()` where it ends; HTML at `path`, text beside it. Inert without
    a path."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._profiler: Any = None

    def start(self) -> None:
        if self.path and self._profiler is None:
            from pyinstrument import Profiler
            self._profiler = Profiler(interval=0.0005, async_mode="disabled")
            self._profiler.start()

    def stop(self) -> None:
        if self._profiler is None or not self.path:
            return
        self._profiler.stop()
        Path(self.path).write_text(self._profiler.output_html())
        Path(self.path).with_suffix(".txt").write_text(
            self._profiler.output_text(unicode=False, show_all=False))
        self._profiler = None


def run_child_body(body: Any, profile: str | None) -> dict[str, Any]:
    """Run a child's `asyncio` body, under pyinstrument when `profile` names a file
    (HTML there, text beside it). Bodies that can say where their measured part
    starts take a `Profiling` instead (see `alarm_fire.py`)."""
    import asyncio

    prof = Profiling(profile)
    prof.start()
    try:
        return dict(asyncio.run(body))
    finally:
        prof.stop()


def emit_child(result: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


# -- tables and ratios ---------------------------------------------------------------


def summary(values: Sequence[float | None]) -> tuple[float, float, float] | None:
    """(median, min, max) of the values that are there; None if none is."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    return statistics.median(present), min(present), max(present)


class Table:
    """Figures collected over repeats, printed as median, min and max. A figure may
    be None in a run (a percentile with too few samples): it is then left out."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.rows: dict[str, list[float | None]] = {}
        self.units: dict[str, str] = {}

    def add(self, name: str, value: float | None, unit: str = "") -> None:
        self.rows.setdefault(name, []).append(value)
        self.units[name] = unit

    def median(self, name: str) -> float | None:
        stats = summary(self.rows.get(name, []))
        return stats[0] if stats else None

    def print(self) -> None:
        print(f"\n== {self.title}")
        print(f"{'figure':<44}{'median':>14}{'min':>14}{'max':>14}  unit   (runs)")
        for name, values in self.rows.items():
            stats = summary(values)
            present = sum(v is not None for v in values)
            if stats is None:
                print(f"{name:<44}{'n/a':>14}{'':>14}{'':>14}  {self.units[name]:<6} "
                      f"(too few samples)")
                continue
            med, lo, hi = stats
            runs = f"{present}" if present == len(values) else f"{present} of {len(values)}"
            print(f"{name:<44}{_fmt(med):>14}{_fmt(lo):>14}{_fmt(hi):>14}  "
                  f"{self.units[name]:<6} ({runs})")
        sys.stdout.flush()

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, values in self.rows.items():
            stats = summary(values)
            med, lo, hi = stats if stats else (None, None, None)
            out[name] = {"median": med, "min": lo, "max": hi, "unit": self.units[name],
                         "runs": values}
        return out


def _fmt(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def paired_ratio(ours: Sequence[float | None], theirs: Sequence[float | None],
                 higher_is_better: bool = True) -> tuple[float, float, float] | None:
    """Median, min and max of the per-round ratios, in alarmtop's favour when > 1:
    ours / theirs for a rate, theirs / ours for a time or a cost. Run i of each list
    is round i, so each ratio compares runs made minutes apart."""
    ratios = []
    for a, b in zip(ours, theirs):
        if a is None or b is None or min(a, b) <= 0:
            continue
        ratios.append(a / b if higher_is_better else b / a)
    return summary(ratios)


class Ratios:
    """The ratios a script states, printed and handed to `run_all.py`."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.rows: list[dict[str, Any]] = []

    def add(self, name: str, stats: tuple[float, float, float] | None,
            bar: float | None = None, headline: bool = False, note: str = "") -> None:
        if stats is None:
            return
        med, lo, hi = stats
        self.rows.append({"name": name, "median": med, "min": lo, "max": hi, "bar": bar,
                          "met": None if bar is None else med >= bar,
                          "headline": headline, "note": note})

    def print(self, fsync: float | None = None) -> None:
        print(f"\n== {self.title} (median of the per-round ratios, min-max; > 1 favours "
              "alarmtop)")
        if fsync is not None:
            print(f"   this machine's fsync rate meanwhile: {fsync:,.0f} SQLite commits/s "
                  "(WAL, synchronous=FULL, one row each)")
        for r in self.rows:
            bar = ""
            if r["bar"] is not None:
                bar = f"  bar >= {r['bar']:g}x: {'met' if r['met'] else 'NOT met'}"
            mark = "*" if r["headline"] else " "
            print(f" {mark} {r['name']:<58}{r['median']:>7.1f}x  ({r['min']:.1f}-{r['max']:.1f})"
                  f"{bar}{'  ' + r['note'] if r['note'] else ''}")
        if any(r["headline"] for r in self.rows):
            print("   (* the headline: matched settings, production backends)")
        sys.stdout.flush()


def rounds(repeats: int, cells: Sequence[str],
           run: Callable[[str, int], None]) -> None:
    """Run every cell once per round, `max(3, repeats)` rounds: the repeats of peers
    are interleaved, so the runs that a ratio compares are close in time."""
    for i in range(max(3, repeats)):
        for cell in cells:
            run(cell, i)


# -- what a run says about itself ----------------------------------------------------


def fsync_rate(base: str | None, seconds: float = 1.0) -> float:
    """SQLite commits/s on the disk of `base`: WAL, synchronous=FULL, one row each
    (bench/physical_limits.py measures it at length)."""
    with work_area(base, "fsync-probe-") as root:
        conn = sqlite3.connect(root / "probe.db", isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE t (v TEXT)")
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            conn.execute("INSERT INTO t VALUES ('x')")
            n += 1
        rate = n / (time.perf_counter() - t0)
        conn.close()
    return rate


SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def sqlite_pragmas(conn: sqlite3.Connection) -> dict[str, str]:
    """The journal mode and synchronous level of this connection (per connection:
    a new connection to the same file may differ)."""
    sync = int(conn.execute("PRAGMA synchronous").fetchone()[0])
    return {"journal_mode": str(conn.execute("PRAGMA journal_mode").fetchone()[0]),
            "synchronous": SYNCHRONOUS.get(sync, str(sync))}


async def alarmtop_sqlite_settings(rt: Any) -> dict[str, str]:
    """alarmtop's runtime database settings, read on its own writer connection; a
    run that does not have WAL and synchronous=FULL is refused, not measured."""
    # `alarm_index` is the runtime database's name before core was laid out by role:
    # one script measures both sides of that change.
    database = getattr(rt.backend, "database", None) or rt.backend.alarm_index
    settings = await database.read(sqlite_pragmas)
    if settings != {"journal_mode": "wal", "synchronous": "FULL"}:
        raise SystemExit(f"alarmtop's runtime database is not WAL + FULL: {settings}")
    return dict(settings)


def version_of(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def code_version() -> str:
    """This checkout's commit, marked when the work tree has changes."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" + uncommitted changes" if dirty else "")


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "load_1min": loadavg(),
            "python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
            "alarmtop": code_version(), "aiosqlite": version_of("aiosqlite"),
            "when_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}


def print_config(title: str, config: dict[str, Any]) -> None:
    """The configuration a script ran, at the top of its output."""
    print(f"== configuration: {title}")
    for key, value in config.items():
        if isinstance(value, dict):
            print(f"   {key}:")
            for k, v in value.items():
                print(f"      {k}: {v}")
        else:
            print(f"   {key}: {value}")
    print("   (every absolute figure below is this machine's, at this load)")
    sys.stdout.flush()


def write_json(path: str | None, data: dict[str, Any]) -> None:
    if path:
        Path(path).write_text(json.dumps(data, indent=1))


@contextlib.contextmanager
def cpu_hogs(n: int) -> Iterator[None]:
    """`n` processes each keeping one core busy (a shared machine's neighbour), ended
    on the way out."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(n)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def run_in_fresh_dirs(script: str, args: Any, prefix: str, opts: dict[str, Any], table: Table,
                      labels: dict[str, str], units: dict[str, str],
                      say: Callable[[dict[str, Any]], str]) -> list[dict[str, Any]]:
    """Run `script`'s child `--repeats` times (at least 3), each in a fresh process on a
    fresh data dir (under `--dir`), add each result to `table` and print it."""
    results = []
    for _ in range(max(3, args.repeats)):
        with work_area(args.dir, prefix) as root:
            result = run_child(script, ["--child", json.dumps(
                {"dir": str(root / "data"), **opts})])
        for key, value in result.items():
            if key in labels:
                table.add(labels[key], value, units[key])
        results.append(result)
        print(f"  {say(result)}", file=sys.stderr)
    table.print()
    return results
