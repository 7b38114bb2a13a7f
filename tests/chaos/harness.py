"""The chaos harness: kill a loaded runtime with SIGKILL again and again, then prove
nothing acknowledged was lost.

Each round starts the workload (`workload.py`, a real runtime process on the
wall clock) on the same data folder and kills it with SIGKILL once its record
has grown by a number of lines drawn from the seeded generator: sometimes during
start-up and crash recovery, sometimes in the middle of the load. After the last
kill the workload runs once more in settle mode (no new load; verdicts and
operator actions still owed are sent; it waits until nothing is due) and dumps
the final state; `invariants.check` compares it with the record.

    python -m tests.chaos.harness --kills 200 --seed 7

prints the kills survived, the alarms and steps checked and the violations found,
and exits 1 when there is any (with the seed, to reproduce the run). The seed
fixes the load, the injected faults and the kill points (counted in record
lines); the exact instants still depend on the machine's speed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.chaos.invariants import Report, check
from tests.chaos.workload import SETTLE_DEADLINE_S, read_record

POLL_S = 0.005
ROUND_DEADLINE_S = 60.0
ROOT = Path(__file__).resolve().parents[2]


class HarnessError(RuntimeError):
    """The harness itself could not do its job (the workload died on its own, hung...)."""


@dataclass
class Paths:
    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def record(self) -> Path:
        return self.root / "record.jsonl"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    def stderr(self, name: str) -> Path:
        return self.root / f"stderr-{name}.txt"


class LineCounter:
    """Counts the record's lines incrementally (the file only grows)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.lines = 0

    def count(self) -> int:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return 0
        self.offset += len(chunk)
        self.lines += chunk.count(b"\n")
        return self.lines


def _spawn(args: list[str], stderr: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with stderr.open("ab") as err:
        return subprocess.Popen([sys.executable, "-m", "tests.chaos.workload", *args],
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, env=env)


def _tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except FileNotFoundError:
        return "(no stderr)"


def kill_target(rng: random.Random) -> int:
    """How many record lines a round may add before its kill.

    A few lines: during start-up and crash recovery; more: in the middle of the load."""
    r = rng.random()
    if r < 0.15:
        return rng.randint(1, 4)
    if r < 0.6:
        return rng.randint(5, 120)
    return rng.randint(120, 900)


def kill_round(paths: Paths, seed: int, round_no: int, rng: random.Random,
               counter: LineCounter) -> None:
    """Start the workload, let the record grow by a seeded amount, SIGKILL it."""
    target = counter.count() + kill_target(rng)
    proc = _spawn(["run", str(paths.data), str(paths.record), str(seed), str(round_no)],
                  paths.stderr(f"round{round_no}"))
    deadline = time.monotonic() + ROUND_DEADLINE_S
    try:
        while counter.count() < target:
            if proc.poll() is not None:
                raise HarnessError(f"round {round_no}: the workload exited by itself "
                                   f"(code {proc.returncode}):\n"
                                   f"{_tail(paths.stderr(f'round{round_no}'))}")
            if time.monotonic() > deadline:
                raise HarnessError(f"round {round_no}: the record did not grow to {target} "
                                   f"lines within {ROUND_DEADLINE_S:g} s:\n"
                                   f"{_tail(paths.stderr(f'round{round_no}'))}")
            time.sleep(POLL_S)  # polling another process, with a deadline
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def settle(paths: Paths, seed: int) -> dict[str, object]:
    """Run the workload to quiet and read back its final state."""
    proc = _spawn(["settle", str(paths.data), str(paths.record), str(seed), str(paths.state)],
                  paths.stderr("settle"))
    try:
        proc.wait(timeout=SETTLE_DEADLINE_S + 60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise HarnessError(f"settle did not finish:\n{_tail(paths.stderr('settle'))}") from None
    if proc.returncode != 0:
        raise HarnessError(f"settle failed (code {proc.returncode}):\n"
                           f"{_tail(paths.stderr('settle'))}")
    state: dict[str, object] = json.loads(paths.state.read_text())
    return state


def run(seed: int, kills: int, workdir: Path, progress: bool = False) -> Report:
    """`kills` SIGKILL rounds and a settle on one data folder; the invariants' report."""
    paths = Paths(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    counter = LineCounter(paths.record)
    started = time.monotonic()
    for round_no in range(kills):
        kill_round(paths, seed, round_no, rng, counter)
        if progress and (round_no + 1) % 10 == 0:
            print(f"  {round_no + 1}/{kills} kills, {counter.count()} record lines, "
                  f"{time.monotonic() - started:.0f} s", flush=True)
    state = settle(paths, seed)
    return check(read_record(paths.record), state, seed, kills=kills)


def repro(seed: int, kills: int) -> str:
    return f"python -m tests.chaos.harness --kills {kills} --seed {seed}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=200, help="SIGKILL rounds (default 200)")
    parser.add_argument("--seed", type=int, default=None, help="seed (default: random, printed)")
    parser.add_argument("--dir", type=Path, default=None,
                        help="work folder (default: a temporary one, removed on success)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    workdir = args.dir or Path(tempfile.mkdtemp(prefix=f"chaos-{seed}-"))
    print(f"chaos: seed {seed}, {args.kills} kills, work folder {workdir}", flush=True)
    started = time.monotonic()
    try:
        report = run(seed, args.kills, workdir, progress=True)
    except HarnessError as exc:
        print(f"HARNESS ERROR (seed {seed}): {exc}\nreproduce: {repro(seed, args.kills)}")
        return 2
    print(report.summary())
    print(f"time: {time.monotonic() - started:.0f} s")
    for v in report.violations[:50]:
        print(f"  VIOLATION: {v}")
    if report.violations:
        print(f"FAILED with seed {seed}; data kept in {workdir}; "
              f"reproduce: {repro(seed, args.kills)}")
        return 1
    if args.dir is None and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
